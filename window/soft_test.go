package window

import (
	"github.com/edgerate/edge/internal/algorithm"
	"testing"
	"time"
)

// TestSoftLimit offers a client at several multiples of a soft limit of
// 1000 per period for 20 periods, evenly spaced, with a seeded draw,
// starting at a period's start or 40% into one: above the limit it is
// allowed within ±5% of the limit in total, and every tenth of every
// period allows some; below it nothing is refused.
func TestSoftLimit(t *testing.T) {
	const limit, periods = 1000, 20
	for _, alg := range []algorithm.Algorithm{algorithm.SlidingWindow, algorithm.FixedWindow} {
		for _, offset := range []time.Duration{0, 24 * time.Second} {
			for _, tc := range []struct {
				name string
				rate float64 // multiple of the limit
			}{
				{"0.9x", 0.9}, {"1.1x", 1.1}, {"1.5x", 1.5}, {"3x", 3},
			} {
				t.Run(alg.String()+"/"+offset.String()+"/"+tc.name, func(t *testing.T) {
					s, err := New(Options{Capacity: 16, SoftSeed: 42, Limits: []Limit{
						{Algorithm: alg, Limit: limit, Period: time.Minute, Soft: true},
					}})
					if err != nil {
						t.Fatal(err)
					}
					k := s.Key(0, []byte("client"))
					per := int(tc.rate * limit)
					gap := time.Minute / time.Duration(per)
					start := time.Unix(1_700_000_040, 0).Truncate(time.Minute).Add(offset)
					allowed, refused := 0, 0
					for w := range periods {
						var tenths [10]int
						for i := range per {
							at := start.Add(time.Duration(w)*time.Minute + time.Duration(i)*gap)
							d := s.Allow(k, at)
							if d.Allowed {
								allowed++
								tenths[i*10/per]++
							} else {
								refused++
								if d.RetryAfter != time.Second {
									t.Fatalf("period %d request %d: RetryAfter %s, want 1s", w, i, d.RetryAfter)
								}
							}
						}
						for i, n := range tenths {
							if n == 0 {
								t.Errorf("period %d, tenth %d: nothing allowed", w, i)
							}
						}
					}
					if tc.rate < 1 {
						if refused > 0 {
							t.Errorf("%d refused below the limit", refused)
						}
						return
					}
					want := float64(limit * periods)
					if got := float64(allowed); got < want*0.95 || got > want*1.05 {
						t.Errorf("allowed %d of %d offered, want %d ± 5%%", allowed, per*periods, limit*periods)
					}
				})
			}
		}
	}
}

// TestSoftLimitCosts checks a soft window's edges: a cost over the limit is
// refused without counting, and the rule counts refused requests.
func TestSoftLimitCosts(t *testing.T) {
	s, err := New(Options{Capacity: 16, SoftSeed: 7, Limits: []Limit{
		{Limit: 10, Period: time.Second, Soft: true, Mitigation: time.Minute},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if l := s.Limit(0); !l.Soft || !l.CountBlocked || l.Mitigation != 0 {
		t.Fatalf("Limit = %+v, want Soft, CountBlocked and no mitigation", l)
	}
	k := s.Key(0, []byte("a"))
	now := time.Unix(100, 0)
	if d := s.AllowN(k, now, 11); d.Allowed || d.RetryAfter != 0 {
		t.Fatalf("cost 11: %+v, want refused with no RetryAfter", d)
	}
	refused := 0
	for i := range 100 {
		if d := s.Allow(k, now.Add(time.Duration(i)*time.Microsecond)); !d.Allowed {
			refused++
		}
	}
	if refused < 50 {
		t.Errorf("refused %d of 100 offered against a soft limit of 10, want most", refused)
	}
}

// TestSoftLimitAllocates nothing: a soft decision, allowed or refused, is
// as free of allocations as a hard one.
func TestSoftLimitAllocates(t *testing.T) {
	s, err := New(Options{Capacity: 16, Limits: []Limit{{Limit: 10, Period: time.Second, Soft: true}}})
	if err != nil {
		t.Fatal(err)
	}
	k := s.Key(0, []byte("a"))
	now := time.Unix(100, 0)
	if n := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond)
		s.Allow(k, now)
	}); n != 0 {
		t.Errorf("%v allocations a decision, want 0", n)
	}
}

// TestSoftCarry: a soft fixed window keeps its previous count for its
// estimate; carried to a hard fixed window, that count is dropped, as a
// hard fixed window has none, while the current count stays.
func TestSoftCarry(t *testing.T) {
	soft := Limit{Algorithm: algorithm.FixedWindow, Limit: 10, Period: time.Minute, Identity: 1, Soft: true}
	old, err := New(Options{Capacity: 16, SoftSeed: 3, Limits: []Limit{soft}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(6000, 0) // a minute boundary
	k := old.Key(0, []byte("a"))
	for i := range 10 {
		old.Allow(k, start.Add(time.Duration(i)*time.Second))
	}
	for i := range 5 {
		old.Allow(k, start.Add(time.Minute+time.Duration(i)*time.Second))
	}
	hard := soft
	hard.Soft = false
	dst, err := New(Options{Capacity: 16, SeedFrom: old, Limits: []Limit{hard}})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := old.Carry(dst, []int{0}); err != nil || n != 1 {
		t.Fatalf("Carry = %d, %v; want 1 key", n, err)
	}
	at := start.Add(time.Minute + 10*time.Second)
	for i := range 5 {
		if d := dst.Allow(k, at); !d.Allowed {
			t.Fatalf("request %d after the carry: refused, want 5 more of 10 (the previous minute forgotten)", i)
		}
	}
	if d := dst.Allow(k, at); d.Allowed {
		t.Errorf("the 11th request of the minute: allowed, want refused")
	}
}

// TestSoftPeek: a soft key in its warm-up is neither shown as mitigated
// nor kept from eviction as one, and a soft fixed window shows no previous
// count.
func TestSoftPeek(t *testing.T) {
	for _, alg := range []algorithm.Algorithm{algorithm.SlidingWindow, algorithm.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			s, err := New(Options{Capacity: 16, SoftSeed: 5, Limits: []Limit{{Algorithm: alg, Limit: 10, Period: time.Minute, Soft: true}}})
			if err != nil {
				t.Fatal(err)
			}
			k := s.Key(0, []byte("a"))
			start := time.Unix(6000, 0)
			for i := range 5 {
				s.Allow(k, start.Add(time.Duration(i)*time.Second))
			}
			at := start.Add(time.Minute + time.Second)
			s.Allow(k, at)
			st := s.Peek(k, at)
			if !st.MitigatedUntil.IsZero() {
				t.Errorf("MitigatedUntil = %v, want none", st.MitigatedUntil)
			}
			if wantPrev := map[algorithm.Algorithm]int64{algorithm.SlidingWindow: 5, algorithm.FixedWindow: 0}[alg]; st.Previous != wantPrev || st.Current != 1 {
				t.Errorf("Previous, Current = %d, %d; want %d, 1", st.Previous, st.Current, wantPrev)
			}
			if p := s.params[0].pressure(counters{win: uint32(6000 / 60), until: 60_000, curr: 1}, start.UnixNano()); p > 1 {
				t.Errorf("pressure of a key in its warm-up = %v, want its estimate's", p)
			}
		})
	}
}

// TestJudgeSoft: a soft window judged from a shared store's counts allows
// whatever the draw while the offered rate is within the limit, thins by
// the draw above it (a draw of 0 always admits, the largest never does),
// extrapolates a key in its warm-up, and refuses a cost above the limit
// with no wait that could help.
func TestJudgeSoft(t *testing.T) {
	l := Limit{Limit: 100, Period: time.Minute, Soft: true, CountBlocked: true}
	const never = ^uint64(0)
	tests := []struct {
		name      string
		c         Counts
		cost      int64
		draw      uint64
		allowed   bool
		retry     time.Duration
		remaining int64
	}{
		{"under the limit, worst draw", Counts{Previous: 50, Current: 40, Elapsed: 30 * time.Second}, 1, never, true, 0, 35},
		{"at the limit", Counts{Previous: 0, Current: 100, Elapsed: 59 * time.Second}, 1, never, true, 0, 0},
		{"over, lucky draw", Counts{Previous: 200, Current: 150, Elapsed: 30 * time.Second}, 1, 0, true, 0, 0},
		{"over, unlucky draw", Counts{Previous: 200, Current: 150, Elapsed: 30 * time.Second}, 1, never, false, time.Second, 0},
		{"warm-up: 30 in 6s is 300 a minute", Counts{Current: 30, Elapsed: 6 * time.Second, Mitigation: 54 * time.Second}, 1, never, false, time.Second, 0},
		{"no warm-up: 30 so far", Counts{Current: 30, Elapsed: 6 * time.Second}, 1, never, true, 0, 70},
		{"cost above the limit", Counts{Current: 0, Elapsed: time.Second}, 101, 0, false, 0, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := l.JudgeSoft(tt.c, tt.cost, tt.draw)
			if d.Allowed != tt.allowed || d.RetryAfter != tt.retry || d.Remaining != tt.remaining {
				t.Errorf("got %+v, want allowed %v, RetryAfter %v, Remaining %d", d, tt.allowed, tt.retry, tt.remaining)
			}
		})
	}
}
