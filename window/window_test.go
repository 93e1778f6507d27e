package window

import (
	"github.com/edgerate/edge/internal/algorithm"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// t0 is a period boundary for every period used here (a multiple of 1h).
var t0 = time.Unix(1_700_000_000/3600*3600, 0)

func newStore(t testing.TB, capacity int, limits ...Limit) *Store {
	t.Helper()
	s, err := New(Options{Capacity: capacity, Limits: limits})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func TestNewRejectsBadOptions(t *testing.T) {
	ok := Limit{Limit: 10, Period: time.Minute}
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"zero capacity", Options{Capacity: 0, Limits: []Limit{ok}}, "capacity must be at least 1, got 0"},
		{"no limits", Options{Capacity: 10}, "need 1 to 256 limits, got 0"},
		{"too many limits", Options{Capacity: 10, Limits: make([]Limit, 257)}, "got 257"},
		{"shards not a power of two", Options{Capacity: 10, Limits: []Limit{ok}, Shards: 3}, "shards must be a power of two, got 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New() error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestLimitsAreClamped: New takes limits as compiled (package rules
// validates them); a value no store can count is clamped, not refused, and
// Judge and State clamp as New does.
func TestLimitsAreClamped(t *testing.T) {
	tests := []struct {
		name string
		l    Limit
		want Limit
	}{
		{"in range", Limit{Limit: 10, Period: time.Minute, Mitigation: time.Hour}, Limit{Limit: 10, Period: time.Minute, Mitigation: time.Hour}},
		{"zero limit", Limit{Limit: 0, Period: time.Second}, Limit{Limit: 1, Period: time.Second}},
		{"negative limit", Limit{Limit: -5, Period: time.Second}, Limit{Limit: 1, Period: time.Second}},
		{"huge limit", Limit{Limit: math.MaxInt64, Period: time.Second}, Limit{Limit: MaxLimit, Period: time.Second}},
		{"zero Limit", Limit{}, Limit{Limit: 1, Period: time.Millisecond}},
		{"sub-millisecond period", Limit{Limit: 1, Period: 1500 * time.Microsecond}, Limit{Limit: 1, Period: time.Millisecond}},
		{"huge period", Limit{Limit: 1, Period: math.MaxInt64}, Limit{Limit: 1, Period: MaxWindowPeriod}},
		{"year", Limit{Limit: 1, Period: year}, Limit{Limit: 1, Period: year}},
		{"year fixed", Limit{Algorithm: algorithm.FixedWindow, Limit: 1, Period: year}, Limit{Algorithm: algorithm.FixedWindow, Limit: 1, Period: year}},
		{"a year has no mitigation", Limit{Limit: 1, Period: year, Mitigation: time.Hour}, Limit{Limit: 1, Period: year}},
		{"a year bucket counts to MaxSpan", Limit{Algorithm: algorithm.TokenBucket, Limit: 1, Period: year},
			Limit{Algorithm: algorithm.TokenBucket, Limit: 1, Period: MaxSpan.Truncate(time.Millisecond), Burst: 1}},
		{"negative mitigation", Limit{Limit: 1, Period: time.Second, Mitigation: -1}, Limit{Limit: 1, Period: time.Second}},
		{"period+mitigation overflow", Limit{Limit: 1, Period: 40 * 24 * time.Hour, Mitigation: 20 * 24 * time.Hour},
			Limit{Limit: 1, Period: 40 * 24 * time.Hour, Mitigation: MaxSpan - 40*24*time.Hour}},
		{"windows ignore burst", Limit{Algorithm: algorithm.FixedWindow, Limit: 2, Period: time.Second, Burst: 7},
			Limit{Algorithm: algorithm.FixedWindow, Limit: 2, Period: time.Second}},
		{"unknown algorithm", Limit{Algorithm: algorithm.Concurrency + 1, Limit: 2, Period: time.Second}, Limit{Limit: 2, Period: time.Second}},
		{"quotas count by calendar", Limit{Algorithm: algorithm.Quota, Limit: 2, Period: time.Second, Reset: algorithm.Monthly + 1},
			Limit{Algorithm: algorithm.Quota, Limit: 2, Period: 31 * 24 * time.Hour, Reset: algorithm.Monthly, Location: time.UTC}},
		{"burst defaults to limit", Limit{Algorithm: algorithm.TokenBucket, Limit: 2, Period: time.Second},
			Limit{Algorithm: algorithm.TokenBucket, Limit: 2, Period: time.Second, Burst: 2}},
		{"burst refilled within MaxSpan", Limit{Algorithm: algorithm.LeakyBucket, Limit: 1, Period: (MaxSpan / 2).Truncate(time.Millisecond), Burst: 5},
			Limit{Algorithm: algorithm.LeakyBucket, Limit: 1, Period: (MaxSpan / 2).Truncate(time.Millisecond), Burst: 2}},
		{"huge burst", Limit{Algorithm: algorithm.TokenBucket, Limit: MaxLimit, Period: time.Millisecond, Burst: math.MaxInt64},
			Limit{Algorithm: algorithm.TokenBucket, Limit: MaxLimit, Period: time.Millisecond, Burst: MaxLimit}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, 10, tt.l)
			if got := s.params[0].limitOf(); got != tt.want {
				t.Fatalf("New counts by %+v, want %+v", got, tt.want)
			}
			var p params
			if tt.l.read(Counts{}, &p); p.limitOf() != tt.want {
				t.Fatalf("Judge and State count by %+v, want %+v", p.limitOf(), tt.want)
			}
			k := s.KeyString(0, "a")
			capacity := tt.want.Limit
			if tt.want.Algorithm.Bucket() {
				capacity = tt.want.Burst
			}
			for i := range 3 {
				got := s.Allow(k, t0)
				if want := int64(i) < capacity; got.Allowed != want {
					t.Fatalf("request %d: allowed %v, want %v", i, got.Allowed, want)
				}
			}
		})
	}
}

// TestCloudflareExample replays the worked example of Cloudflare's 2017 post:
// limit 50/min, 42 requests in the previous minute, 18 in the current one,
// 15s in: estimate 42×0.75+18 = 49.5 < 50, so one more passes and the next is
// blocked.
func TestCloudflareExample(t *testing.T) {
	s := newStore(t, 10, Limit{Limit: 50, Period: time.Minute})
	k := s.KeyString(0, "198.51.100.7")
	for i := range 42 {
		if d := s.Allow(k, t0.Add(time.Duration(i)*time.Second)); !d.Allowed {
			t.Fatalf("previous minute request %d blocked", i)
		}
	}
	at := t0.Add(time.Minute + 15*time.Second)
	for i := range 18 {
		if d := s.Allow(k, at); !d.Allowed {
			t.Fatalf("current minute request %d blocked", i)
		}
	}
	d := s.Allow(k, at)
	if !d.Allowed || d.Remaining != 0 {
		t.Fatalf("at 49.5: got %+v, want allowed with 0 remaining", d)
	}
	d = s.Allow(k, at)
	if d.Allowed {
		t.Fatalf("at 50.5: got allowed, want blocked")
	}
	// 42×(45−Δ)/60 + 19 < 50 ⇔ Δ > 45 − 31×60/42 = 0.714…s
	want := 45*time.Second - 31*time.Minute/42
	if d.RetryAfter < want || d.RetryAfter > want+2 {
		t.Fatalf("RetryAfter = %v, want %v (+≤2ns)", d.RetryAfter, want)
	}
}

func TestEmptyHistoryAllowsExactlyLimit(t *testing.T) {
	for _, limit := range []int64{1, 2, 7, 100} {
		s := newStore(t, 10, Limit{Limit: limit, Period: 10 * time.Second})
		k := s.KeyString(0, "a")
		now := t0.Add(3 * time.Second)
		for i := range limit {
			d := s.Allow(k, now)
			if !d.Allowed {
				t.Fatalf("limit %d: request %d blocked", limit, i)
			}
			if want := limit - i - 1; d.Remaining != want {
				t.Fatalf("limit %d: request %d: Remaining = %d, want %d", limit, i, d.Remaining, want)
			}
		}
		d := s.Allow(k, now)
		if d.Allowed {
			t.Fatalf("limit %d: request %d allowed, want blocked", limit, limit+1)
		}
		// Blocked in the first period: allowed again at the next period start
		// when prev = limit... no: prev = limit gives estimate = limit at
		// e = 0, so the wait runs into the next period.
		if d.RetryAfter <= 7*time.Second || d.RetryAfter > 17*time.Second {
			t.Fatalf("limit %d: RetryAfter = %v, want in (7s, 17s]", limit, d.RetryAfter)
		}
	}
}

// TestRetryAfterIsExact checks, over random histories, that the request is
// blocked just before now+RetryAfter and allowed at it.
func TestRetryAfterIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 2000 {
		limit := int64(1 + rng.IntN(50))
		period := time.Duration(1+rng.IntN(120)) * time.Second
		countBlocked := rng.IntN(2) == 0
		s := newStore(t, 4, Limit{Limit: limit, Period: period, CountBlocked: countBlocked})
		k := s.KeyString(0, "k")
		now := t0
		var last Decision
		for n := rng.IntN(int(3 * limit)); n >= 0; n-- {
			now = now.Add(time.Duration(rng.Int64N(int64(period) / max(limit/2, 1))))
			last = s.Allow(k, now)
		}
		if last.Allowed {
			continue
		}
		r := last.RetryAfter
		if r <= 0 || r > 2*period {
			t.Fatalf("iter %d: RetryAfter = %v outside (0, 2×%v]", iter, r, period)
		}
		if !countBlocked && r > 2 {
			if d := s.Allow(k, now.Add(r-2)); d.Allowed {
				t.Fatalf("iter %d: allowed at RetryAfter−2ns (%v)", iter, r)
			}
		}
		if d := s.Allow(k, now.Add(r)); !d.Allowed {
			t.Fatalf("iter %d: blocked at RetryAfter (%v): %+v", iter, r, d)
		}
	}
}

func TestBlockedRequestChangesNothing(t *testing.T) {
	s := newStore(t, 10, Limit{Limit: 3, Period: time.Minute})
	k := s.KeyString(0, "a")
	for range 3 {
		s.Allow(k, t0)
	}
	first := s.Allow(k, t0.Add(time.Second))
	for range 1000 {
		s.Allow(k, t0.Add(time.Second))
	}
	again := s.Allow(k, t0.Add(time.Second))
	if first.Allowed != again.Allowed || first.RetryAfter != again.RetryAfter || first.Remaining != again.Remaining {
		t.Fatalf("after 1000 blocked requests: got %+v, want %+v", again, first)
	}
	// With no counting of blocked requests the key gets its limit back as
	// the window slides: just after the next minute starts, 3×(60−e)/60 < 3.
	if d := s.Allow(k, t0.Add(time.Minute)); d.Allowed {
		t.Fatalf("at the boundary (estimate exactly 3): got allowed")
	}
	if d := s.Allow(k, t0.Add(time.Minute+time.Nanosecond)); !d.Allowed {
		t.Fatalf("after the window slid: got %+v, want allowed", d)
	}
}

func TestCountBlockedKeepsBlocking(t *testing.T) {
	s := newStore(t, 10, Limit{Limit: 10, Period: time.Minute, CountBlocked: true})
	k := s.KeyString(0, "a")
	for range 100 {
		s.Allow(k, t0)
	}
	// prev = 100: the estimate stays ≥ 10 until 100×(60−e)/60 < 10, e > 54s.
	if d := s.Allow(k, t0.Add(time.Minute+50*time.Second)); d.Allowed {
		t.Fatalf("got allowed 50s into the next period, want blocked")
	}
	if d := s.Allow(k, t0.Add(2*time.Minute+time.Second)); !d.Allowed {
		t.Fatalf("got blocked two periods later, want allowed: %+v", d)
	}
}

func TestMitigation(t *testing.T) {
	s := newStore(t, 10, Limit{Limit: 2, Period: 10 * time.Second, Mitigation: 5 * time.Minute})
	k := s.KeyString(0, "a")
	s.Allow(k, t0)
	s.Allow(k, t0)
	d := s.Allow(k, t0.Add(time.Second))
	if d.Allowed || !d.Mitigated || d.RetryAfter != 5*time.Minute {
		t.Fatalf("first over-limit request: got %+v, want blocked, mitigated for 5m", d)
	}
	// Long after the window slid, the mitigation still holds, counting down.
	d = s.Allow(k, t0.Add(time.Minute+time.Second))
	if d.Allowed || !d.Mitigated || d.RetryAfter != 4*time.Minute {
		t.Fatalf("1m later: got %+v, want blocked for 4m more", d)
	}
	if d := s.Allow(k, t0.Add(5*time.Minute+time.Second)); !d.Allowed {
		t.Fatalf("after the mitigation: got %+v, want allowed", d)
	}
}

// TestTimeGoingBackwards: with the clock alternating an hour back and
// forth, no algorithm lets more through than it does in the forward time
// spent, at any cost, mitigated or not.
func TestTimeGoingBackwards(t *testing.T) {
	for _, alg := range []algorithm.Algorithm{algorithm.SlidingWindow, algorithm.FixedWindow, algorithm.TokenBucket, algorithm.LeakyBucket, algorithm.Quota} {
		for _, tt := range []struct {
			name       string
			mitigation time.Duration
			costs      []int64 // request i costs costs[i%len(costs)]
		}{
			{"cost 1", 0, []int64{1}},
			{"costs 0 to 2, mitigated", time.Second, []int64{0, 1, 2}},
		} {
			t.Run(alg.String()+"/"+tt.name, func(t *testing.T) {
				s := newStore(t, 10, Limit{Algorithm: alg, Limit: 5, Period: time.Second, Mitigation: tt.mitigation})
				k := s.KeyString(0, "a")
				now := t0.Add(time.Hour)
				var allowed int64
				for i := range 100 {
					at := now
					if i%2 == 1 {
						at = now.Add(-time.Hour)
					}
					cost := tt.costs[i%len(tt.costs)]
					d := s.AllowN(k, at, cost)
					if d.Allowed {
						allowed += cost
					} else if d.RetryAfter < 1 {
						t.Fatalf("request %d: RetryAfter = %v, want ≥ 1ns", i, d.RetryAfter)
					}
				}
				if allowed > 5 {
					t.Fatalf("allowed %d units with the clock jumping back and forth, want ≤ 5", allowed)
				}
			})
		}
	}
}

func TestGapOfSeveralPeriods(t *testing.T) {
	s := newStore(t, 10, Limit{Limit: 3, Period: time.Second})
	k := s.KeyString(0, "a")
	for range 3 {
		s.Allow(k, t0)
	}
	d := s.Allow(k, t0.Add(5*time.Second+time.Millisecond))
	if !d.Allowed || d.Remaining != 2 {
		t.Fatalf("after a 5-period gap: got %+v, want allowed with 2 remaining", d)
	}
}

func TestHugeValuesDoNotOverflow(t *testing.T) {
	maxPeriod := MaxSpan
	s := newStore(t, 10,
		Limit{Limit: math.MaxUint32, Period: maxPeriod},
		Limit{Limit: 1, Period: time.Millisecond, CountBlocked: true},
	)
	big := s.KeyString(0, "a")
	for range 10 {
		if d := s.Allow(big, t0); !d.Allowed || d.Remaining <= 0 {
			t.Fatalf("huge limit: got %+v", d)
		}
	}
	// Saturate a counter.
	small := s.KeyString(1, "a")
	sh := s.shard(small.fp)
	s.Allow(small, t0)
	sh.slots[sh.find(small.fp)].curr = math.MaxUint32
	d := s.Allow(small, t0)
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 2*time.Millisecond {
		t.Fatalf("saturated counter: got %+v", d)
	}
	if got := sh.slots[sh.find(small.fp)].curr; got != math.MaxUint32 {
		t.Fatalf("curr = %d, want it to stay saturated", got)
	}
	// Times far from now.
	for _, at := range []time.Time{time.Unix(0, 0), time.Unix(-1e9, 5), time.Unix(1<<40, 0)} {
		s.Allow(big, at)
		s.Allow(small, at)
	}
}

func TestRefund(t *testing.T) {
	s := newStore(t, 10, Limit{Limit: 2, Period: time.Minute})
	k := s.KeyString(0, "a")
	d := s.Allow(k, t0)
	if d = s.Refund(k, d, t0); d.Remaining != 2 || d.Reset != 0 {
		t.Fatalf("after refund: got %+v, want Remaining 2, Reset 0", d)
	}
	s.Refund(k, d, t0)          // already refunded: no effect
	s.Refund(k, Decision{}, t0) // counted nothing: no effect
	for i := range 2 {
		if d := s.Allow(k, t0); !d.Allowed {
			t.Fatalf("request %d after refund blocked", i)
		}
	}
	if d := s.Allow(k, t0); d.Allowed {
		t.Fatalf("third request allowed, want blocked")
	}
	// A refund drops a block cached on the strength of the refunded count.
	kc := s.KeyString(0, "c")
	first := s.Allow(kc, t0)
	s.Allow(kc, t0)
	if d := s.Allow(kc, t0); d.Allowed {
		t.Fatalf("third request of c allowed")
	}
	s.Refund(kc, first, t0)
	if d := s.Allow(kc, t0); !d.Allowed {
		t.Fatalf("after a refund, a cached block still refused c: %+v", d)
	}
	// A refund from an earlier period must not touch the current one.
	old := s.Allow(s.KeyString(0, "b"), t0)
	kb := s.KeyString(0, "b")
	s.Allow(kb, t0.Add(time.Minute))
	s.Refund(kb, old, t0.Add(time.Minute))
	s.Allow(kb, t0.Add(time.Minute))
	if d := s.Allow(kb, t0.Add(time.Minute)); d.Allowed {
		t.Fatalf("stale refund changed the current period")
	}
}

func TestRulesAreIndependent(t *testing.T) {
	s := newStore(t, 100, Limit{Limit: 1, Period: time.Minute}, Limit{Limit: 1, Period: time.Minute})
	a0, a1 := s.KeyString(0, "a"), s.KeyString(1, "a")
	if a0 == a1 {
		t.Fatal("same key under two rules gave the same Key")
	}
	if !s.Allow(a0, t0).Allowed || !s.Allow(a1, t0).Allowed {
		t.Fatal("first request of each rule blocked")
	}
	if a0.Rule() != 0 || a1.Rule() != 1 {
		t.Fatalf("Rule() = %d, %d, want 0, 1", a0.Rule(), a1.Rule())
	}
}

// TestTableStaysConsistent inserts, finds and expires many keys in a small
// store and checks the Robin Hood invariants and counts after each phase.
func TestTableStaysConsistent(t *testing.T) {
	s, err := New(Options{Capacity: 1000, Limits: []Limit{{Limit: 1000, Period: time.Second}}, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]Key, 1000)
	for i := range keys {
		keys[i] = s.KeyString(0, string(rune(i))+"x")
		s.Allow(keys[i], t0)
	}
	check := func(phase string) { t.Helper(); checkTable(t, s, phase) }
	check("filled")
	if st := s.Stats(); s.Len() != 1000 || st.Evicted != 0 || st.Overflowed != 0 {
		t.Fatalf("Len() = %d with %+v after 1000 keys in a store of 1000, want 1000 tracked, nothing evicted", s.Len(), st)
	}
	for _, k := range keys {
		if d := s.Allow(k, t0); !d.Allowed || d.Remaining < 998 {
			t.Fatalf("second request: got %+v, want allowed with ≥998 remaining", d)
		}
	}
	// Two periods on, every key is expired: new keys reclaim their slots.
	later := t0.Add(3 * time.Second)
	for i := range 1000 {
		if d := s.Allow(s.KeyString(0, string(rune(i))+"y"), later); !d.Allowed || d.Overflow {
			t.Fatalf("new key %d: got %+v, want allowed in its own slot", i, d)
		}
	}
	check("replaced")
	if st := s.Stats(); st.ExpiredReclaimed < 900 || st.Overflowed != 0 {
		t.Fatalf("Stats() = %+v, want expired slots reclaimed and no overflow", st)
	}
}

// checkTable checks the Robin Hood invariants of every shard of s: each
// entry is found where it is and the counts agree.
func checkTable(t *testing.T, s *Store, phase string) {
	t.Helper()
	live := 0
	for si := range s.shards {
		sh := &s.shards[si]
		n := 0
		for i, e := range sh.slots {
			if e.fp == 0 {
				if e.counters != (counters{}) {
					t.Fatalf("%s: shard %d: empty slot %d holds %+v", phase, si, i, e.counters)
				}
				continue
			}
			n++
			if got := sh.find(e.fp); got != i {
				t.Fatalf("%s: shard %d: entry at %d found at %d", phase, si, i, got)
			}
		}
		if n != sh.live || n > sh.limit || n >= len(sh.slots) {
			t.Fatalf("%s: shard %d: %d entries, live=%d, limit=%d", phase, si, n, sh.live, sh.limit)
		}
		live += n
	}
	if live != s.Len() {
		t.Fatalf("%s: Len() = %d, counted %d", phase, s.Len(), live)
	}
}
