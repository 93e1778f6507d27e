package window

import (
	"fmt"
	"runtime"
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

// TestChurnNeverLosesACount hammers busy keys from several goroutines while
// others flood the same small shards with new keys, so that inserts and
// evictions move entries around the busy keys' slots all the time, and
// admin and cluster calls lock entries under the shard mutex meanwhile.
// Every request of a busy key must be counted exactly once: exactly the
// rest of its limit is allowed, and its counter ends at the limit.
func TestChurnNeverLosesACount(t *testing.T) {
	const limit = 1000
	s, err := New(Options{Capacity: 256, Limits: []Limit{{Limit: limit, Period: time.Hour}}, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	busy := make([]Key, 8)
	for i := range busy {
		busy[i] = s.KeyString(0, fmt.Sprintf("busy-%d", i))
		// Over half the limit: never evicted for a new key.
		for range 600 {
			s.Allow(busy[i], t0)
		}
	}
	stop := make(chan struct{})
	var churn sync.WaitGroup
	for g := range 2 {
		churn.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := s.KeyString(0, fmt.Sprintf("new-%d-%d", g, i))
				s.Allow(k, t0)
				switch i % 4 {
				case 1:
					s.Reset(k)
				case 2:
					s.Peek(busy[i%len(busy)], t0)
				case 3:
					s.Merge(busy[i%len(busy)], t0, 0, 1) // lower than counted: no change
				}
			}
		})
	}
	// Let the flood fill the table and start evicting before the busy keys
	// are sent to.
	for s.Stats().Evicted < 200 {
		runtime.Gosched()
	}
	before := s.Stats()
	const senders, perSender = 4, 200 * 8 // at least 200 more requests a key from each
	var wg sync.WaitGroup
	allowed := make([][]int, senders)
	for g := range senders {
		allowed[g] = make([]int, len(busy))
		wg.Go(func() {
			// Go on past the quota (every extra request is blocked) until
			// the flood has evicted plenty meanwhile.
			for i := 0; i < perSender || s.Stats().Evicted-before.Evicted < 500; i++ {
				if s.Allow(busy[i%len(busy)], t0).Allowed {
					allowed[g][i%len(busy)]++
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	churn.Wait()

	for i, k := range busy {
		n := 0
		for g := range senders {
			n += allowed[g][i]
		}
		if n != limit-600 {
			t.Errorf("busy key %d: %d requests allowed, want exactly %d", i, n, limit-600)
		}
		if st := s.Peek(k, t0); st.Current != limit {
			t.Errorf("busy key %d: current count %d, want %d", i, st.Current, limit)
		}
	}
	checkTable(t, s, "after churn")
}
