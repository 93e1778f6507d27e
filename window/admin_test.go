package window

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestPeekAndReset(t *testing.T) {
	s := newStore(t, 10, Limit{Limit: 2, Period: time.Minute, Mitigation: time.Hour})
	k := s.KeyString(0, "a")
	if st := s.Peek(k, t0); st.Tracked || st.Remaining != 2 {
		t.Fatalf("untouched key: got %+v, want untracked with 2 remaining", st)
	}
	at := t0.Add(15 * time.Second)
	s.Allow(k, at)
	if st := s.Peek(k, at); !st.Tracked || st.Current != 1 || st.Remaining != 1 || st.RetryAfter != 0 || st.Estimate != 1 {
		t.Fatalf("after one request: got %+v", st)
	}
	s.Allow(k, at)
	s.Allow(k, at) // over the limit: mitigated for an hour
	st := s.Peek(k, at.Add(time.Minute))
	if st.MitigatedUntil.IsZero() || !st.MitigatedUntil.Equal(at.Add(time.Hour)) || st.RetryAfter != 59*time.Minute || st.Previous != 2 {
		t.Fatalf("mitigated key a minute later: got %+v", st)
	}
	if !s.Reset(k) {
		t.Fatal("Reset of a tracked key returned false")
	}
	if s.Reset(k) {
		t.Fatal("second Reset returned true")
	}
	if d := s.Allow(k, at.Add(time.Minute)); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after Reset: got %+v, want a fresh budget", d)
	}
	if s.Len() != 1 {
		t.Fatalf("Len() = %d after reset and one request, want 1", s.Len())
	}
}

func TestCarry(t *testing.T) {
	oldLimits := []Limit{
		{Limit: 2, Period: time.Minute, Identity: 10},
		{Limit: 5, Period: time.Minute, Identity: 20},
		{Limit: 5, Period: time.Minute, Identity: 30, Mitigation: time.Hour},
	}
	old := newStore(t, 100, oldLimits...)
	for r := range 3 {
		for range 3 + 3*(r/2) { // rule 30 gets 6 of 5: mitigated
			old.Allow(old.KeyString(r, "a"), t0)
		}
	}
	// New config: rule 20 dropped, rule 30 moved to index 0 with a higher
	// limit, rule 10 kept at index 1, one new rule.
	dst, err := New(Options{Capacity: 100, SeedFrom: old, Limits: []Limit{
		{Limit: 50, Period: time.Minute, Identity: 30, Mitigation: time.Hour},
		{Limit: 2, Period: time.Minute, Identity: 10},
		{Limit: 1, Period: time.Minute, Identity: 40},
	}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := old.Carry(dst, []int{1, -1, 0})
	if err != nil || n != 2 {
		t.Fatalf("Carry = %d, %v; want 2 keys", n, err)
	}
	// Rule 10 kept its counts: still over its limit of 2.
	if d := dst.Allow(dst.KeyString(1, "a"), t0); d.Allowed {
		t.Errorf("carried rule 10: allowed, want blocked (3 counted of 2)")
	}
	// Rule 30's mitigation survives even though its limit rose.
	if d := dst.Allow(dst.KeyString(0, "a"), t0); d.Allowed || !d.Mitigated {
		t.Errorf("carried rule 30: got %+v, want blocked by the carried mitigation", d)
	}
	if d := dst.Allow(dst.KeyString(2, "a"), t0); !d.Allowed {
		t.Errorf("new rule: got %+v, want a fresh budget", d)
	}
	bad := []struct {
		name  string
		rules []int
		dst   *Store
	}{
		{"wrong length", []int{0}, dst},
		{"out of range", []int{5, -1, -1}, dst},
		{"period or identity changed", []int{2, -1, -1}, dst},
		{"no shared seed", []int{-1, -1, -1}, newStore(t, 10, oldLimits...)},
	}
	for _, b := range bad {
		if _, err := old.Carry(b.dst, b.rules); err == nil {
			t.Errorf("%s: Carry returned no error", b.name)
		}
	}
}

// TestLimitStateMatchesPeek: counts reported by a shared store describe a
// key exactly as Peek describes the same counts held locally.
func TestLimitStateMatchesPeek(t *testing.T) {
	l := Limit{Limit: 50, Period: time.Minute, Mitigation: 10 * time.Minute}
	rng := rand.New(rand.NewPCG(5, 5))
	for range 200 {
		s := newStore(t, 10, l)
		k := s.KeyString(0, "a")
		prev, curr := rng.IntN(60), rng.IntN(60)
		for range prev {
			s.Allow(k, t0.Add(-time.Minute))
		}
		at := t0.Add(time.Duration(rng.Int64N(int64(time.Minute))))
		for range curr {
			s.Allow(k, at)
		}
		want := s.Peek(k, at)
		var mitigation time.Duration
		if !want.MitigatedUntil.IsZero() {
			mitigation = want.MitigatedUntil.Sub(at)
		}
		got := l.State(Counts{Previous: want.Previous, Current: want.Current, Elapsed: at.Sub(t0), Mitigation: mitigation}, at)
		if got != want {
			t.Fatalf("prev %d, curr %d requests sent, at %v: State = %+v, Peek = %+v", prev, curr, at.Sub(t0), got, want)
		}
	}
	if st := l.State(Counts{}, t0); st.Tracked || st.Remaining != 50 {
		t.Errorf("State of no counts = %+v, want untracked with 50 remaining", st)
	}
}
