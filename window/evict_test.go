package window

import (
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestFloodCannotEvictABusyClient floods a small store with new source
// addresses while one client sends at twice its limit: the client must stay
// held to its limit and the store within its capacity.
func TestFloodCannotEvictABusyClient(t *testing.T) {
	const (
		capacity = 2000
		limit    = 50
		period   = 10 * time.Second
	)
	s := newStore(t, capacity, Limit{Limit: limit, Period: period})
	heavy := s.KeyString(0, "203.0.113.9")
	rng := rand.New(rand.NewPCG(7, 7))
	var buf [4]byte
	const periods = 20
	perPeriodAllowed := make([]int, periods)
	// Per period: 2×limit requests from the heavy client, spread evenly,
	// interleaved with 100 flood requests each from a fresh address.
	for p := range periods {
		for i := range 2 * limit {
			now := t0.Add(time.Duration(p)*period + time.Duration(i)*period/(2*limit))
			if s.Allow(heavy, now).Allowed {
				perPeriodAllowed[p]++
			}
			for range 100 {
				binary.LittleEndian.PutUint32(buf[:], rng.Uint32())
				s.Allow(s.Key(0, buf[:]), now)
			}
		}
		if n := s.Len(); n > capacity {
			t.Fatalf("period %d: Len() = %d, want ≤ %d", p, n, capacity)
		}
	}
	for p, n := range perPeriodAllowed {
		if n > limit*11/10 {
			t.Errorf("period %d: heavy client got %d requests through, want ≤ %d", p, n, limit*11/10)
		}
	}
	if st := s.Stats(); st.Evicted == 0 {
		t.Errorf("Stats() = %+v: the flood should have evicted idle keys", st)
	}
}

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
