// Package window compares edge's counter store with what other Go rate
// limiters keep per key, side by side in one benchmark run:
//
//   - edge: window.Store, the two-counter sliding window in pointer-free
//     sharded tables;
//   - httprate: go-chi/httprate's local counter (the same two-counter
//     algorithm), driven the way httprate's RateLimiter drives it: one mutex
//     around read-estimate-increment for every key;
//   - xrate: a mutex-guarded map of golang.org/x/time/rate limiters, what
//     most Go middlewares do.
//
// It lives in its own module so that edge does not depend on httprate.
// Run it with bench/compare.sh, which also prints the ratios.
package window

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/window"
	"github.com/go-chi/httprate"
	"golang.org/x/time/rate"
)

const (
	limit  = 1 << 30 // never reached: every decision is a counted, allowed one
	period = time.Minute
)

var t0 = time.Unix(1_800_000_000/60*60, 0)

// store is one contestant: a decision on a precomputed key.
type store interface {
	allow(i int, now time.Time) bool
}

// edgeStore uses keys hashed in advance: the proxy hashes once per request
// and rule, outside the store.
type edgeStore struct {
	s    *window.Store
	keys []window.Key
}

func (e *edgeStore) allow(i int, now time.Time) bool { return e.s.Allow(e.keys[i], now).Allowed }

// edgeHashStore also hashes the key string on every decision, as the other
// two must.
type edgeHashStore struct {
	s    *window.Store
	keys []string
}

func (e *edgeHashStore) allow(i int, now time.Time) bool {
	return e.s.Allow(e.s.KeyString(0, e.keys[i]), now).Allowed
}

// httprateStore mirrors httprate.RateLimiter.OnLimit without HTTP: one mutex
// for all keys, Get both windows, estimate, IncrementBy.
type httprateStore struct {
	mu   sync.Mutex
	c    httprate.LimitCounter
	keys []string
}

func (h *httprateStore) allow(i int, now time.Time) bool {
	cw := now.Truncate(period)
	pw := cw.Add(-period)
	h.mu.Lock()
	defer h.mu.Unlock()
	curr, prev, _ := h.c.Get(h.keys[i], cw, pw)
	diff := now.Sub(cw)
	r := float64(prev)*(float64(period)-float64(diff))/float64(period) + float64(curr)
	if int(math.Round(r))+1 > limit {
		return false
	}
	h.c.IncrementBy(h.keys[i], cw, 1)
	return true
}

// xrateStore is a mutex-guarded map of token buckets.
type xrateStore struct {
	mu   sync.Mutex
	m    map[string]*rate.Limiter
	keys []string
}

func (x *xrateStore) allow(i int, now time.Time) bool {
	x.mu.Lock()
	l, ok := x.m[x.keys[i]]
	if !ok {
		l = rate.NewLimiter(rate.Every(period/limit), limit)
		x.m[x.keys[i]] = l
	}
	x.mu.Unlock()
	return l.AllowN(now, 1)
}

func keyStrings(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		// Client addresses as the proxies would key them.
		v := uint32(i) * 2654435761
		keys[i] = strconv.Itoa(int(v>>24)) + "." + strconv.Itoa(int(v>>16&255)) + "." +
			strconv.Itoa(int(v>>8&255)) + "." + strconv.Itoa(int(v&255))
	}
	return keys
}

func newStore(b *testing.B, name string, keys []string) store {
	switch name {
	case "edge", "edge-hash":
		s, err := window.New(window.Options{Capacity: len(keys), Limits: []window.Limit{{Limit: limit, Period: period}}})
		if err != nil {
			b.Fatal(err)
		}
		if name == "edge-hash" {
			return &edgeHashStore{s: s, keys: keys}
		}
		ks := make([]window.Key, len(keys))
		for i, k := range keys {
			ks[i] = s.KeyString(0, k)
		}
		return &edgeStore{s: s, keys: ks}
	case "httprate":
		c := httprate.NewLocalLimitCounter(period)
		c.Config(limit, period)
		return &httprateStore{c: c, keys: keys}
	case "xrate":
		return &xrateStore{m: make(map[string]*rate.Limiter, 0), keys: keys}
	}
	b.Fatalf("unknown store %q", name)
	return nil
}

var contestants = []string{"edge", "edge-hash", "httprate", "xrate"}

// BenchmarkCompareThroughput: decisions per second for each store on 10
// thousand keys (the tables fit in cache: the stores' own work shows) and on
// 1 million (memory latency dominates), spread uniformly, single-threaded
// and with RunParallel.
func BenchmarkCompareThroughput(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		keys := keyStrings(n)
		order := rand.New(rand.NewPCG(3, 3)).Perm(n)
		for _, name := range contestants {
			for _, mode := range []string{"1thread", "parallel"} {
				compareThroughput(b, fmt.Sprintf("%s/%s/%dk", name, mode, n/1000), name, mode, keys, order)
			}
		}
	}
}

func compareThroughput(b *testing.B, label, name, mode string, keys []string, order []int) {
	n := len(keys)
	b.Run(label, func(b *testing.B) {
		s := newStore(b, name, keys)
		now := t0.Add(time.Second)
		for i := range n {
			s.allow(i, now)
		}
		b.ReportAllocs()
		b.ResetTimer()
		if mode == "1thread" {
			for i := 0; b.Loop(); i++ {
				s.allow(order[i%n], now)
			}
		} else {
			var seq sync.Mutex
			seed := uint64(0)
			b.RunParallel(func(pb *testing.PB) {
				seq.Lock()
				seed++
				off := int(seed) * 7919
				seq.Unlock()
				for i := off; pb.Next(); i++ {
					s.allow(order[i%n], now)
				}
			})
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	})
}

// BenchmarkCompareMemory: heap bytes per tracked key (growth of the heap
// after GC, divided by keys) for each store holding 1 million keys.
func BenchmarkCompareMemory(b *testing.B) {
	const n = 1_000_000
	for _, name := range []string{"edge", "httprate", "xrate"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				// Key strings are built before the baseline: every store is
				// given them; only xrate keeps them (as map keys).
				keys := keyStrings(n)
				before := heap()
				s := newStore(b, name, keys)
				now := t0.Add(time.Second)
				for i := range n {
					s.allow(i, now)
				}
				if e, ok := s.(*edgeStore); ok {
					e.keys = nil // the hashed keys are the benchmark's, not the store's
				}
				after := heap()
				runtime.KeepAlive(s)
				runtime.KeepAlive(keys)
				b.ReportMetric(float64(after-before)/n, "bytes/key")
			}
		})
	}
}

func heap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
