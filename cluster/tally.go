package cluster

import (
	"context"
	"strconv"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
	"github.com/redis/rueidis"
)

// This file holds a request's tally against the shared store: its
// decisions in Redis (or, when Redis fails, by on_store_failure), the
// refunds, charges and releases that follow them, and BeginLocal's tally,
// which decides only what needs no round trip.

// Begin opens one request's tally: its decisions share one time budget
// for their round trips to Redis, from the first on.
func (d *Domain) Begin() window.Tally { return &tally{d: d} }

// tally is one request's use of the shared store: the budget its round
// trips share, and what its rules counted where. It is not safe for
// concurrent use.
type tally struct {
	d           *Domain
	unavailable bool // a decision found Redis out of reach, failing closed
	ctx         context.Context
	cancel      context.CancelFunc
	counted     []counted
	buf         [4]counted
}

// counted is what a Refund needs of a request that a shared decision
// counted.
type counted struct {
	rule    int
	prefix  string
	start   int64 // period start, Unix s
	batched bool  // counted in the batch (else in Redis, exact mode)
	n       int64 // the units counted
	k       window.Key
	// counts are what Redis judged by (exact mode), so that a refund can
	// describe the quota left as the store would after taking it back.
	counts window.Counts
	quota  window.QuotaCounts // likewise, for a quota
	// A concurrency rule's slot (lease.go): the lease in Redis, or a slot
	// the failure mode took in the store (local); released once given
	// back.
	lease    string
	local    bool
	released bool
}

// context returns the request's context, bounded by budget from the first
// round trip on.
func (t *tally) context(budget time.Duration) context.Context {
	if t.ctx == nil {
		t.ctx, t.cancel = context.WithTimeout(context.Background(), budget)
	}
	return t.ctx
}

func (t *tally) record(c counted) {
	if t.counted == nil {
		t.counted = t.buf[:0]
	}
	t.counted = append(t.counted, c)
}

// find returns what the tally counted for key k under rule, or nil. A
// request of the proxy has one decision per rule; a call of the rate limit
// service (package rls) may have several under one rule, for different
// keys, so both must match.
func (t *tally) find(rule int, k window.Key) *counted {
	for i := range t.counted {
		if t.counted[i].rule == rule && t.counted[i].k == k {
			return &t.counted[i]
		}
	}
	return nil
}

// End releases the request's budget.
func (t *tally) End() {
	if t.cancel != nil {
		t.cancel()
	}
}

// Decide decides one request of cost units under the rule of id.Key for
// the client named id.Name (the bytes the proxy builds for the rule; never
// id.Key, whose hash is seeded per process), as window.Store.AllowN would,
// under every algorithm, in both modes. If Redis cannot decide, the failure mode does
// (Decision.Fallback); failing closed, the Decision is Unavailable.
func (t *tally) Decide(id window.ID, cost int64, now time.Time) window.Decision {
	if cost < 0 || cost > window.MaxCost {
		return window.Decision{}
	}
	d, i, k := t.d, id.Key.Rule(), id.Key
	r := &d.rules[i]
	if r.slots() {
		return t.acquire(i, id, now)
	}
	if !d.exact() {
		if t.unavailable || d.c.br.State() != Closed {
			return t.fallback(i, k, id.Name, cost, now, false)
		}
		dec := d.store.AllowN(k, now, cost)
		if cost > 0 && (dec.Allowed || r.Limit.CountBlocked && dec.RetryAfter > 0) {
			prefix, start := d.batch.add(r, i, k, id.Name, now, cost)
			t.record(counted{rule: i, prefix: prefix, start: start, batched: true, k: k, n: cost})
		}
		return dec
	}
	if dec, ok := d.cachedBlock(r, k, cost, now); ok {
		return dec
	}
	start := time.Now()
	if t.unavailable || !d.c.br.allow(start) {
		return t.fallback(i, k, id.Name, cost, now, false)
	}
	j, err := t.judge(r, r.prefix(id.Name), cost, now)
	d.c.done("decide", start, err)
	return t.settle(id, cost, now, j, err)
}

// judgement is what Redis's answer to a deciding script means: the
// Decision, what it counted (n 0 if nothing) and the mitigation left.
type judgement struct {
	dec        window.Decision
	c          counted
	mitigation time.Duration
}

// settle ends an exact-mode decision that Redis was asked for: the failure
// mode decides if Redis did not answer (err), what Redis counted is kept
// for a refund, and a block that will last is remembered.
func (t *tally) settle(id window.ID, cost int64, now time.Time, j judgement, err error) window.Decision {
	d, i, k := t.d, id.Key.Rule(), id.Key
	if err != nil {
		return t.fallback(i, k, id.Name, cost, now, true)
	}
	if j.c.n > 0 {
		j.c.rule, j.c.k = i, k
		t.record(j.c)
	}
	// Cached only where the whole wait is as refused as now: no mitigation
	// ends before it (Mitigated stays true throughout).
	dec := j.dec
	if cost <= 1 && !d.rules[i].Limit.CountBlocked && !dec.Allowed && dec.RetryAfter > 0 &&
		(j.mitigation == 0 || j.mitigation >= dec.RetryAfter) {
		d.blocked.Add(k, blockedUntil{until: now.Add(dec.RetryAfter), mitigated: dec.Mitigated})
	}
	return dec
}

// cachedBlock refuses, in exact mode, a request that needs one unit (cost
// 0 or 1) while a block found for such a request lasts: the key cannot
// change state until then, its own requests all blocked and counted
// nowhere. It reports false where the cache cannot decide.
func (d *Domain) cachedBlock(r *domainRule, k window.Key, cost int64, now time.Time) (window.Decision, bool) {
	if cost > 1 || r.Limit.CountBlocked {
		return window.Decision{}, false
	}
	b, ok := d.blocked.Get(k)
	if !ok || !now.Before(b.until) {
		return window.Decision{}, false
	}
	wait := b.until.Sub(now)
	return window.Decision{RetryAfter: wait, Reset: wait, Mitigated: b.mitigated}, true
}

// BeginLocal opens a tally that decides only what needs no round trip to
// Redis: in batched mode every decision (made on this node, as Begin's
// are), in exact mode a request the blocked-key cache refuses. Any other
// decision comes back Unavailable, having counted nothing: the caller gives
// back what the tally counted and decides the request again through Begin.
// The proxy's fast path refuses at the wire with it. An exact-mode tally
// holds nothing but the Domain, and allocates nothing.
func (d *Domain) BeginLocal() window.Tally {
	if !d.exact() {
		return d.Begin()
	}
	return localTally{d}
}

// localTally is BeginLocal's tally in exact mode.
type localTally struct{ d *Domain }

func (t localTally) Decide(id window.ID, cost int64, now time.Time) window.Decision {
	r := &t.d.rules[id.Key.Rule()]
	if !r.slots() && cost >= 0 {
		if dec, ok := t.d.cachedBlock(r, id.Key, cost, now); ok {
			return dec
		}
	}
	return window.Decision{Unavailable: true}
}

// Refund does what a tally's Refund does for a decision that counted
// nothing in Redis, the only kind a localTally makes.
func (t localTally) Refund(id window.ID, dec window.Decision, now time.Time) window.Decision {
	return t.d.store.Refund(id.Key, dec, now)
}

// Charge and Release have nothing to do: a localTally allows nothing.
func (localTally) Charge(window.ID, int64, time.Time) {}
func (localTally) Release(window.ID, time.Time)       {}
func (localTally) End()                               {}

// judge runs r's deciding script for a request of cost units of the
// client whose keys start with prefix.
func (t *tally) judge(r *domainRule, prefix string, cost int64, now time.Time) (judgement, error) {
	s, args := t.d.judgeCall(r, cost, now)
	vals, err := t.d.c.exec(t.context(t.d.c.cfg.Budget), s, []string{prefix}, args).AsIntSlice()
	if err != nil {
		return judgement{}, err
	}
	return t.judged(r, prefix, cost, vals)
}

// judgeCall is r's deciding script and its ARGV for a request of cost
// units at now: a round trip of its own (judge), or one command of a
// call's pipeline (DecideMany).
func (d *Domain) judgeCall(r *domainRule, cost int64, now time.Time) (*script, []string) {
	switch {
	case r.bucket():
		return bucketScript, r.bucketArgs("d", cost, d.timeArg(now))
	case r.quota():
		return quotaScript, d.quotaArgs(r, "d", cost, now)
	}
	return r.decide, append(r.args[:len(r.args):len(r.args)], strconv.FormatInt(cost, 10), d.timeArg(now))
}

// judged is what vals, the reply of judgeCall's script for the client
// whose keys start with prefix, means for a request of cost units.
func (t *tally) judged(r *domainRule, prefix string, cost int64, vals []int64) (judgement, error) {
	if r.bucket() {
		b, c, err := bucketReply(prefix, cost, vals)
		if err != nil {
			return judgement{}, err
		}
		return judgement{r.Limit.JudgeBucket(b, cost), c, b.Mitigation}, nil
	}
	if r.quota() {
		q, c, err := quotaReply(prefix, cost, vals)
		if err != nil {
			return judgement{}, err
		}
		return judgement{r.Limit.JudgeQuota(q, cost), c, q.Mitigation}, nil
	}
	if err := wantInts(vals, 7, "decide"); err != nil {
		return judgement{}, err
	}
	counts := window.Counts{
		Allowed:    vals[0] == 1,
		Previous:   vals[2],
		Current:    vals[3],
		Elapsed:    time.Duration(vals[4]) * time.Microsecond,
		Mitigation: time.Duration(vals[5]) * time.Microsecond,
	}
	c := counted{prefix: prefix, start: vals[6], counts: counts}
	if vals[1] == 1 {
		c.n = cost
	}
	if r.Limit.Soft {
		// The warm-up left, not a mitigation: nothing to remember.
		return judgement{r.Limit.JudgeSoft(counts, cost, t.d.draw()), c, 0}, nil
	}
	return judgement{r.Limit.JudgeCost(counts, cost), c, counts.Mitigation}, nil
}

// bucket runs bucketScript in mode ("d" decide, "c" charge, "r" refund,
// "p" peek) for
// n units (a cost, or a charge) of the client whose keys start with prefix
// under r, and returns the bucket as Redis left it and what it counted.
func (d *Domain) bucket(ctx context.Context, r *domainRule, prefix, mode string, n int64, now time.Time) (window.BucketCounts, counted, error) {
	vals, err := d.c.exec(ctx, bucketScript, []string{prefix}, r.bucketArgs(mode, n, d.timeArg(now))).AsIntSlice()
	if err != nil {
		return window.BucketCounts{}, counted{}, err
	}
	return bucketReply(prefix, n, vals)
}

// bucketReply is what vals, bucketScript's reply for n units of the client
// whose keys start with prefix, says of the bucket and of what it counted.
func bucketReply(prefix string, n int64, vals []int64) (window.BucketCounts, counted, error) {
	if err := wantInts(vals, 5, "bucket"); err != nil {
		return window.BucketCounts{}, counted{}, err
	}
	b := window.BucketCounts{
		Allowed:    vals[0] == 1,
		Level:      window.Level{Nanos: vals[2], Frac: vals[3]},
		Mitigation: time.Duration(vals[4]),
	}
	c := counted{prefix: prefix}
	if vals[1] == 1 {
		c.n = n
	}
	return b, c, nil
}

// quota runs quotaScript in mode ("d" decide, "p" peek) for a request of
// cost units of the client whose keys start with prefix under r, with the
// calendar periods at now, and returns the quota as Redis left it and what
// it counted.
func (d *Domain) quota(ctx context.Context, r *domainRule, prefix, mode string, cost int64, now time.Time) (window.QuotaCounts, counted, error) {
	vals, err := d.c.exec(ctx, quotaScript, []string{prefix}, d.quotaArgs(r, mode, cost, now)).AsIntSlice()
	if err != nil {
		return window.QuotaCounts{}, counted{}, err
	}
	return quotaReply(prefix, cost, vals)
}

// quotaArgs is quotaScript's ARGV in mode for cost units, with the
// calendar periods at now.
func (d *Domain) quotaArgs(r *domainRule, mode string, cost int64, now time.Time) []string {
	idx, end := r.Limit.QuotaPeriod(now)
	next, nextEnd := r.Limit.QuotaPeriod(end)
	return []string{
		mode, r.args[0], r.args[2], r.args[3], strconv.FormatInt(cost, 10),
		strconv.FormatInt(idx, 10), strconv.FormatInt(end.UnixMicro(), 10),
		strconv.FormatInt(next, 10), strconv.FormatInt(nextEnd.UnixMicro(), 10),
		d.timeArg(now),
	}
}

// quotaReply is what vals, quotaScript's reply for a request of cost units
// of the client whose keys start with prefix, says of the quota and of
// what it counted.
func quotaReply(prefix string, cost int64, vals []int64) (window.QuotaCounts, counted, error) {
	if err := wantInts(vals, 6, "quota"); err != nil {
		return window.QuotaCounts{}, counted{}, err
	}
	q := window.QuotaCounts{
		Allowed:    vals[0] == 1,
		Count:      vals[2],
		ToEnd:      time.Duration(vals[3]) * time.Microsecond,
		Mitigation: time.Duration(vals[4]) * time.Microsecond,
	}
	c := counted{prefix: prefix, start: vals[5], quota: q}
	if vals[1] == 1 {
		c.n = cost
	}
	return q, c, nil
}

// bucketArgs is bucketScript's ARGV for n units in mode, at the time now
// (µs; "" for Redis's clock).
func (r *domainRule) bucketArgs(mode string, n int64, now string) []string {
	u := r.Limit.Units(max(n, 1))
	countBlocked := "0"
	if r.Limit.CountBlocked {
		countBlocked = "1"
	}
	return []string{
		mode, strconv.FormatInt(r.Limit.Limit, 10),
		strconv.FormatInt(r.full.Nanos, 10), strconv.FormatInt(r.full.Frac, 10),
		strconv.FormatInt(u.Nanos, 10), strconv.FormatInt(u.Frac, 10),
		strconv.FormatInt(n, 10), strconv.FormatInt(r.Limit.Burst, 10),
		strconv.FormatInt(int64(r.Limit.Mitigation), 10), countBlocked, now,
		strconv.FormatInt(int64(r.Limit.MaxDelay), 10),
	}
}

// timeArg is the time scripts judge at: "" for Redis's clock, or now in µs
// when the domain is told to pass it (scriptTime, tests only).
func (d *Domain) timeArg(now time.Time) string {
	if !d.scriptTime {
		return ""
	}
	return strconv.FormatInt(now.UnixMicro(), 10)
}

// fallback decides without Redis, by the failure mode. What it counts goes
// into the batch, for Redis once it is back (the flusher keeps what it
// cannot send), so that the PoP's counts include the requests of the
// outage; unless tried is set: the request's own round trip failed, and
// Redis may have counted it (a reply lost to the budget) or not. In exact
// mode a bucket's units taken meanwhile stay on this node (exact mode has
// no flush of a bucket's units).
func (t *tally) fallback(i int, k window.Key, key []byte, cost int64, now time.Time, tried bool) window.Decision {
	d := t.d
	r := &d.rules[i]
	var dec window.Decision
	switch d.c.cfg.OnStoreFailure {
	case rules.FailOpen:
		hold := r.Limit.Limit
		if r.bucket() {
			hold = r.Limit.Burst
		}
		dec = window.Decision{Allowed: true, Remaining: hold - 1}
	case rules.FailClosed:
		t.unavailable = true
		return window.Decision{Fallback: true, Unavailable: true, RetryAfter: d.c.br.untilProbe(now)}
	default:
		// The node's share of the limit, so that the PoP as a whole stays
		// near the limit without Redis: the last known number of live
		// nodes, each taking limit/nodes (rounded down, at least 1).
		dec = d.store.AllowLimitN(k, now, max(r.Limit.Limit/int64(d.c.Nodes()), 1), cost)
	}
	dec.Fallback = true
	if !tried && (!r.bucket() || !d.exact()) && cost > 0 && (dec.Allowed || r.Limit.CountBlocked && dec.RetryAfter > 0) {
		prefix, start := d.batch.add(r, i, k, key, now, cost)
		t.record(counted{rule: i, prefix: prefix, start: start, batched: true, k: k, n: cost})
	}
	return dec
}

// Refund takes back what dec (from Decide of the same tally) counted
// under id, for a request another rule blocked, and returns dec as it is
// after the refund. A refund that cannot reach Redis is dropped: the count
// stays, which errs on the strict side.
func (t *tally) Refund(id window.ID, dec window.Decision, now time.Time) window.Decision {
	d, i, k := t.d, id.Key.Rule(), id.Key
	if d.rules[i].slots() {
		if t.releaseSlot(i, k, now) && dec.Allowed {
			dec.Remaining = min(dec.Remaining+1, d.rules[i].Limit.Limit)
		}
		return dec
	}
	c := t.find(i, k)
	switch {
	case c == nil: // decided by the failure mode, or counted nothing
		return d.store.Refund(k, dec, now)
	case c.batched:
		d.batch.refund(&d.rules[i], i, k, c.prefix, c.start, c.n)
		return d.store.Refund(k, dec, now)
	}
	start := time.Now()
	if t.unavailable || !d.c.br.allow(start) {
		return dec
	}
	s, args := refundCall(&d.rules[i], c, d.timeArg(now))
	res := d.c.exec(t.context(d.c.cfg.Budget), s, []string{c.prefix}, args)
	d.c.done("refund", start, res.Error())
	return refunded(&d.rules[i], c, dec, res)
}

// refundCall is the script and ARGV that take back in Redis what c
// counted under r: a round trip of its own (Refund), or one command of a
// call's pipeline (RefundMany). now is timeArg's.
func refundCall(r *domainRule, c *counted, now string) (*script, []string) {
	if r.bucket() {
		return bucketScript, r.bucketArgs("r", c.n, now)
	}
	return refundScript, []string{strconv.FormatInt(c.start, 10), strconv.FormatInt(c.n, 10)}
}

// refunded is dec as it is once refundCall's script has taken back what c
// counted under r, given Redis's answer res (an error: dec stays as it
// was, and so does the count, which errs on the strict side).
func refunded(r *domainRule, c *counted, dec window.Decision, res rueidis.RedisResult) window.Decision {
	if res.Error() != nil || !dec.Allowed {
		return dec
	}
	var after window.Decision
	switch {
	case r.bucket():
		vals, err := res.AsIntSlice()
		b, _, err2 := bucketReply(c.prefix, c.n, vals)
		if err != nil || err2 != nil {
			return dec
		}
		after = r.Limit.JudgeBucket(window.BucketCounts{Allowed: true, Level: b.Level}, 0)
	case r.quota():
		q := c.quota
		q.Count = max(q.Count-c.n, 0)
		after = r.Limit.JudgeQuota(q, 0)
	default:
		// Described as the store describes its own counts without the
		// request.
		counts := c.counts
		counts.Current = max(counts.Current-c.n, 0)
		after = r.Limit.JudgeCost(counts, 0)
	}
	dec.Remaining, dec.Reset = after.Remaining, after.Reset
	return dec
}

// Charge counts n more units for id at now, after the fact. A window's
// (and in batched mode a bucket's) reach Redis with the batch, in the next
// flush (within the batch interval), never on the request's path; batched mode counts them in the
// domain's store at once, and exact mode does too while Redis is out of
// reach, for the failure mode's decisions. A bucket in exact mode takes
// them in Redis at once (a round trip within the budget, after the
// response), down to −burst tokens; a charge that cannot reach Redis is
// taken on this node only.
func (t *tally) Charge(id window.ID, n int64, now time.Time) {
	if n < 1 {
		return
	}
	d, i := t.d, id.Key.Rule()
	r := &d.rules[i]
	if d.blocked != nil {
		// A block remembered for the key stays right, but its wait may
		// now be too short.
		d.blocked.Remove(id.Key)
	}
	if !d.exact() || d.c.br.State() != Closed {
		d.store.Charge(id.Key, n, now)
	}
	if !r.bucket() || !d.exact() {
		d.batch.add(r, i, id.Key, id.Name, now, n)
		return
	}
	start := time.Now()
	if !d.c.br.allow(start) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.c.cfg.Budget)
	defer cancel()
	_, _, err := d.bucket(ctx, r, r.prefix(id.Name), "c", n, now)
	d.c.done("charge", start, err)
	if err != nil {
		d.store.Charge(id.Key, n, now)
	}
}

// Release gives back the slot the request holds under a concurrency rule
// (lease.go); for the other algorithms it does nothing.
func (t *tally) Release(id window.ID, now time.Time) {
	if i := id.Key.Rule(); t.d.rules[i].slots() {
		t.releaseSlot(i, id.Key, now)
	}
}
