package window

import (
	"context"
	"github.com/edgerate/edge/internal/algorithm"
	"math"
	"testing"
	"time"
)

// TestStoreCounterIsTheStore: a Store's Counter decides, refunds, peeks and
// resets exactly as the Store does, one request a unit.
func TestStoreCounterIsTheStore(t *testing.T) {
	l := Limit{Limit: 3, Period: time.Minute}
	direct, counted := newStore(t, 100, l), newStore(t, 100, l)
	c := counted.Counter()
	ctx := context.Background()
	for i := range 6 {
		now := t0.Add(time.Duration(i) * 7 * time.Second)
		tally := c.Begin()
		k := counted.KeyString(0, "client")
		id := ID{Key: k, Name: []byte("client")}
		got, want := tally.Decide(id, 1, now), direct.Allow(direct.KeyString(0, "client"), now)
		if got != want {
			t.Fatalf("request %d: Decide = %+v, Allow = %+v", i, got, want)
		}
		if i == 4 {
			got = tally.Refund(id, got, now)
			want = direct.Refund(direct.KeyString(0, "client"), want, now)
			if got != want {
				t.Fatalf("request %d: Refund = %+v, want %+v", i, got, want)
			}
		}
		tally.End()
		st, err := c.Peek(ctx, id, now)
		if err != nil {
			t.Fatalf("Peek: %v", err)
		}
		if wantSt := direct.Peek(direct.KeyString(0, "client"), now); st != wantSt {
			t.Fatalf("request %d: Peek = %+v, want %+v", i, st, wantSt)
		}
	}
	id := ID{Key: counted.KeyString(0, "client"), Name: []byte("client")}
	tracked, err := c.Reset(ctx, id, t0)
	if err != nil || !tracked {
		t.Fatalf("Reset = %v, %v; want true, nil", tracked, err)
	}
	if tracked, _ := c.Reset(ctx, id, t0); tracked {
		t.Fatal("second Reset found the key still tracked")
	}
}

// TestStoreCounterCost: a Store's counter takes costs 0 to MaxCost; a cost
// outside them is refused and counts nothing.
func TestStoreCounterCost(t *testing.T) {
	s := newStore(t, 100, Limit{Limit: 5, Period: time.Minute})
	tally := s.Counter().Begin()
	defer tally.End()
	id := ID{Key: s.KeyString(0, "client"), Name: []byte("client")}
	for _, cost := range []int64{-1, MaxCost + 1, math.MaxInt64, math.MinInt64} {
		if d := tally.Decide(id, cost, t0); d.Allowed || d.RetryAfter != 0 {
			t.Errorf("cost %d: got %+v, want refused with no RetryAfter", cost, d)
		}
	}
	if st := s.Peek(id.Key, t0); st.Tracked {
		t.Errorf("refused costs left state %+v, want none", st)
	}
	tests := []struct {
		cost          int64
		wantAllowed   bool
		wantRemaining int64
	}{
		{0, true, 5},
		{2, true, 3},
		{1, true, 2},
		{3, false, 2}, // 3 + 3 − 1 ≥ 5
		{2, true, 0},
		{0, false, 0}, // at the limit: refused even at cost 0
	}
	for _, tt := range tests {
		d := tally.Decide(id, tt.cost, t0)
		if d.Allowed != tt.wantAllowed || d.Remaining != tt.wantRemaining {
			t.Errorf("cost %d: got allowed %v, remaining %d; want %v, %d", tt.cost, d.Allowed, d.Remaining, tt.wantAllowed, tt.wantRemaining)
		}
	}
}

// TestCharge: a charge adds to the current period's count after the fact,
// whatever the limit, and blocks later requests; charges of less than one,
// and charges for a period the key has moved past, change nothing; Release
// holds nothing to give back.
func TestCharge(t *testing.T) {
	l := Limit{Limit: 10, Period: time.Minute}
	tests := []struct {
		name        string
		before      int           // requests allowed first, at t0
		charges     []int64       // then charged, at t0 + at
		at          time.Duration // when the charges are made
		wantCurrent int64         // count in at's period, read at at
		wantAllowed bool          // a request at at
	}{
		{"untracked key", 0, []int64{4}, 0, 4, true},
		{"onto requests", 3, []int64{4}, 0, 7, true},
		{"past the limit", 3, []int64{20}, 0, 23, false},
		{"several", 1, []int64{3, 3, 3}, 0, 10, false},
		{"zero and negative do nothing", 2, []int64{0, -5}, 0, 2, true},
		{"saturates", 1, []int64{math.MaxInt64, math.MaxInt64}, 0, math.MaxUint32, false},
		{"in the next period", 3, []int64{4}, time.Minute, 4, true},
		{"for a period the key has left", 3, []int64{4}, -time.Minute, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, 100, l)
			tally := s.Counter().Begin()
			defer tally.End()
			id := ID{Key: s.KeyString(0, "client"), Name: []byte("client")}
			for range tt.before {
				if d := s.Allow(id.Key, t0); !d.Allowed {
					t.Fatalf("setup request blocked: %+v", d)
				}
			}
			at := t0.Add(tt.at)
			for _, n := range tt.charges {
				tally.Charge(id, n, at)
				tally.Release(id, at)
			}
			read := at
			if tt.at < 0 {
				read = t0
			}
			if got := s.Peek(id.Key, read).Current; got != tt.wantCurrent {
				t.Errorf("current count: got %d, want %d", got, tt.wantCurrent)
			}
			if got := tally.Decide(id, 1, read).Allowed; got != tt.wantAllowed {
				t.Errorf("next request allowed: got %v, want %v", got, tt.wantAllowed)
			}
		})
	}
}

// TestStoreCounterAllocatesNothing: a decision, allowed or refused, and a
// refund and a charge allocate nothing, under every algorithm.
func TestStoreCounterAllocatesNothing(t *testing.T) {
	for _, alg := range []algorithm.Algorithm{algorithm.SlidingWindow, algorithm.FixedWindow, algorithm.TokenBucket, algorithm.LeakyBucket, algorithm.Quota} {
		for _, limit := range []int64{1_000_000, 1} {
			s := newStore(t, 100, Limit{Algorithm: alg, Limit: limit, Period: time.Minute})
			c := s.Counter()
			name := []byte("client")
			id := ID{Key: s.Key(0, name), Name: name}
			got := testing.AllocsPerRun(100, func() {
				tally := c.Begin()
				d := tally.Decide(id, 3, t0)
				tally.Refund(id, d, t0)
				tally.Decide(id, 1, t0)
				tally.Charge(id, 2, t0)
				tally.End()
			})
			if got != 0 {
				t.Errorf("%s, limit %d: allocations a decision: got %v, want 0", alg, limit, got)
			}
		}
	}
}
