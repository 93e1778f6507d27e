package window

import (
	"errors"
	"fmt"
	"github.com/edgerate/edge/internal/algorithm"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Store.
type Options struct {
	// Capacity is the most keys the store tracks at once; at least 1. Memory
	// for all of them is reserved by New.
	Capacity int
	// Limits holds one Limit per rule, indexed by rule number; 1 to MaxRules.
	// They are compiled values, taken as they are (see Limit).
	Limits []Limit
	// Shards is the number of independently locked shards, a power of two;
	// 0 chooses one from Capacity.
	Shards int
	// SeedFrom, if set, gives the new store the hash seed of an existing
	// one, so that Carry can move counters between them.
	SeedFrom *Store
	// SoftSeed seeds the random draws of soft windows (Limit.Soft); 0
	// picks one at random. Tests set it to draw a known sequence.
	SoftSeed uint64
}

// Store holds the counters of the rules of one domain, each rule by its
// algorithm. It is safe for concurrent use. The zero value is not usable;
// call New.
//
// When the store is full a new key takes the slot of one that holds no
// information (both periods over, or a full bucket, and no mitigation) or,
// failing that, of the least busy of a sample of keys, but only if that
// key's estimate is under half its limit (or its level under half its
// burst). Keys near or over their limit, mitigated keys, and a Quota's
// keys before their reset are never evicted: evicting them would hand a
// client a fresh budget.
// When no slot can be freed the new key is counted in its rule's shared
// overflow counter until room frees up, so a flood of new keys is limited as
// one client instead of pushing out the clients it competes with.
type Store struct {
	seed     maphash.Seed
	params   []params
	shards   []shard
	shift    uint // 64 − log2(len(shards)): shard = hash >> shift
	capacity int
	overflow []overflow
	slots    slots // of Concurrency rules (concurrency.go)

	live             atomic.Int64 // keys tracked, ≤ capacity
	expiredEvictions atomic.Uint64
	pressureEvicts   atomic.Uint64
	overflowed       atomic.Uint64
}

type overflow struct {
	mu sync.Mutex
	c  counters
}

// shard is one Robin Hood table under one mutex, with a small cache of
// blocked keys in front of it.
//
// Every decision, insertion and removal holds the mutex. A mutex per shard
// is the simplest locking that meets the store's needs, and with many
// shards (New) cores rarely want the same one at once. A lock-free path for
// decisions on tracked keys (entry locks under a seqlock) scaled better on
// two cores in the store's own benchmarks (1.93x against 1.53x at 10
// million keys) but saved no CPU per refused request through the proxy
// (1.7 to 2µs either way, of which a decision is 40 to 200ns);
// docs/window.md has the side-by-side figures.
//
// The blocked-key cache makes the hottest key cheap: a key over its limit
// under a rule that does not count blocked requests cannot change state
// until its wait is over (its own requests are all blocked, and what else
// touches its counters drops the cached block), so its decision for a
// request of cost 0 or 1 is known in advance. Readers check
// the cache with atomic loads only, without the mutex, so cores answering
// the same blocked key share cache lines instead of passing the mutex
// between them. Only holders of the mutex write the cache.
//
// The cache fills two cache lines; the mutex, the cache's summary and the
// table a third, so a decision on an uncached key reads one line of its
// shard.
type shard struct {
	blocked [blockedSlots]blockedSlot
	mu      sync.Mutex
	cached  atomic.Uint32 // bit i set: blocked[i] may hold a key
	slots   []entry
	live    int // occupied slots
	limit   int // most occupied slots allowed (the store's capacity bounds the sum)
	hand    int // where the next sweep or eviction sample starts
}

// blockedSlots is the size of a shard's blocked-key cache (direct-mapped).
const blockedSlots = 8

// blockedSlot caches "key fp is blocked until until". Written only under the
// shard's mutex, read without it: see lookup for why two words suffice.
type blockedSlot struct {
	fp    atomic.Uint64
	until atomic.Int64 // 2×(ns since the epoch) + 1 if mitigated: good to 2114 (a wait is under 2×MaxWindowPeriod)
}

// lookup reports whether a cached block of fp holds at now, and if so
// writes its decision to d. A writer stores fp=0, then until, then fp; a
// reader loads fp, until, fp again and believes until only if both loads of
// fp agree with its key. Any overwrite in between changes fp (to 0 at
// least), so a torn read is always discarded.
func (sh *shard) lookup(fp uint64, now int64, d *Decision) bool {
	i := (fp >> 24) % blockedSlots
	// The summary shares a cache line with what the decision reads next:
	// when no block is cached there, the cache's own lines stay untouched.
	if sh.cached.Load()&(1<<i) == 0 {
		return false
	}
	b := &sh.blocked[i]
	if b.fp.Load() != fp {
		return false
	}
	until := b.until.Load()
	if b.fp.Load() != fp || now >= until>>1 {
		return false
	}
	wait := time.Duration(until>>1 - now)
	*d = Decision{} // zeroed in place, then set field by field: see decide
	d.RetryAfter, d.Reset, d.Mitigated = wait, wait, until&1 != 0
	return true
}

// remember caches a block of fp until now+d.Reset, the wait until a
// request of cost 1 is allowed (see cacheable): the cache answers only
// requests of cost 0 or 1, for which that is RetryAfter, and Remaining is 0
// meanwhile. A request of cost 0 needs the same room as one of cost 1 (an
// estimate under the limit, or one unit in the bucket), so a block for one
// is a block for the other. Caller holds sh.mu, so that no Refund or Charge
// can change the counts the block rests on until the block is in the
// cache, where their forget finds it.
func (sh *shard) remember(fp uint64, now int64, d *Decision) {
	until := (now + int64(d.Reset)) << 1
	if d.Mitigated {
		until |= 1
	}
	i := (fp >> 24) % blockedSlots
	b := &sh.blocked[i]
	b.fp.Store(0)
	b.until.Store(until)
	b.fp.Store(fp)
	sh.cached.Or(1 << i)
}

// forget drops any cached block of fp. Caller holds sh.mu.
func (sh *shard) forget(fp uint64) {
	i := (fp >> 24) % blockedSlots
	if b := &sh.blocked[i]; b.fp.Load() == fp {
		b.fp.Store(0)
		sh.cached.And(^uint32(1 << i))
	}
}

// loadNum/loadDen is the largest fraction of a shard's slots ever occupied.
const loadNum, loadDen = 4, 5

// shardSlack is how many slots each shard has beyond its share's: 16
// slots of 24 bytes a shard is 0.04 bytes a key at 10 million keys.
const shardSlack = 16

// sampleSize is how many occupied slots an eviction looks at.
const sampleSize = 16

// evictBelow is the pressure (estimate ÷ limit) under which a live key may be
// evicted for a new one.
const evictBelow = 0.5

// New returns a Store for opts, with all its memory reserved. Its errors
// are misuse that no configuration can cause: it does not validate limits
// (see Limit), which package rules does.
func New(opts Options) (*Store, error) {
	var errs []error
	if opts.Capacity < 1 {
		errs = append(errs, fmt.Errorf("window: capacity must be at least 1, got %d", opts.Capacity))
	}
	if n := len(opts.Limits); n < 1 || n > MaxRules {
		errs = append(errs, fmt.Errorf("window: need 1 to %d limits, got %d", MaxRules, n))
	}
	if opts.Shards < 0 || opts.Shards&(opts.Shards-1) != 0 {
		errs = append(errs, fmt.Errorf("window: shards must be a power of two, got %d", opts.Shards))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	n := opts.Shards
	if n == 0 {
		// At least 64 keys a shard, at most 1024 shards: enough locks that
		// cores rarely meet, while each shard's share of the capacity is
		// large enough that uneven hashing fills shards at similar times.
		n = 1 << min(bits.Len(uint(opts.Capacity-1)>>6), 10)
	}
	n = min(n, 1<<(bits.Len(uint(opts.Capacity))-1)) // every shard holds a key
	s := &Store{
		seed:     seedOf(opts.SeedFrom),
		params:   make([]params, len(opts.Limits)),
		shards:   make([]shard, n),
		shift:    uint(64 - bits.TrailingZeros(uint(n))), // 64 with one shard: x>>64 == 0
		capacity: opts.Capacity,
		overflow: make([]overflow, len(opts.Limits)),
		slots:    slots{total: make([]int64, len(opts.Limits))},
	}
	softSeed := opts.SoftSeed
	if softSeed == 0 {
		softSeed = maphash.Comparable(maphash.MakeSeed(), 0)
	}
	fine := 0
	for i, l := range opts.Limits {
		s.params[i].init(l)
		s.params[i].softSeed = softSeed
		if l.countsFine() {
			fine++
		}
	}
	for i, l := range opts.Limits {
		if l.countsFine() {
			// The pool's share of the budget, FineBytesPerKey for each key
			// of the capacity (at most 2⁴⁰ bytes a rule: the size of a
			// Store is bounded by its caller's memory anyway).
			bytes := min(opts.Capacity, 1<<40/FineBytesPerKey) * FineBytesPerKey / fine
			s.params[i].fine = newFinePool(int(s.params[i].limit), bytes)
		}
	}
	// Slots for each shard's share at a load of at most 4/5, plus a few so
	// that small shards, whose fill varies most, have slack too; a shard may
	// hold up to 9/10 of its slots (12.5% or more over its share) while the
	// store as a whole has room, so that uneven hashing does not make shards
	// evict before the store is full. All shards' slots are cut from one
	// allocation, which large stores ask the kernel to back with huge pages:
	// a lookup in a table far larger than the caches then costs one memory
	// access instead of a page-table walk and a memory access (measured:
	// docs/memory.md).
	share := func(i int) int {
		if i < opts.Capacity%n {
			return opts.Capacity/n + 1
		}
		return opts.Capacity / n
	}
	size := func(i int) int { return share(i)*loadDen/loadNum + shardSlack }
	total := 0
	for i := range n {
		total += size(i)
	}
	slab := make([]entry, total)
	adviseHugePages(slab)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.slots, slab = slab[:size(i):size(i)], slab[size(i):]
		sh.limit = max(size(i)*9/10, share(i))
	}
	return s, nil
}

func seedOf(s *Store) maphash.Seed {
	if s != nil {
		return s.seed
	}
	return maphash.MakeSeed()
}

// A Key identifies one client under one rule of a Store. Make it with
// Store.Key or Store.KeyString; the zero Key is not valid.
type Key struct{ fp uint64 }

// Rule returns the rule number the key was made for.
func (k Key) Rule() int { return int(k.fp >> 56) }

// Key returns the key of client b under rule, a number below len(Limits).
// It does not retain b. It panics if rule is out of range, which is a
// programming error, not an input error.
func (s *Store) Key(rule int, b []byte) Key {
	return s.makeKey(rule, maphash.Bytes(s.seed, b))
}

// KeyString is Key for a string.
func (s *Store) KeyString(rule int, str string) Key {
	return s.makeKey(rule, maphash.String(s.seed, str))
}

func (s *Store) makeKey(rule int, h uint64) Key {
	// Mix the rule's identity in so that one client's keys under several
	// rules land in different shards and slots. (The index expression also
	// checks that rule is one of the store's.)
	h ^= (s.params[rule].identity + 1) * 0x9e3779b97f4a7c15
	h ^= h >> 32
	h *= 0xd6e8feb86659fd93
	h ^= h >> 32
	fp := uint64(rule)<<56 | h&hashMask
	if fp&hashMask == 0 {
		fp |= 1 // keep fp ≠ 0: zero marks an empty slot
	}
	return Key{fp: fp}
}

// An entry's fp is rule<<56 | 56-bit hash.
const hashMask = 1<<56 - 1

func (s *Store) shard(fp uint64) *shard {
	// The top bits of fp's bits 0–22 choose the shard (at most 1024 shards:
	// bits 13–22), bits 23–54 the slot.
	return &s.shards[(fp<<41)>>s.shift]
}

// Allow counts one request of k at now, of cost 1, and reports whether it
// is within its rule's limit: AllowN(k, now, 1).
func (s *Store) Allow(k Key, now time.Time) Decision { return s.AllowN(k, now, 1) }

// AllowN judges a request of k at now that costs n units (0 to MaxCost; see
// the package documentation for what cost means to each algorithm) and
// counts it if it is allowed. A blocked request changes nothing unless the
// rule counts blocked requests or starts a mitigation. A cost outside 0 to
// MaxCost is refused with a zero Decision and changes nothing.
func (s *Store) AllowN(k Key, now time.Time, n int64) (d Decision) {
	if n < 0 || n > MaxCost {
		return d
	}
	p := &s.params[k.fp>>56]
	if p.algorithm == algorithm.Concurrency {
		s.acquire(k, p.limit, &d)
		return d
	}
	t := now.UnixNano()
	sh := s.shard(k.fp)
	// The cache answers for requests that need one unit: see remember.
	if n <= 1 && !p.countBlocked && sh.lookup(k.fp, t, &d) {
		return d
	}
	s.decide(k, p, sh, t, uint64(n), p.limit, &d)
	return d
}

// decide judges a request of k at t costing cost units with limit in place
// of p.limit: in k's own entry if the shard has or can make room for it,
// else in the rule's overflow counter.
func (s *Store) decide(k Key, p *params, sh *shard, t int64, cost, limit uint64, d *Decision) {
	var w, e int64
	if !p.algorithm.Bucket() {
		w, e = p.position(t)
	}
	if sh.allow(s, k.fp, p, w, e, t, cost, limit, d) {
		return
	}
	s.overflowed.Add(1)
	o := &s.overflow[k.fp>>56]
	o.mu.Lock()
	defer o.mu.Unlock()
	p.decide(&o.c, w, e, t, cost, limit, d)
	d.Overflow = true
}

// cacheable reports whether a block may be cached: only where a request of
// cost 1 (or 0) gets the same refusal until Reset (d.settled: Remaining is
// 0, and no mitigation would start or end meanwhile), so that the cached
// answer is the one every request the cache answers would get; only under
// the rule's own limit, since the cache answers Allow, and only where a
// blocked request changes nothing. A bucket judged at another time than
// now (before 1970, or after the clock went back) is not cached either.
func cacheable(d *Decision, p *params, limit uint64, now int64) bool {
	return !d.Allowed && d.settled && d.Reset > 0 && !p.countBlocked && limit == p.limit &&
		(!p.algorithm.Bucket() || now == p.judgedAt(now))
}

// allow decides for fp, making room for it if the shard does not track it.
// It reports false if no room could be made.
func (sh *shard) allow(s *Store, fp uint64, p *params, w, e, now int64, cost, limit uint64, d *Decision) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.find(fp)
	if i < 0 {
		if i = sh.admit(s, fp, p.fresh(w), now); i < 0 {
			return false
		}
	}
	p.decide(&sh.slots[i].counters, w, e, now, cost, limit, d)
	if cacheable(d, p, limit, now) {
		sh.remember(fp, now, d)
	}
	if p.fine != nil && p.fine.pressed() {
		// Logs of keys gone silent come back only as their slots are
		// reclaimed, which admissions do two slots at a time: while the
		// pool runs short, every decision of the rule sweeps too.
		sh.sweep(s, now)
	}
	return true
}

// admit inserts fp with counters c, a new key's, if the store has room or
// the shard can make some, and returns its slot, or -1. The caller holds
// sh.mu.
func (sh *shard) admit(s *Store, fp uint64, c counters, now int64) int {
	sh.sweep(s, now)
	switch {
	case sh.live < sh.limit && s.take():
	case sh.live > 0 && sh.makeRoom(s, now):
		// The freed slot's unit of capacity passes to the new key.
	default:
		return -1
	}
	return sh.insert(fp, c)
}

// fresh returns the counters of a key new at period w: an empty window in
// w, a full bucket, or a quota that has counted nothing.
func (p *params) fresh(w int64) counters {
	if p.algorithm.Bucket() || p.algorithm == algorithm.Quota {
		return counters{}
	}
	return counters{win: uint32(w)}
}

// Refund takes back the units that d counted for k, for a request finally
// blocked by another rule: a blocked request must not use up quota. It
// returns d with Remaining and Reset as they are after the refund, at now.
// It changes nothing if d counted nothing, or if k's window has moved on
// to another period; a bucket gets the units back whenever it is refunded,
// up to full.
func (s *Store) Refund(k Key, d Decision, now time.Time) Decision {
	if !d.counted {
		return d
	}
	d.counted = false
	p := &s.params[k.fp>>56]
	if p.algorithm == algorithm.Concurrency {
		if s.release(k) {
			d.Remaining = min(d.Remaining+1, int64(p.limit))
		}
		return d
	}
	t := now.UnixNano()
	if d.Overflow {
		o := &s.overflow[k.fp>>56]
		o.mu.Lock()
		defer o.mu.Unlock()
		return p.refund(&o.c, d, t)
	}
	sh := s.shard(k.fp)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.find(k.fp)
	if i < 0 {
		return d
	}
	// A block cached by a concurrent request may rest on the count being
	// taken back: drop it so the next request is judged afresh.
	sh.forget(k.fp)
	return p.refund(&sh.slots[i].counters, d, t)
}

func (p *params) refund(ent *counters, d Decision, now int64) Decision {
	if p.algorithm.Bucket() {
		return p.refundBucket(ent, d, now)
	}
	if p.algorithm == algorithm.Quota {
		return p.refundQuota(ent, d, now)
	}
	if p.hasLog(ent) {
		return p.fineRefund(ent, d, now)
	}
	if ent.win != d.win || ent.curr == math.MaxUint32 {
		return d
	}
	ent.curr -= min(d.n, ent.curr)
	if d.Allowed {
		view := *ent
		w, e := p.position(now)
		e = p.advance(&view, w, e)
		d.Remaining, d.Reset = p.quota(view.prev, view.curr, e, p.limit)
	}
	return d
}

// take reserves room for one more key in the store, if there is any.
func (s *Store) take() bool {
	if s.live.Add(1) > int64(s.capacity) {
		s.live.Add(-1)
		return false
	}
	return true
}

// Limit returns the Limit the store counts rule by (as New clamped it).
// It panics if rule is out of range, which is a programming error.
func (s *Store) Limit(rule int) Limit { return s.params[rule].limitOf() }

// Len returns the number of keys tracked now, including keys whose
// information has expired but whose slots have not been reused yet.
func (s *Store) Len() int { return int(s.live.Load()) }

// Capacity returns the most keys the store tracks at once.
func (s *Store) Capacity() int { return s.capacity }

// Stats counts what the store did to stay within its capacity.
type Stats struct {
	// ExpiredReclaimed counts slots reused because their key held no
	// information any more.
	ExpiredReclaimed uint64
	// Evicted counts live keys, all under half their limit, removed to make
	// room for a new key.
	Evicted uint64
	// Overflowed counts requests counted in a rule's shared overflow counter
	// because no slot could be freed.
	Overflowed uint64
	// FineFallback counts decisions of Fine rules (Limit.Precision) on
	// keys near their limit that were made in two counters, because the
	// rule's pool of logs had none free.
	FineFallback uint64
	// FineLogs is the number of keys of Fine rules counted in a log now.
	FineLogs int
}

// Stats returns the store's counters since New.
func (s *Store) Stats() Stats {
	st := Stats{
		ExpiredReclaimed: s.expiredEvictions.Load(),
		Evicted:          s.pressureEvicts.Load(),
		Overflowed:       s.overflowed.Load(),
	}
	for i := range s.params {
		if p := &s.params[i]; p.fine != nil {
			st.FineFallback += p.fineFallback.Load()
			st.FineLogs += p.fine.inUse()
		}
	}
	return st
}

// home is the slot fp would occupy in an empty
// table.
func (sh *shard) home(fp uint64) int {
	return int((uint64(uint32(fp>>23)) * uint64(len(sh.slots))) >> 32)
}

// dist is how far slot i is from fp's home, wrapping around.
func (sh *shard) dist(fp uint64, i int) int {
	d := i - sh.home(fp)
	if d < 0 {
		d += len(sh.slots)
	}
	return d
}

// find returns the slot holding fp, or -1. Robin Hood order lets it stop at
// the first slot whose occupant is closer to home than fp would be. The
// caller holds sh.mu.
func (sh *shard) find(fp uint64) int {
	n := len(sh.slots)
	i := sh.home(fp)
	for d := 0; ; d++ {
		got := sh.slots[i].fp
		if got == fp {
			return i
		}
		if got == 0 || sh.dist(got, i) < d {
			return -1
		}
		if i++; i == n {
			i = 0
		}
	}
}

// insert places fp, which must not be present, with counters c and returns
// its slot. The caller holds sh.mu and ensures there is room.
func (sh *shard) insert(fp uint64, c counters) int {
	n := len(sh.slots)
	i, d, at := sh.home(fp), 0, -1
	for {
		cur := &sh.slots[i]
		if cur.fp == 0 {
			*cur = entry{fp: fp, counters: c}
			sh.live++
			if at < 0 {
				at = i
			}
			return at
		}
		if cd := sh.dist(cur.fp, i); cd < d {
			// Take from the rich: the displaced entry moves on.
			cur.fp, fp = fp, cur.fp
			cur.counters, c = c, cur.counters
			if at < 0 {
				at = i
			}
			d = cd
		}
		if i++; i == n {
			i = 0
		}
		d++
	}
}

// remove empties slot i and shifts the following run back one place, so no
// tombstones are needed. The caller holds sh.mu.
func (sh *shard) remove(i int) {
	n := len(sh.slots)
	for {
		j := i + 1
		if j == n {
			j = 0
		}
		next := sh.slots[j].fp
		if next == 0 || sh.dist(next, j) == 0 {
			break
		}
		sh.slots[i] = sh.slots[j]
		i = j
	}
	sh.slots[i] = entry{}
	sh.live--
}

// drop removes slot i, giving back the log of a key of a Fine rule that
// has one. The caller holds sh.mu.
func (s *Store) drop(sh *shard, i int) {
	ent := &sh.slots[i]
	if p := &s.params[ent.fp>>56]; p.hasLog(&ent.counters) {
		p.fine.put(ent.curr)
	}
	sh.remove(i)
}

// sweep reclaims expired entries among the next two slots at the hand, so
// that tracked keys track live clients without a goroutine scanning the
// table. The caller holds sh.mu.
func (sh *shard) sweep(s *Store, now int64) {
	for range 2 {
		i := sh.hand
		if sh.hand++; sh.hand == len(sh.slots) {
			sh.hand = 0
		}
		ent := &sh.slots[i]
		if ent.fp != 0 && s.params[ent.fp>>56].expired(ent.counters, now) {
			s.drop(sh, i)
			s.live.Add(-1)
			s.expiredEvictions.Add(1)
		}
	}
}

// makeRoom frees one slot of the shard for a new key, keeping its unit of
// the store's capacity for it: the first expired entry in a
// sample from the hand, else the least pressed sampled entry if it is under
// evictBelow. It reports whether a slot was freed. The caller holds sh.mu.
func (sh *shard) makeRoom(s *Store, now int64) bool {
	best, bestPressure := -1, math.Inf(1)
	for seen, i := 0, sh.hand; seen < min(sampleSize, sh.live); {
		at := i
		if i++; i == len(sh.slots) {
			i = 0
		}
		ent := &sh.slots[at]
		if ent.fp == 0 {
			continue
		}
		seen++
		p := &s.params[ent.fp>>56]
		if p.expired(ent.counters, now) {
			sh.hand = i
			s.drop(sh, at)
			s.expiredEvictions.Add(1)
			return true
		}
		if pr := p.pressure(ent.counters, now); pr < bestPressure {
			best, bestPressure = at, pr
		}
	}
	// Move the hand on so that the next sample looks at other keys.
	sh.hand = (sh.hand + sampleSize) % len(sh.slots)
	if best < 0 || bestPressure >= evictBelow {
		return false
	}
	s.drop(sh, best)
	s.pressureEvicts.Add(1)
	return true
}
