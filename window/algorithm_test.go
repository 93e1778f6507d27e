package window

import (
	"fmt"
	"github.com/edgerate/edge/internal/algorithm"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// ref is an independent model of one key under one rule, in exact
// rationals (math/big), written from the algorithms' definitions and
// sharing no code with the store: counts per period for the windows, a
// number of tokens (or a level) refilled (or drained) at limit/period
// since the last request for the buckets. Times only move forward.
type ref struct {
	l      Limit // as the store clamps it
	burst  int64 // buckets' capacity
	mitEnd int64 // ns since the epoch; mitigated while t < mitEnd

	counts map[int64]int64 // windows: units counted per period index
	amount *big.Rat        // token bucket: tokens; leaky bucket: level
	last   int64           // buckets: when amount was last brought up to date
}

func newRef(l Limit) *ref {
	r := &ref{l: l, burst: l.Burst, counts: map[int64]int64{}, amount: new(big.Rat)}
	if l.Algorithm == algorithm.TokenBucket {
		r.amount.SetInt64(r.burst)
	}
	return r
}

func (r *ref) clone() *ref {
	c := *r
	c.counts = make(map[int64]int64, len(r.counts))
	for k, v := range r.counts {
		c.counts[k] = v
	}
	c.amount = new(big.Rat).Set(r.amount)
	return &c
}

func rat(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

func (r *ref) period(t int64) (w, e int64) {
	if r.l.Algorithm == algorithm.Quota {
		return r.calendarPeriod(t), 0
	}
	p := int64(r.l.Period)
	w = t / p
	if t%p < 0 {
		w--
	}
	return w, t - w*p
}

// calendarPeriod names a quota's period holding t by its first day's
// date in the rule's zone, yyyymmdd: the day itself, the Monday on or
// before it, or the 1st of its month.
func (r *ref) calendarPeriod(t int64) int64 {
	local := time.Unix(0, t).In(r.l.Location)
	switch r.l.Reset {
	case algorithm.Weekly:
		back := (int(local.Weekday()) + 6) % 7
		local = local.AddDate(0, 0, -back)
	case algorithm.Monthly:
		local = local.AddDate(0, 0, 1-local.Day())
	}
	y, m, d := local.Date()
	return int64(y)*10000 + int64(m)*100 + int64(d)
}

// estimate is a window's estimate at t.
func (r *ref) estimate(t int64) *big.Rat {
	w, e := r.period(t)
	est := rat(r.counts[w])
	if r.l.Algorithm == algorithm.SlidingWindow {
		p := int64(r.l.Period)
		est.Add(est, new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(r.counts[w-1]), big.NewInt(p-e)), big.NewInt(p)))
	}
	return est
}

// at returns the bucket's amount at t (no earlier than last).
func (r *ref) at(t int64) *big.Rat {
	flow := new(big.Rat).SetFrac(big.NewInt(t-r.last), big.NewInt(int64(r.l.Period)))
	flow.Mul(flow, rat(r.l.Limit))
	a := new(big.Rat).Set(r.amount)
	if r.l.Algorithm == algorithm.TokenBucket {
		if a.Add(a, flow); a.Cmp(rat(r.burst)) > 0 {
			a.SetInt64(r.burst)
		}
	} else if a.Sub(a, flow); a.Sign() < 0 {
		a.SetInt64(0)
	}
	return a
}

func (r *ref) capacity() int64 {
	if r.l.Algorithm.Bucket() {
		return r.burst
	}
	return r.l.Limit
}

// admits reports whether a request of cost c fits at t, mitigation aside.
func (r *ref) admits(t, c int64) bool {
	need := max(c, 1)
	switch r.l.Algorithm {
	case algorithm.TokenBucket:
		return r.at(t).Cmp(rat(need)) >= 0
	case algorithm.LeakyBucket:
		return new(big.Rat).Add(r.at(t), rat(need)).Cmp(rat(r.burst)) <= 0
	}
	return new(big.Rat).Add(r.estimate(t), rat(need-1)).Cmp(rat(r.l.Limit)) < 0
}

// add counts n units (negative: gives them back) at t; a bucket goes no
// lower than −burst tokens and no higher than full.
func (r *ref) add(t, n int64) {
	if !r.l.Algorithm.Bucket() {
		w, _ := r.period(t)
		r.counts[w] = max(r.counts[w]+n, 0)
		return
	}
	a := r.at(t)
	r.last = t
	if r.l.Algorithm == algorithm.TokenBucket {
		a.Sub(a, rat(n))
		if a.Cmp(rat(-r.burst)) < 0 {
			a.SetInt64(-r.burst)
		}
		if a.Cmp(rat(r.burst)) > 0 {
			a.SetInt64(r.burst)
		}
	} else {
		a.Add(a, rat(n))
		if a.Cmp(rat(2*r.burst)) > 0 {
			a.SetInt64(2 * r.burst)
		}
		if a.Sign() < 0 {
			a.SetInt64(0)
		}
	}
	r.amount = a
}

// decide judges a request of cost c at t as the rule says and reports
// whether it was allowed.
func (r *ref) decide(t, c int64) bool {
	if c > r.capacity() {
		return false
	}
	mitigated := t < r.mitEnd
	if !mitigated && r.admits(t, c) {
		r.add(t, c)
		return true
	}
	if r.l.CountBlocked {
		r.add(t, c)
	}
	if !mitigated && r.l.Mitigation > 0 {
		ms := int64(time.Millisecond)
		r.mitEnd = (t + int64(r.l.Mitigation) + ms - 1) / ms * ms
	}
	return false
}

// remaining is how many requests of cost 1 would be allowed at t, one
// after the other.
func (r *ref) remaining(t int64) int64 {
	if t < r.mitEnd {
		return 0
	}
	var room *big.Rat
	switch r.l.Algorithm {
	case algorithm.TokenBucket:
		room = r.at(t)
	case algorithm.LeakyBucket:
		room = new(big.Rat).Sub(rat(r.burst), r.at(t))
	default:
		room = new(big.Rat).Sub(rat(r.l.Limit), r.estimate(t))
		// estimate + n − 1 < limit: n < room + 1, the largest n is ⌈room⌉.
		q := new(big.Int).Quo(room.Num(), room.Denom())
		if room.Sign() > 0 && !room.IsInt() {
			q.Add(q, big.NewInt(1))
		}
		return max(q.Int64(), 0)
	}
	if room.Sign() <= 0 {
		return 0
	}
	return new(big.Int).Quo(room.Num(), room.Denom()).Int64()
}

// algorithmLimits are rules of every algorithm, of limits and periods that
// divide evenly and that do not.
func randomLimit(rng *rand.Rand, alg algorithm.Algorithm) Limit {
	l := Limit{
		Algorithm:    alg,
		Limit:        int64(1 + rng.IntN(12)),
		Period:       time.Duration(1+rng.IntN(3000)) * time.Millisecond,
		CountBlocked: rng.IntN(2) == 0,
	}
	if rng.IntN(3) == 0 {
		l.Limit = int64(1 + rng.IntN(1000)) // rarely a divisor of the period
	}
	if alg.Bucket() && rng.IntN(3) > 0 {
		l.Burst = int64(1 + rng.IntN(20))
	}
	if rng.IntN(3) == 0 {
		l.Mitigation = time.Duration(1+rng.IntN(5000)) * time.Millisecond
	}
	if alg == algorithm.Quota {
		l.Reset = algorithm.Reset(rng.IntN(3))
		l.Location = quotaZones[rng.IntN(len(quotaZones))]
		if rng.IntN(3) == 0 {
			l.Mitigation = time.Duration(1+rng.IntN(48)) * time.Hour
		}
	}
	return l
}

// quotaZones are zones with daylight saving time (one that moves its
// clocks by half an hour, one at 2:45 local time), without, and UTC.
var quotaZones = func() []*time.Location {
	var locs []*time.Location
	for _, name := range []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "Asia/Kolkata"} {
		loc, err := time.LoadLocation(name)
		if err != nil {
			panic(err) // the zone database is in the test binary: see quota_test.go
		}
		locs = append(locs, loc)
	}
	return locs
}()

// snapshot runs f on s and puts k's entry back as it was: a decision that
// changes nothing, to probe what the store would answer.
func snapshot(s *Store, k Key, f func()) {
	latest := &s.params[k.Rule()].latest
	defer latest.Store(latest.Load())
	sh := s.shard(k.fp)
	saved, tracked := sh.read(k.fp)
	f()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.forget(k.fp)
	if j := sh.find(k.fp); j >= 0 {
		if tracked {
			sh.slots[j].counters = saved
		} else {
			sh.remove(j)
			s.live.Add(-1)
		}
	}
}

// TestAlgorithmsMatchReference runs random traces (random gaps from none
// to many periods, costs 0 to 5 and above capacity, refunds and charges,
// with and without count_blocked and mitigation) through the store and
// through ref, for every algorithm, and requires for every request: the
// same decision and mitigation, the same Remaining, a RetryAfter at which
// ref first allows the request (refused 1ns before), and a Reset at which
// ref's remaining first grows. RetryAfter is probed on the store too.
func TestAlgorithmsMatchReference(t *testing.T) {
	for _, alg := range []algorithm.Algorithm{algorithm.SlidingWindow, algorithm.FixedWindow, algorithm.TokenBucket, algorithm.LeakyBucket, algorithm.Quota} {
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(alg), 14))
			for trace := range 300 {
				l := randomLimit(rng, alg)
				s := newStore(t, 4, l)
				l = s.Limit(0)
				r := newRef(l)
				k := s.KeyString(0, "k")
				now := t0.UnixNano() + rng.Int64N(int64(l.Period))
				unit := max(int64(l.Period)/l.Limit, 1)
				for step := range 60 {
					where := fmt.Sprintf("trace %d step %d (%+v)", trace, step, l)
					switch x := rng.IntN(20); {
					case x < 2:
						now += rng.Int64N(5 * int64(l.Period))
					case x < 6:
						// no gap
					default:
						now += rng.Int64N(3 * unit)
					}
					cost := int64(rng.IntN(6))
					if rng.IntN(25) == 0 {
						cost = r.capacity() + 1
					}
					at := time.Unix(0, now)
					before := r.clone()
					d := s.AllowN(k, at, cost)
					allowed := r.decide(now, cost)
					checkDecision(t, where, s, k, r, before, cost, now, d, allowed)
					switch x := rng.IntN(10); {
					case x == 0 && d.counted:
						s.Refund(k, d, at)
						r.add(now, -cost)
					case x == 1:
						n := int64(rng.IntN(4))
						s.Charge(k, n, at)
						r.add(now, max(n, 0))
					}
				}
			}
		})
	}
}

func checkDecision(t *testing.T, where string, s *Store, k Key, r, before *ref, cost, now int64, d Decision, allowed bool) {
	t.Helper()
	if d.Allowed != allowed {
		t.Fatalf("%s: cost %d at %d: allowed %v, want %v (%+v)", where, cost, now, d.Allowed, allowed, d)
	}
	if want := now < r.mitEnd; d.Mitigated != want {
		t.Fatalf("%s: cost %d at %d: mitigated %v, want %v (until %d, before %d): %+v", where, cost, now, d.Mitigated, want, r.mitEnd, before.mitEnd, d)
	}
	if want := r.remaining(now); d.Remaining != want {
		t.Fatalf("%s: cost %d: remaining %d, want %d (%+v)", where, cost, d.Remaining, want, d)
	}
	// Reset: remaining grows first at now+Reset.
	if d.Reset == 0 {
		if d.Remaining != r.capacity() {
			t.Fatalf("%s: Reset 0 with %d remaining of %d", where, d.Remaining, r.capacity())
		}
	} else {
		if got := r.remaining(now + int64(d.Reset) - 1); got != d.Remaining {
			t.Fatalf("%s: remaining %d at Reset−1ns (%v), want still %d", where, got, d.Reset, d.Remaining)
		}
		if got := r.remaining(now + int64(d.Reset)); got <= d.Remaining {
			t.Fatalf("%s: remaining %d at Reset (%v), want more than %d", where, got, d.Reset, d.Remaining)
		}
	}
	// Peek describes the key as a request of cost 1 would find it.
	st := s.Peek(k, time.Unix(0, now))
	if st.Remaining != d.Remaining || st.MitigatedUntil.IsZero() == d.Mitigated {
		t.Fatalf("%s: Peek = %+v, want remaining %d, mitigated %v", where, st, d.Remaining, d.Mitigated)
	}
	if st.RetryAfter == 0 {
		if !r.clone().decide(now, 1) && r.capacity() >= 1 {
			t.Fatalf("%s: Peek says a request is allowed now, ref refuses it", where)
		}
	} else if r.clone().decide(now+int64(st.RetryAfter)-1, 1) || !r.clone().decide(now+int64(st.RetryAfter), 1) {
		t.Fatalf("%s: Peek's RetryAfter %v is not when ref first allows a request", where, st.RetryAfter)
	}
	if d.Allowed {
		if d.RetryAfter != 0 {
			t.Fatalf("%s: allowed with RetryAfter %v", where, d.RetryAfter)
		}
		return
	}
	if cost > r.capacity() {
		if d.RetryAfter != 0 {
			t.Fatalf("%s: cost %d above capacity %d: RetryAfter %v, want 0 (never)", where, cost, r.capacity(), d.RetryAfter)
		}
		return
	}
	if d.RetryAfter <= 0 {
		t.Fatalf("%s: refused with RetryAfter %v", where, d.RetryAfter)
	}
	retry := now + int64(d.RetryAfter)
	if r.clone().decide(retry-1, cost) {
		t.Fatalf("%s: cost %d: ref allows at RetryAfter−1ns (%v)", where, cost, d.RetryAfter)
	}
	if !r.clone().decide(retry, cost) {
		t.Fatalf("%s: cost %d: ref refuses at RetryAfter (%v)", where, cost, d.RetryAfter)
	}
	// The store agrees with itself: probed without changing its state.
	snapshot(s, k, func() {
		if got := s.AllowN(k, time.Unix(0, retry-1), cost); got.Allowed {
			t.Fatalf("%s: cost %d: store allows at RetryAfter−1ns (%v)", where, cost, d.RetryAfter)
		}
	})
	snapshot(s, k, func() {
		if got := s.AllowN(k, time.Unix(0, retry), cost); !got.Allowed {
			t.Fatalf("%s: cost %d: store refuses at RetryAfter (%v): %+v", where, cost, d.RetryAfter, got)
		}
	})
}

// TestRefusedRequestChangesNothing: without count_blocked and mitigation, a
// refused request, of any cost, leaves the key's entry as it was, under
// every algorithm.
func TestRefusedRequestChangesNothing(t *testing.T) {
	for _, alg := range []algorithm.Algorithm{algorithm.SlidingWindow, algorithm.FixedWindow, algorithm.TokenBucket, algorithm.LeakyBucket, algorithm.Quota} {
		t.Run(alg.String(), func(t *testing.T) {
			s := newStore(t, 10, Limit{Algorithm: alg, Limit: 5, Period: time.Minute})
			k := s.KeyString(0, "a")
			if d := s.AllowN(k, t0, 4); !d.Allowed {
				t.Fatalf("first request refused: %+v", d)
			}
			entry := func() counters {
				sh := s.shard(k.fp)
				return sh.slots[sh.find(k.fp)].counters
			}
			want := entry()
			at := t0.Add(time.Second)
			for _, cost := range []int64{2, 5, 6, 1000} {
				if d := s.AllowN(k, at, cost); d.Allowed {
					t.Fatalf("cost %d allowed, want refused", cost)
				}
				if got := entry(); got != want {
					t.Fatalf("cost %d: entry %+v, want %+v", cost, got, want)
				}
			}
		})
	}
}

// TestBlockedCacheAnswersOnlyWhatItKnows: a block cached for one request
// never refuses another that the algorithm allows: a cheaper request when
// units are left, a request once the wait is over.
func TestBlockedCacheAnswersOnlyWhatItKnows(t *testing.T) {
	for _, alg := range []algorithm.Algorithm{algorithm.SlidingWindow, algorithm.FixedWindow, algorithm.TokenBucket, algorithm.LeakyBucket, algorithm.Quota} {
		t.Run(alg.String(), func(t *testing.T) {
			s := newStore(t, 10, Limit{Algorithm: alg, Limit: 4, Period: time.Second})
			k := s.KeyString(0, "a")
			s.AllowN(k, t0, 2)
			if d := s.AllowN(k, t0, 3); d.Allowed || d.Remaining != 2 {
				t.Fatalf("cost 3 with 2 left: got %+v, want refused, 2 remaining", d)
			}
			for _, cost := range []int64{0, 1, 1} {
				if d := s.AllowN(k, t0, cost); !d.Allowed {
					t.Fatalf("cost %d after a refused cost 3: got %+v, want allowed", cost, d)
				}
			}
			d := s.AllowN(k, t0, 1)
			if d.Allowed {
				t.Fatalf("fifth unit allowed")
			}
			for _, cost := range []int64{0, 1} {
				if got := s.AllowN(k, t0.Add(d.RetryAfter-1), cost); got.Allowed || got.RetryAfter != 1 || got.Reset != 1 {
					t.Fatalf("cost %d 1ns early: got %+v, want refused for 1ns", cost, got)
				}
			}
			if got := s.AllowN(k, t0.Add(d.RetryAfter), 0); !got.Allowed {
				t.Fatalf("cost 0 at RetryAfter: got %+v, want allowed", got)
			}
		})
	}
}

// TestAlgorithmHugeValues: the longest periods and largest limits and
// bursts, gaps of many periods and clocks far from now decide without
// overflow.
func TestAlgorithmHugeValues(t *testing.T) {
	for _, alg := range []algorithm.Algorithm{algorithm.SlidingWindow, algorithm.FixedWindow, algorithm.TokenBucket, algorithm.LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			limits := []Limit{
				{Algorithm: alg, Limit: 1_000_000_000, Period: 720 * time.Hour, Burst: 1_000_000_000},
				{Algorithm: alg, Limit: MaxLimit, Period: MaxSpan, Burst: math.MaxInt64, CountBlocked: true},
				{Algorithm: alg, Limit: 1, Period: MaxSpan, Burst: MaxLimit, Mitigation: time.Hour},
				{Algorithm: alg, Limit: MaxLimit, Period: time.Millisecond, CountBlocked: true, Mitigation: MaxSpan},
			}
			s := newStore(t, 10, limits...)
			for i := range limits {
				l := s.Limit(i)
				r := newRef(l)
				k := s.KeyString(i, "a")
				now := t0.UnixNano()
				for step, gap := range []int64{0, 1, int64(time.Hour), 0, 3 * int64(l.Period), 7, int64(l.Period) / 3} {
					now += gap
					for _, cost := range []int64{MaxCost, 0, 1} {
						d := s.AllowN(k, time.Unix(0, now), cost)
						allowed := r.decide(now, cost)
						if d.Allowed != allowed || d.Remaining != r.remaining(now) {
							t.Fatalf("limit %+v step %d cost %d: got %+v, want allowed %v, remaining %d", l, step, cost, d, allowed, r.remaining(now))
						}
					}
				}
				for _, at := range []time.Time{time.Unix(0, 0), time.Unix(-1e9, 5), time.Unix(1<<40, 0), time.Unix(0, math.MaxInt64)} {
					s.AllowN(k, at, MaxCost)
					s.Charge(k, math.MaxInt64, at)
					s.Peek(k, at)
				}
			}
		})
	}
}

// TestCarryAlgorithms: counters carry between rules of one algorithm and
// burst; a bucket whose limit changes keeps its level in units (CarryAt),
// and anything else is refused.
func TestCarryAlgorithms(t *testing.T) {
	bucket := Limit{Algorithm: algorithm.TokenBucket, Limit: 10, Period: time.Second, Burst: 10, Identity: 1}
	old := newStore(t, 10, bucket, Limit{Algorithm: algorithm.FixedWindow, Limit: 5, Period: time.Second, Identity: 2})
	k := old.KeyString(0, "a")
	old.AllowN(k, t0, 6) // 4 tokens left
	tests := []struct {
		name    string
		to      Limit
		timed   bool
		wantErr bool
		want    int64 // Remaining after a request of cost 1 at t0
	}{
		{"same", bucket, false, false, 3},
		{"limit doubled", Limit{Algorithm: algorithm.TokenBucket, Limit: 20, Period: time.Second, Burst: 10, Identity: 1}, true, false, 3},
		{"limit changed without a time", Limit{Algorithm: algorithm.TokenBucket, Limit: 20, Period: time.Second, Burst: 10, Identity: 1}, false, true, 0},
		{"burst changed", Limit{Algorithm: algorithm.TokenBucket, Limit: 10, Period: time.Second, Burst: 20, Identity: 1}, true, true, 0},
		{"to a leaky bucket", Limit{Algorithm: algorithm.LeakyBucket, Limit: 10, Period: time.Second, Burst: 10, Identity: 1}, true, true, 0},
		{"to a window", Limit{Limit: 10, Period: time.Second, Identity: 1}, true, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst, err := New(Options{Capacity: 10, SeedFrom: old, Limits: []Limit{tt.to}})
			if err != nil {
				t.Fatal(err)
			}
			if tt.timed {
				_, err = old.CarryAt(dst, []int{0, -1}, t0)
			} else {
				_, err = old.Carry(dst, []int{0, -1})
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("Carry error %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if d := dst.Allow(dst.KeyString(0, "a"), t0); d.Remaining != tt.want {
				t.Fatalf("after carrying: got %+v, want %d remaining", d, tt.want)
			}
		})
	}
	// A fixed window does not carry into a sliding one.
	dst, err := New(Options{Capacity: 10, SeedFrom: old, Limits: []Limit{{Limit: 5, Period: time.Second, Identity: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Carry(dst, []int{-1, 0}); err == nil {
		t.Fatal("carried a fixed window into a sliding one")
	}
}

// TestPeekAlgorithms: Peek describes a fixed window by its one count and a
// bucket by its level.
func TestPeekAlgorithms(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name string
		l    Limit
		cost []int64       // requests at t0
		at   time.Duration // peeked at t0+at
		want State
	}{
		{"fixed window", Limit{Algorithm: algorithm.FixedWindow, Limit: 5, Period: time.Minute}, []int64{3}, 20 * s,
			State{Tracked: true, Current: 3, Estimate: 3, Remaining: 2}},
		{"fixed window full", Limit{Algorithm: algorithm.FixedWindow, Limit: 5, Period: time.Minute}, []int64{5}, 20 * s,
			State{Tracked: true, Current: 5, Estimate: 5, RetryAfter: 40 * s}},
		{"fixed window past", Limit{Algorithm: algorithm.FixedWindow, Limit: 5, Period: time.Minute}, []int64{5}, 70 * s,
			State{Tracked: true, Remaining: 5}},
		{"token bucket", Limit{Algorithm: algorithm.TokenBucket, Limit: 10, Period: 10 * s, Burst: 5}, []int64{5}, s / 2,
			State{Tracked: true, Estimate: 4.5, RetryAfter: s / 2}},
		{"leaky bucket", Limit{Algorithm: algorithm.LeakyBucket, Limit: 10, Period: 10 * s, Burst: 5}, []int64{4}, 1500 * time.Millisecond,
			State{Tracked: true, Estimate: 2.5, Remaining: 2}},
		{"mitigated bucket", Limit{Algorithm: algorithm.LeakyBucket, Limit: 10, Period: 10 * s, Burst: 5, Mitigation: time.Minute}, []int64{5, 1}, s,
			State{Tracked: true, Estimate: 4, RetryAfter: time.Minute - s, MitigatedUntil: t0.Add(time.Minute)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newStore(t, 10, tt.l)
			k := st.KeyString(0, "a")
			for _, c := range tt.cost {
				st.AllowN(k, t0, c)
			}
			if got := st.Peek(k, t0.Add(tt.at)); got != tt.want {
				t.Fatalf("Peek = %+v, want %+v", got, tt.want)
			}
		})
	}
}
