package window

import (
	"fmt"
	"github.com/edgerate/edge/internal/algorithm"
	"testing"
	"time"
)

// TestConcurrencySlots: a Concurrency rule allows Limit requests of a key
// in flight, refuses the next at once with RetryAfter 1s whatever its cost,
// and frees a slot on Release or Refund, never below zero, key by key and
// rule by rule.
func TestConcurrencySlots(t *testing.T) {
	s := newStore(t, 100, Limit{Algorithm: algorithm.Concurrency, Limit: 2}, Limit{Algorithm: algorithm.Concurrency, Limit: 1})
	a, b, other := s.KeyString(0, "a"), s.KeyString(0, "b"), s.KeyString(1, "a")
	type step struct {
		name    string
		do      func() Decision
		allowed bool
		remain  int64
		inUse   int64 // SlotsInUse(0) after the step
	}
	var held Decision
	steps := []step{
		{"first", func() Decision { return s.AllowN(a, t0, 1) }, true, 1, 1},
		{"second, cost 5", func() Decision { held = s.AllowN(a, t0, 5); return held }, true, 0, 2},
		{"third refused", func() Decision { return s.AllowN(a, t0, 1) }, false, 0, 2},
		{"another key", func() Decision { return s.AllowN(b, t0, 1) }, true, 1, 3},
		{"another rule", func() Decision { return s.AllowN(other, t0, 1) }, true, 0, 3},
		{"refund frees one", func() Decision { return s.Refund(a, held, t0) }, true, 1, 2},
		{"allowed again", func() Decision { return s.AllowN(a, t0, 1) }, true, 0, 3},
		{"release, release", func() Decision { s.Release(a, t0); s.Release(a, t0); return s.AllowN(a, t0, 0) }, true, 1, 2},
	}
	for _, st := range steps {
		d := st.do()
		if d.Allowed != st.allowed || d.Remaining != st.remain {
			t.Fatalf("%s: %+v, want allowed %v remaining %d", st.name, d, st.allowed, st.remain)
		}
		if !d.Allowed && d.RetryAfter != time.Second {
			t.Fatalf("%s: RetryAfter %v, want 1s", st.name, d.RetryAfter)
		}
		if got := s.SlotsInUse(0); got != st.inUse {
			t.Fatalf("%s: SlotsInUse(0) = %d, want %d", st.name, got, st.inUse)
		}
	}
	for range 5 { // more releases than slots: never below zero
		s.Release(a, t0)
		s.Release(b, t0)
	}
	if got := s.SlotsInUse(0); got != 0 {
		t.Fatalf("SlotsInUse(0) = %d after every release, want 0", got)
	}
	if st := s.Peek(other, t0); st.Current != 1 || st.Remaining != 0 || !st.Tracked {
		t.Fatalf("Peek(other) = %+v, want 1 in flight", st)
	}
}

// TestConcurrencyNeverEvicted: a key holding slots keeps them however many
// other keys pass through a full store and however much time goes by.
func TestConcurrencyNeverEvicted(t *testing.T) {
	s := newStore(t, 64, Limit{Algorithm: algorithm.Concurrency, Limit: 1}, Limit{Limit: 1, Period: time.Second})
	held := s.KeyString(0, "held")
	if d := s.Allow(held, t0); !d.Allowed {
		t.Fatalf("first request refused: %+v", d)
	}
	for i := range 10_000 {
		now := t0.Add(time.Duration(i) * time.Second)
		s.Allow(s.KeyString(1, fmt.Sprint("rate", i)), now)
		k := s.KeyString(0, fmt.Sprint("slot", i))
		s.Allow(k, now)
		s.Release(k, now)
	}
	later := t0.Add(48 * time.Hour)
	if d := s.Allow(held, later); d.Allowed {
		t.Fatalf("a key holding its only slot was allowed again after 10000 other keys and 48h: %+v", d)
	}
	s.Release(held, later)
	if d := s.Allow(held, later); !d.Allowed {
		t.Fatalf("refused after its slot was released: %+v", d)
	}
}

// TestConcurrencyAllowLimit: AllowLimitN takes a Concurrency rule's slot
// only while fewer than the limit it is given are in use (never more than
// the rule's own), as a shared counter's failure mode asks it to.
func TestConcurrencyAllowLimit(t *testing.T) {
	s := newStore(t, 100, Limit{Algorithm: algorithm.Concurrency, Limit: 3})
	a := s.KeyString(0, "a")
	tests := []struct {
		name    string
		limit   int64
		allowed bool
		remain  int64
	}{
		{"first of 2", 2, true, 1},
		{"second of 2", 2, true, 0},
		{"third of 2 refused", 2, false, 0},
		{"third of the rule's 3", 10, true, 0},
		{"fourth refused, the rule holds 3", 10, false, 0},
	}
	for _, tt := range tests {
		d := s.AllowLimitN(a, t0, tt.limit, 1)
		if d.Allowed != tt.allowed || d.Remaining != tt.remain {
			t.Fatalf("%s: %+v, want allowed %v remaining %d", tt.name, d, tt.allowed, tt.remain)
		}
		if !d.Allowed && d.RetryAfter != time.Second {
			t.Fatalf("%s: RetryAfter %v, want 1s", tt.name, d.RetryAfter)
		}
	}
	if got := s.SlotsInUse(0); got != 3 {
		t.Fatalf("SlotsInUse(0) = %d, want 3", got)
	}
}
