package window

import (
	"encoding/binary"
	"fmt"
	"github.com/edgerate/edge/internal/algorithm"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

func TestShardLayout(t *testing.T) {
	// The blocked-key cache fills two cache lines of its own; the mutex and
	// everything a decision reads under it a third.
	if got := unsafe.Sizeof(shard{}); got != 192 {
		t.Errorf("sizeof(shard) = %d, want 192", got)
	}
	if got := unsafe.Offsetof(shard{}.mu); got != 128 {
		t.Errorf("offsetof(shard.mu) = %d, want 128", got)
	}
	if got := unsafe.Sizeof(entry{}); got != 24 {
		t.Errorf("sizeof(entry) = %d, want 24", got)
	}
}

// benchKeys returns n distinct keys, as 4-byte client addresses would give.
func benchKeys(s *Store, n int) []Key {
	keys := make([]Key, n)
	var b [4]byte
	for i := range keys {
		binary.BigEndian.PutUint32(b[:], uint32(i)*2654435761)
		keys[i] = s.Key(0, b[:])
	}
	return keys
}

// The stores used by the benchmarks. "allowed" limits are never reached;
// the "hot" limit is, so a hot key is over its limit, as a key sending tens
// of millions of requests a second always is.
var (
	limitAllowed = Limit{Limit: 1 << 30, Period: time.Minute}
	limitHot     = Limit{Limit: 100, Period: time.Minute}
)

type benchCase struct {
	name  string
	keys  int
	limit Limit
}

var benchCases = []benchCase{
	{"hot-key-blocked", 1, limitHot},
	{"hot-key-allowed", 1, limitAllowed},
	{"1k-keys", 1_000, limitAllowed},
	{"10k-keys", 10_000, limitAllowed},
	{"10M-keys", 10_000_000, limitAllowed},
}

// benchStores keeps each case's filled store for the benchmarks and -cpu
// settings after the first: filling 10 million keys takes longer than
// measuring them. Benchmarks run one at a time, so no lock is needed.
var benchStores = map[string]benchStore{}

type benchStore struct {
	s    *Store
	keys []Key
}

// setup returns the case's store with every key tracked, and the keys.
func (c benchCase) setup(b *testing.B) (*Store, []Key) {
	b.Helper()
	if bs, ok := benchStores[c.name]; ok {
		return bs.s, bs.keys
	}
	s, err := New(Options{Capacity: max(c.keys, 1024), Limits: []Limit{c.limit}})
	if err != nil {
		b.Fatal(err)
	}
	keys := benchKeys(s, c.keys)
	for _, k := range keys {
		s.Allow(k, t0)
		if strings.HasPrefix(c.name, "near-limit/") {
			s.AllowN(k, t0, 59)
		}
	}
	benchStores[c.name] = benchStore{s, keys}
	return s, keys
}

// BenchmarkAllow measures one decision (look up or create, estimate, count)
// on a precomputed key, single-threaded: the sliding window's at the top
// level, and each other algorithm's under its name.
func BenchmarkAllow(b *testing.B) {
	for _, c := range benchCases {
		b.Run(c.name, func(b *testing.B) { benchAllow(b, c) })
	}
	// Keys near their limit, at both precisions side by side: each has
	// sent 60 of its 100 before the benchmark starts (so a Fine key takes
	// a log at its first decision) and is refused once it reaches 100.
	b.Run("near-limit", func(b *testing.B) {
		for _, prec := range []algorithm.Precision{algorithm.Standard, algorithm.Fine} {
			lim := limitHot
			lim.Precision = prec
			for _, c := range []benchCase{
				{"hot-key", 1, lim},
				{"1k-keys", 1_000, lim},
				{"10k-keys", 10_000, lim},
			} {
				c.name = "near-limit/" + prec.String() + "/" + c.name
				b.Run(prec.String()+"/"+c.name[len("near-limit/"+prec.String()+"/"):], func(b *testing.B) { benchAllow(b, c) })
			}
		}
	})
	for _, alg := range []algorithm.Algorithm{algorithm.FixedWindow, algorithm.TokenBucket, algorithm.LeakyBucket, algorithm.Quota} {
		b.Run(alg.String(), func(b *testing.B) {
			for _, c := range benchCases {
				if c.keys > 10_000 {
					continue // one store of 10 million keys is enough to keep
				}
				c.name = alg.String() + "/" + c.name
				c.limit.Algorithm = alg
				b.Run(c.name[len(alg.String())+1:], func(b *testing.B) { benchAllow(b, c) })
			}
		})
	}
}

func benchAllow(b *testing.B, c benchCase) {
	s, keys := c.setup(b)
	now := t0.Add(time.Second)
	// Walk the keys in a shuffled order laid out contiguously, so the
	// benchmark's own reads are sequential and only the store's accesses
	// are random.
	rand.New(rand.NewPCG(1, 1)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i == len(keys) {
			i = 0
		}
		s.Allow(keys[i], now)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkAllowParallel is BenchmarkAllow with b.RunParallel: each
// goroutine walks its own random sequence of the keys, laid out
// contiguously, so only the store's accesses are random.
func BenchmarkAllowParallel(b *testing.B) {
	for _, c := range benchCases {
		b.Run(c.name, func(b *testing.B) {
			s, keys := c.setup(b)
			now := t0.Add(time.Second)
			seqs := randomWalks(keys, runtime.GOMAXPROCS(0), 1<<22)
			b.ReportAllocs()
			b.ResetTimer()
			var mu sync.Mutex
			next := 0
			b.RunParallel(func(pb *testing.PB) {
				mu.Lock()
				seq := seqs[next%len(seqs)]
				next++
				mu.Unlock()
				for i := 0; pb.Next(); i++ {
					if i == len(seq) {
						i = 0
					}
					s.Allow(seq[i], now)
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// randomWalks returns n sequences of keys drawn at random, total keys in all.
func randomWalks(keys []Key, n, total int) [][]Key {
	seqs := make([][]Key, n)
	for g := range seqs {
		rng := rand.New(rand.NewPCG(uint64(g), 9))
		seqs[g] = make([]Key, total/n)
		for i := range seqs[g] {
			seqs[g][i] = keys[rng.IntN(len(keys))]
		}
	}
	return seqs
}

// BenchmarkScaling runs the same number of decisions on one goroutine and
// then split over GOMAXPROCS goroutines, and reports the speedup measured
// side by side in one run (the target on 2 cores is at least 1.8×).
func BenchmarkScaling(b *testing.B) {
	procs := runtime.GOMAXPROCS(0)
	for _, c := range benchCases {
		b.Run(c.name, func(b *testing.B) {
			s, keys := c.setup(b)
			now := t0.Add(time.Second)
			// Each goroutine walks its own precomputed random sequence of
			// keys, laid out contiguously, so both runs do identical work
			// per decision and only the store's accesses are random.
			const n = 1 << 22
			seqs := randomWalks(keys, procs, n)
			run := func(parts int) time.Duration {
				var wg sync.WaitGroup
				start := time.Now()
				for g := range parts {
					seq := seqs[g]
					wg.Go(func() {
						for range procs / parts {
							for _, k := range seq {
								s.Allow(k, now)
							}
						}
					})
				}
				wg.Wait()
				return time.Since(start)
			}
			var single, parallel time.Duration
			for b.Loop() {
				single += run(1)
				parallel += run(procs)
			}
			b.ReportMetric(float64(n)*float64(b.N)/single.Seconds(), "1-thread-decisions/s")
			b.ReportMetric(float64(n)*float64(b.N)/parallel.Seconds(), "decisions/s")
			b.ReportMetric(single.Seconds()/parallel.Seconds(), "speedup")
		})
	}
}

// BenchmarkMemory fills a store with 10 million keys and reports the whole
// heap after GC divided by the keys tracked: under "sliding_window", with
// what a full GC costs with the store resident against an empty store of
// the same capacity, in the same run; under "near-1%" and "near-10%", for
// a sliding window of 100 a minute at both precisions side by side, with
// that share of the keys near their limit (60 requests, which gives a
// Fine key a log) and the others sending one request.
func BenchmarkMemory(b *testing.B) {
	const n = 10_000_000
	b.Run("sliding_window", func(b *testing.B) {
		for b.Loop() {
			empty := newHeap(b)
			gcEmpty := measureGC()
			runtime.KeepAlive(empty)

			s, err := New(Options{Capacity: n, Limits: []Limit{limitAllowed}})
			if err != nil {
				b.Fatal(err)
			}
			for _, k := range benchKeys(s, n) {
				s.Allow(k, t0)
			}
			heap := heapAfterGC()
			gcFull := measureGC()
			keys := s.Len()
			runtime.KeepAlive(s)

			b.ReportMetric(float64(heap)/float64(keys), "bytes/key")
			b.ReportMetric(float64(keys), "keys")
			b.ReportMetric(float64(gcEmpty.pause.Nanoseconds()), "gc-pause-ns-empty")
			b.ReportMetric(float64(gcFull.pause.Nanoseconds()), "gc-pause-ns-10M")
			b.ReportMetric(float64(gcEmpty.cycle.Microseconds()), "gc-cycle-µs-empty")
			b.ReportMetric(float64(gcFull.cycle.Microseconds()), "gc-cycle-µs-10M")
			b.ReportMetric(float64(gcEmpty.mark.Microseconds()), "gc-mark-cpu-µs-empty")
			b.ReportMetric(float64(gcFull.mark.Microseconds()), "gc-mark-cpu-µs-10M")
		}
	})
	for _, near := range []int{1, 10} {
		b.Run(fmt.Sprintf("near-%d%%", near), func(b *testing.B) {
			for b.Loop() {
				std := memoryNear(b, n, near, algorithm.Standard)
				fine := memoryNear(b, n, near, algorithm.Fine)
				b.ReportMetric(std.bytes, "bytes/key-standard")
				b.ReportMetric(fine.bytes, "bytes/key-fine")
				b.ReportMetric(fine.bytes/std.bytes, "fine/standard")
				b.ReportMetric(float64(fine.logs), "keys-with-log")
				b.ReportMetric(float64(fine.fallback), "fallback-decisions")
			}
		})
	}
}

type nearMemory struct {
	bytes          float64 // heap after GC per key tracked
	logs, fallback int     // Stats.FineLogs and FineFallback
}

// memoryNear fills a store of n keys under 100 a minute at precision
// prec, near% of them with 60 requests and the others with one, and
// measures it.
func memoryNear(b *testing.B, n, near int, prec algorithm.Precision) nearMemory {
	heapAfterGC()
	lim := limitHot
	lim.Precision = prec
	s, err := New(Options{Capacity: n, Limits: []Limit{lim}})
	if err != nil {
		b.Fatal(err)
	}
	for i, k := range benchKeys(s, n) {
		reqs := 1
		if i%100 < near {
			reqs = 60
		}
		for range reqs {
			s.Allow(k, t0)
		}
	}
	heap := heapAfterGC()
	st := s.Stats()
	keys := s.Len()
	runtime.KeepAlive(s)
	return nearMemory{float64(heap) / float64(keys), st.FineLogs, int(st.FineFallback)}
}

// BenchmarkMemoryAlgorithms reports the heap a key costs, at 10 million
// keys, under each algorithm other than the sliding window (which
// BenchmarkMemory measures with its GC figures): every algorithm's state
// lives in the same 24-byte entry, so all should report what it does.
func BenchmarkMemoryAlgorithms(b *testing.B) {
	const n = 10_000_000
	for _, alg := range []algorithm.Algorithm{algorithm.FixedWindow, algorithm.TokenBucket, algorithm.LeakyBucket, algorithm.Quota} {
		b.Run(alg.String(), func(b *testing.B) {
			lim := limitAllowed
			lim.Algorithm = alg
			if alg == algorithm.Quota {
				lim.Reset, lim.Location = algorithm.Monthly, time.UTC
			}
			for b.Loop() {
				s, err := New(Options{Capacity: n, Limits: []Limit{lim}})
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range benchKeys(s, n) {
					s.Allow(k, t0)
				}
				heap := heapAfterGC()
				keys := s.Len()
				runtime.KeepAlive(s)
				b.ReportMetric(float64(heap)/float64(keys), "bytes/key")
				b.ReportMetric(float64(keys), "keys")
			}
		})
	}
}

// newHeap returns a small live object so the "empty" GC has the same test
// scaffolding on the heap as the full one.
func newHeap(b *testing.B) []byte { return make([]byte, 1<<10) }

func heapAfterGC() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

type gcCost struct{ pause, cycle, mark time.Duration }

// measureGC runs five forced collections and returns the median total
// stop-the-world pause, wall time of one cycle (mark and sweep) and CPU time
// spent marking (runtime/metrics' assist, dedicated and idle mark classes).
func measureGC() gcCost {
	var pauses, cycles, marks []time.Duration
	for range 5 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		markBefore := markCPU()
		start := time.Now()
		runtime.GC()
		cycles = append(cycles, time.Since(start))
		marks = append(marks, markCPU()-markBefore)
		runtime.ReadMemStats(&after)
		pauses = append(pauses, time.Duration(after.PauseTotalNs-before.PauseTotalNs))
	}
	return gcCost{median(pauses), median(cycles), median(marks)}
}

// markCPU is the CPU time the garbage collector has spent marking since the
// program started.
func markCPU() time.Duration {
	samples := []metrics.Sample{
		{Name: "/cpu/classes/gc/mark/assist:cpu-seconds"},
		{Name: "/cpu/classes/gc/mark/dedicated:cpu-seconds"},
		{Name: "/cpu/classes/gc/mark/idle:cpu-seconds"},
	}
	metrics.Read(samples)
	var sec float64
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindFloat64 {
			sec += s.Value.Float64()
		}
	}
	return time.Duration(sec * float64(time.Second))
}

func median(d []time.Duration) time.Duration {
	for i := range d {
		for j := i + 1; j < len(d); j++ {
			if d[j] < d[i] {
				d[i], d[j] = d[j], d[i]
			}
		}
	}
	return d[len(d)/2]
}

func ExampleStore() {
	s, err := New(Options{Capacity: 1000, Limits: []Limit{{Limit: 2, Period: time.Minute}}})
	if err != nil {
		panic(err)
	}
	k := s.KeyString(0, "198.51.100.7")
	now := time.Date(2026, 11, 30, 12, 0, 15, 0, time.UTC)
	for range 3 {
		d := s.Allow(k, now)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter.Truncate(time.Millisecond))
	}
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 45s
}

// BenchmarkLockFloor is what any store that counts exactly pays per
// decision before doing anything else: one uncontended lock and unlock of a
// sync.Mutex; and, for one hot key, an atomic add to one shared word from
// every core. These are the floors docs/window.md compares the store's
// figures with.
func BenchmarkLockFloor(b *testing.B) {
	b.Run("mutex", func(b *testing.B) {
		var mu sync.Mutex
		n := 0
		for b.Loop() {
			mu.Lock()
			n++
			mu.Unlock()
		}
		runtime.KeepAlive(n)
	})
	// One word added to, from one core and then from every core: the most
	// decisions a second on one key that any store counting in shared
	// memory could make, and how that scales.
	b.Run("shared-add", func(b *testing.B) {
		var n atomic.Uint64
		for b.Loop() {
			n.Add(1)
		}
	})
	b.Run("shared-add-parallel", func(b *testing.B) {
		var n atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n.Add(1)
			}
		})
	})
}
