package window

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestAllowLimit(t *testing.T) {
	tests := []struct {
		name        string
		limit       int64 // passed to AllowLimit
		wantAllowed int
	}{
		{"a third of the limit", 3, 3},
		{"zero counts as one", 0, 1},
		{"negative counts as one", -5, 1},
		{"the rule's own limit", 10, 10},
		{"more than the rule's limit is the rule's limit", 1000, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, 16, Limit{Limit: 10, Period: time.Minute})
			k := s.KeyString(0, "client")
			got := 0
			for range 20 {
				if s.AllowLimit(k, t0, tt.limit).Allowed {
					got++
				}
			}
			if got != tt.wantAllowed {
				t.Fatalf("AllowLimit(%d) allowed %d of 20, want %d", tt.limit, got, tt.wantAllowed)
			}
			// The counts are the rule's: Allow sees them against the full limit.
			more := 0
			for range 20 {
				if s.Allow(k, t0).Allowed {
					more++
				}
			}
			if want := 10 - tt.wantAllowed; more != want {
				t.Fatalf("Allow after AllowLimit allowed %d more, want %d", more, want)
			}
		})
	}
}

func TestAllowLimitBlockIsNotCachedForAllow(t *testing.T) {
	s := newStore(t, 16, Limit{Limit: 10, Period: time.Minute})
	k := s.KeyString(0, "client")
	if !s.AllowLimit(k, t0, 1).Allowed {
		t.Fatal("first request blocked")
	}
	if d := s.AllowLimit(k, t0, 1); d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("second request under limit 1: got %+v, want blocked with a wait", d)
	}
	if d := s.Allow(k, t0); !d.Allowed || d.Remaining != 8 {
		t.Fatalf("Allow after a block under a smaller limit: got %+v, want allowed with 8 remaining", d)
	}
}

func TestAllowLimitRefund(t *testing.T) {
	s := newStore(t, 16, Limit{Limit: 10, Period: time.Minute})
	k := s.KeyString(0, "client")
	d := s.AllowLimit(k, t0, 2)
	s.Refund(k, d, t0)
	if st := s.Peek(k, t0); st.Current != 0 {
		t.Fatalf("after Refund: current %d, want 0", st.Current)
	}
}

func TestMerge(t *testing.T) {
	const P = time.Minute
	tests := []struct {
		name        string
		local       int           // requests Allowed locally at t0 first
		start       time.Duration // of the merged period, after t0
		prev, curr  int64
		at          time.Duration // when Peek looks, after t0
		wantPrev    int64
		wantCurr    int64
		wantTakenIn bool
		wantTracked bool
	}{
		{"untracked key is added", 0, 0, 4, 7, 0, 4, 7, true, true},
		{"raises counts", 2, 0, 1, 5, 0, 1, 5, true, true},
		{"never lowers counts", 6, 0, 0, 3, 0, 0, 6, true, true},
		{"a newer period moves the entry on", 3, P, 0, 5, P, 3, 5, true, true},
		{"the entry is one period on: merged current is its previous", 0, -P, 2, 9, 0, 9, 0, true, true},
		{"older periods are ignored", 0, -2 * P, 2, 9, 0, 0, 0, false, false},
		{"zero counts add nothing", 0, 0, 0, 0, 0, 0, 0, false, false},
		{"counts saturate", 0, 0, 0, 1 << 40, 0, 0, 1<<32 - 1, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, 16, Limit{Limit: 20, Period: P})
			k := s.KeyString(0, "client")
			s.Allow(s.KeyString(0, "other"), t0) // the store has seen t0's period
			if tt.name == "the entry is one period on: merged current is its previous" {
				// Put the entry one period after the merged period.
				s.Allow(k, t0)
				s.Refund(k, s.Allow(k, t0), t0)
			}
			for range tt.local {
				s.Allow(k, t0)
			}
			if got := s.Merge(k, t0.Add(tt.start), tt.prev, tt.curr); got != tt.wantTakenIn {
				t.Fatalf("Merge = %v, want %v", got, tt.wantTakenIn)
			}
			st := s.Peek(k, t0.Add(tt.at))
			if st.Tracked != tt.wantTracked {
				t.Fatalf("tracked %v, want %v", st.Tracked, tt.wantTracked)
			}
			if !tt.wantTracked {
				return
			}
			wantCurr := tt.wantCurr
			if tt.name == "the entry is one period on: merged current is its previous" {
				wantCurr = 1
			}
			if st.Previous != tt.wantPrev || st.Current != wantCurr {
				t.Fatalf("got previous %d current %d, want %d and %d", st.Previous, st.Current, tt.wantPrev, wantCurr)
			}
		})
	}
}

func TestMergedCountsBlock(t *testing.T) {
	s := newStore(t, 16, Limit{Limit: 10, Period: time.Minute})
	k := s.KeyString(0, "client")
	s.Allow(k, t0)
	s.Merge(k, t0, 0, 10) // the other nodes used the rest
	if d := s.Allow(k, t0.Add(time.Second)); d.Allowed {
		t.Fatalf("after merging a full count: got allowed %+v, want blocked", d)
	}
}

func TestMergeNeverEvicts(t *testing.T) {
	s := newStore(t, 1, Limit{Limit: 10, Period: time.Minute})
	a, b := s.KeyString(0, "a"), s.KeyString(0, "b")
	s.Allow(a, t0)
	if s.Merge(b, t0, 0, 3) {
		t.Fatal("Merge of a new key into a full store took it in")
	}
	if st := s.Peek(a, t0); !st.Tracked || st.Current != 1 {
		t.Fatalf("key a after Merge of b: %+v, want tracked with 1", st)
	}
}

// TestJudgeMatchesAllow checks that Judge, given the counts a store judged
// by, gives the Decision the store itself gave, over random traffic.
func TestJudgeMatchesAllow(t *testing.T) {
	for _, l := range []Limit{
		{Limit: 5, Period: 10 * time.Second},
		{Limit: 50, Period: time.Minute, CountBlocked: true},
		{Limit: 1, Period: time.Second},
		{Limit: 1000, Period: time.Hour},
	} {
		s := newStore(t, 16, l)
		k := s.KeyString(0, "client")
		rng := rand.New(rand.NewPCG(1, uint64(l.Limit)))
		now := t0
		for i := range 5000 {
			now = now.Add(time.Duration(rng.Int64N(int64(3 * l.Period / time.Duration(l.Limit)))))
			d := s.Allow(k, now)
			st := s.Peek(k, now)
			p := &s.params[0]
			_, e := p.position(now.UnixNano())
			got := l.Judge(Counts{Allowed: d.Allowed, Previous: st.Previous, Current: st.Current, Elapsed: time.Duration(e)})
			if got.Allowed != d.Allowed || got.Remaining != d.Remaining || got.RetryAfter != d.RetryAfter ||
				got.Reset != d.Reset || got.Mitigated != d.Mitigated {
				t.Fatalf("limit %+v, request %d: Judge = %+v, Allow = %+v", l, i, got, d)
			}
		}
	}
}

func TestJudgeMitigation(t *testing.T) {
	l := Limit{Limit: 3, Period: time.Minute, Mitigation: 5 * time.Minute}
	got := l.Judge(Counts{Previous: 0, Current: 3, Elapsed: time.Second, Mitigation: 5 * time.Minute})
	if got.Allowed || !got.Mitigated || got.RetryAfter != 5*time.Minute {
		t.Fatalf("Judge of a mitigated key = %+v, want blocked, mitigated, RetryAfter 5m", got)
	}
}
