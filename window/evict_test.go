package window

import (
	"sync"
	"testing"
	"time"
)

// TestOverflowWhenEveryKeyIsBusy fills a store with keys at their limit; new
// keys then share the rule's overflow counter instead of evicting them.
func TestOverflowWhenEveryKeyIsBusy(t *testing.T) {
	s := newStore(t, 4, Limit{Limit: 1, Period: time.Minute})
	for _, k := range []string{"a", "b", "c", "d"} {
		if d := s.Allow(s.KeyString(0, k), t0); !d.Allowed || d.Overflow {
			t.Fatalf("key %s: got %+v, want allowed in its own slot", k, d)
		}
	}
	d := s.Allow(s.KeyString(0, "e"), t0)
	if !d.Allowed || !d.Overflow {
		t.Fatalf("fifth key: got %+v, want allowed in the overflow counter", d)
	}
	d = s.Allow(s.KeyString(0, "f"), t0)
	if d.Allowed || !d.Overflow {
		t.Fatalf("sixth key: got %+v, want blocked: the overflow counter is at its limit", d)
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		if d := s.Allow(s.KeyString(0, k), t0); d.Allowed || d.Overflow {
			t.Fatalf("key %s again: got %+v, want blocked by its own counter", k, d)
		}
	}
	if st := s.Stats(); st.Overflowed != 2 || st.Evicted != 0 {
		t.Fatalf("Stats() = %+v, want 2 overflowed, 0 evicted", st)
	}
}

// TestConcurrentAllowNeverExceedsLimit runs many goroutines against few keys.
func TestConcurrentAllowNeverExceedsLimit(t *testing.T) {
	s := newStore(t, 100, Limit{Limit: 100, Period: time.Hour})
	keys := []Key{s.KeyString(0, "a"), s.KeyString(0, "b")}
	var mu sync.Mutex
	allowed := map[Key]int{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			n := map[Key]int{}
			for i := range 1000 {
				k := keys[(g+i)%2]
				if s.Allow(k, t0).Allowed {
					n[k]++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for k, v := range n {
				allowed[k] += v
			}
		})
	}
	wg.Wait()
	for _, k := range keys {
		if allowed[k] != 100 {
			t.Errorf("key %v: %d allowed, want exactly 100", k, allowed[k])
		}
	}
}
