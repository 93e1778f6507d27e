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
	"unsafe"

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
//
// Every key has counts in the previous period and the current one, as in
// BenchmarkCompareMemory. The keys are visited in a random order that is laid out in memory in the
// order of the visit (the slice and the strings' bytes alike), so that the
// benchmark's own reads are sequential and only the stores' accesses are
// random: in a proxy the key of a request is in cache, built from the
// request, when the store is asked.
func BenchmarkCompareThroughput(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		keys := inVisitOrder(keyStrings(n), rand.New(rand.NewPCG(3, 3)).Perm(n))
		for _, name := range contestants {
			for _, mode := range []string{"1thread", "parallel"} {
				compareThroughput(b, fmt.Sprintf("%s/%s/%dk", name, mode, n/1000), name, mode, keys)
			}
		}
	}
}

// inVisitOrder returns keys[order[0]], keys[order[1]], … with each string's
// bytes copied afresh, so consecutive strings sit next to each other.
func inVisitOrder(keys []string, order []int) []string {
	buf := make([]byte, 0, 16*len(keys))
	out := make([]string, len(keys))
	for j, i := range order {
		start := len(buf)
		buf = append(buf, keys[i]...)
		out[j] = unsafe.String(unsafe.SliceData(buf[start:]), len(keys[i]))
	}
	return out
}

func compareThroughput(b *testing.B, label, name, mode string, keys []string) {
	n := len(keys)
	b.Run(label, func(b *testing.B) {
		s := newStore(b, name, keys)
		// The steady state of clients that keep sending: each key has
		// counts in the previous period and the current one.
		now := t0.Add(time.Second)
		for i := range n {
			s.allow(i, t0.Add(-period/2))
		}
		for i := range n {
			s.allow(i, now)
		}
		b.ReportAllocs()
		b.ResetTimer()
		if mode == "1thread" {
			for i := 0; b.Loop(); i++ {
				if i == n {
					i = 0
				}
				s.allow(i, now)
			}
		} else {
			var seq sync.Mutex
			seed := 0
			b.RunParallel(func(pb *testing.PB) {
				seq.Lock()
				seed++
				i := seed * 7919 % n // goroutines start apart
				seq.Unlock()
				for ; pb.Next(); i++ {
					if i == n {
						i = 0
					}
					s.allow(i, now)
				}
			})
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	})
}

// BenchmarkCompareMemory: heap bytes per tracked key (growth of the heap
// after GC, divided by keys) for each store holding 1 million keys.
//
// "bytes/key" is the steady state of a limiter whose clients keep sending:
// every key made requests in the previous period and in the current one.
// That is what a store holds from its second period on: httprate keeps a map
// per period (and clears the older one for reuse at each period change, so
// both stay allocated), edge keeps both counts in one entry, and x/time/rate
// one limiter. "bytes/key-1-period" is the heap after the first period
// alone, when httprate's second map is still empty.
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
				// edge's keys, hashed in advance, are the benchmark's, not
				// the store's: leave them out.
				var hashed int64
				if e, ok := s.(*edgeStore); ok {
					hashed = int64(len(e.keys)) * int64(unsafe.Sizeof(e.keys[0]))
				}
				for i := range n {
					s.allow(i, t0.Add(-period/2)) // the previous period
				}
				first := heap() - hashed
				for i := range n {
					s.allow(i, t0.Add(time.Second)) // the current one
				}
				after := heap() - hashed
				runtime.KeepAlive(s)
				runtime.KeepAlive(keys)
				b.ReportMetric(float64(after-before)/n, "bytes/key")
				b.ReportMetric(float64(first-before)/n, "bytes/key-1-period")
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
