package cluster

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/edgerate/edge/window"
	"github.com/redis/rueidis"
)

// maxPipeline bounds the commands of one flush round trip; a flush of more
// keys takes several.
const maxPipeline = 4096

// batch gathers one domain's counts between flushes: in batched mode all of
// them, in exact mode those made without Redis.
type batch struct {
	d       *Domain
	mu      sync.Mutex
	pending map[pendKey]pend
	spare   map[pendKey]pend // the map of the flush before, cleared
}

// pendKey is one key of the domain's store in one period.
type pendKey struct {
	k     window.Key
	start int64 // period start, Unix s
}

// pend is what a key counted since the last flush.
type pend struct {
	rule   int
	prefix string
	delta  int64
}

func newBatch(d *Domain) *batch {
	return &batch{d: d, pending: make(map[pendKey]pend), spare: make(map[pendKey]pend)}
}

// add counts delta for k under rule i at now and returns the key's Redis
// prefix and period start. The prefix is computed once per key and flush.
func (b *batch) add(r *domainRule, i int, k window.Key, key []byte, now time.Time, delta int64) (string, int64) {
	pk := pendKey{k: k, start: r.periodStart(now)}
	b.mu.Lock()
	if p, ok := b.pending[pk]; ok {
		p.delta += delta
		b.pending[pk] = p
		b.mu.Unlock()
		return p.prefix, pk.start
	}
	b.mu.Unlock()
	prefix := r.prefix(key) // hashed outside the lock
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pending[pk] // another request may have added it meanwhile
	if p.prefix == "" {
		p.rule, p.prefix = i, prefix
	}
	p.delta += delta
	b.pending[pk] = p
	return p.prefix, pk.start
}

// refund takes back n units counted for k in the period starting at start.
func (b *batch) refund(r *domainRule, i int, k window.Key, prefix string, start, n int64) {
	pk := pendKey{k: k, start: start}
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.pending[pk]
	if !ok {
		p = pend{rule: i, prefix: prefix}
	}
	p.delta -= n
	b.pending[pk] = p
}

// flushItem is one key's counts in a flush.
type flushItem struct {
	b   *batch
	key pendKey
	p   pend
}

// take moves the batch's counts into items.
func (b *batch) take(items []flushItem) []flushItem {
	b.mu.Lock()
	m := b.pending
	b.pending, b.spare = b.spare, nil
	b.mu.Unlock()
	for k, p := range m {
		items = append(items, flushItem{b: b, key: k, p: p})
	}
	clear(m)
	b.mu.Lock()
	b.spare = m
	b.mu.Unlock()
	return items
}

// keep puts back, at now, a count that a flush could not send, for the next
// flush. Counts of a period before the previous one are dropped (they can
// no longer change a decision), and so are counts of keys beyond the
// domain store's capacity, which bounds the batch while Redis is away.
func (b *batch) keep(it flushItem, now time.Time) {
	r := &b.d.rules[it.p.rule]
	if it.key.start < r.periodStart(now)-r.periodSeconds {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.pending[it.key]
	if !ok {
		if len(b.pending) >= b.d.store.Capacity() {
			return
		}
		p = pend{rule: it.p.rule, prefix: it.p.prefix}
	}
	p.delta += it.p.delta
	b.pending[it.key] = p
}

// merge takes the PoP-wide counts of key (in vals, as the flush script of
// its rule returns them) into the domain's store, with what this node
// counted since they were read added: a window's counts {prev, curr} to
// the current period; a quota's curr to its calendar period; a bucket's level (bucketScript's reply) at now.
func (b *batch) merge(key pendKey, vals []int64, now time.Time) {
	if b.d.exact() {
		return // the store holds only what was decided without Redis
	}
	b.mu.Lock()
	own := max(b.pending[key].delta, 0)
	b.mu.Unlock()
	switch {
	case b.d.rules[key.k.Rule()].quota():
		b.d.store.MergeQuota(key.k, key.start, vals[1]+own)
	case len(vals) == 2:
		b.d.store.Merge(key.k, time.Unix(key.start, 0), vals[0], vals[1]+own)
	case len(vals) == 5:
		b.d.store.MergeBucket(key.k, now, window.Level{Nanos: vals[2], Frac: vals[3]}, own)
	}
}

// flusher shares the batched counts every batch interval, and once more
// when the Client closes.
func (c *Client) flusher() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.BatchInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			c.flush()
			return
		case <-t.C:
			c.flush()
		}
	}
}

// flush adds every batch's counts to Redis and merges back the PoP-wide
// counts, in one pipelined round trip per maxPipeline keys. Counts it
// cannot send (the circuit is open, or the round trip fails) are kept for
// the next flush, as long as their period can still matter: the counts a
// node makes while Redis is away, by its failure mode, reach the PoP when
// Redis is back. A round trip that fails after Redis applied part of it
// is sent again whole, which can count those requests twice: the strict
// side.
func (c *Client) flush() {
	c.mu.Lock()
	var items []flushItem
	var retired []*batch
	for b, r := range c.batches {
		items = b.take(items)
		if r {
			retired = append(retired, b)
			delete(c.batches, b)
		}
	}
	c.mu.Unlock()
	if len(items) == 0 {
		return
	}
	if !c.br.allow(time.Now()) {
		c.keep(items, retired)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.BatchInterval)
	defer cancel()
	for len(items) > 0 {
		n := min(len(items), maxPipeline)
		if err := c.flushChunk(ctx, items[:n]); err != nil {
			c.keep(items, retired)
			return
		}
		items = items[n:]
	}
}

// keep returns unsent items to their batches, and registers the retired
// batches again, still retired: the next flush sends what they kept, or
// drops them once they hold nothing.
func (c *Client) keep(items []flushItem, retired []*batch) {
	now := time.Now()
	for _, it := range items {
		it.b.keep(it, now)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range retired {
		c.batches[b] = true
	}
}

func (c *Client) flushChunk(ctx context.Context, items []flushItem) error {
	start := time.Now()
	res := c.pipeline(ctx, len(items), func(rdb rueidis.Client, i int, eval bool) rueidis.Completed {
		return flushCommand(rdb, items[i], eval)
	})
	err := firstError(res)
	c.done("flush", start, err)
	if err != nil {
		return err
	}
	now := time.Now()
	for i, it := range items {
		if v, err := res[i].AsIntSlice(); err == nil {
			it.b.merge(it.key, v, now)
		}
	}
	return nil
}

// flushCommand is the flush script for one key: EVALSHA, or EVAL. A
// window's adds the node's count to the period's; a bucket's takes the
// units the node took from the shared bucket (bucketScript charges them,
// or gives back net refunds), which may go down to −burst tokens: the
// overshoot that deciding locally brings is paid back by every node
// (Databricks' token buckets do the same), and reads the level back.
func flushCommand(rdb rueidis.Client, it flushItem, eval bool) rueidis.Completed {
	r := &it.b.d.rules[it.p.rule]
	s, args := flushScript, []string{
		strconv.FormatInt(it.key.start, 10),
		strconv.FormatInt(r.periodSeconds, 10),
		strconv.FormatInt(it.p.delta, 10),
	}
	if r.bucket() {
		mode, n := "c", it.p.delta
		switch {
		case n < 0:
			mode, n = "r", -n
		case n == 0:
			mode = "p"
		}
		s, args = bucketScript, r.bucketArgs(mode, n, "")
	}
	return scriptCommand(rdb, s, it.p.prefix, args, eval)
}

func anyNoScript(res []rueidis.RedisResult) bool {
	for _, r := range res {
		if isNoScript(r.Error()) {
			return true
		}
	}
	return false
}

func isNoScript(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && re.IsNoScript()
}
