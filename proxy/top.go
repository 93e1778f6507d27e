package proxy

import (
	"container/heap"
	"sort"
	"sync"
)

// topSize is how many keys each rule's top-talker list tracks.
const topSize = 64

// topTalkers tracks the heaviest keys of one rule with Space-Saving
// (Metwally, Agrawal and El Abbadi, "Efficient computation of frequent and
// top-k elements in data streams", 2005): a fixed number of counters; a key
// not yet tracked takes over the smallest counter, inheriting its count as
// its possible overestimate. Any key that sent more than 1/topSize of the
// observed requests is guaranteed to be present, and memory stays bounded
// whatever the number of distinct keys.
//
// Only requests that matter are observed: blocked ones, and allowed ones
// from keys that have used at least half their limit. A client far below
// its limit is nobody's top talker, and skipping it keeps the common path
// free of this lock. Observation never waits: when another request holds
// the lock the observation is dropped, so counts are a lower bound under
// heavy concurrency.
//
// K is what a key is tracked by: a rule's window.Key, or a client for the
// refused connections (connections.go).
type topTalkers[K comparable] struct {
	mu    sync.Mutex
	index map[K]int // key → position in heap
	heap  talkerHeap[K]
}

// talker is one tracked key.
type talker[K comparable] struct {
	key     K
	text    string // the key as the admin API shows it
	count   uint64 // observed requests, possibly overestimated by err
	blocked uint64 // observed blocked requests since the key was tracked
	err     uint64 // count inherited from the key it replaced
}

func newTopTalkers[K comparable]() *topTalkers[K] {
	index := make(map[K]int, topSize)
	return &topTalkers[K]{index: index, heap: talkerHeap[K]{index: index}}
}

// observe counts one request of k; text is called only when k is new.
func (t *topTalkers[K]) observe(k K, blocked bool, text func() string) {
	if !t.mu.TryLock() {
		return
	}
	defer t.mu.Unlock()
	var b uint64
	if blocked {
		b = 1
	}
	if i, ok := t.index[k]; ok {
		t.heap.items[i].count++
		t.heap.items[i].blocked += b
		heap.Fix(&t.heap, i)
		return
	}
	if len(t.heap.items) < topSize {
		heap.Push(&t.heap, talker[K]{key: k, text: text(), count: 1, blocked: b})
		return
	}
	// Replace the smallest counter.
	min := &t.heap.items[0]
	delete(t.index, min.key)
	*min = talker[K]{key: k, text: text(), count: min.count + 1, blocked: b, err: min.count}
	t.index[k] = 0
	heap.Fix(&t.heap, 0)
}

// top returns up to n tracked keys, heaviest first.
func (t *topTalkers[K]) top(n int) []talker[K] {
	t.mu.Lock()
	out := append([]talker[K](nil), t.heap.items...)
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].count != out[j].count {
			return out[i].count > out[j].count
		}
		return out[i].text < out[j].text
	})
	return out[:min(n, len(out))]
}

// forget stops tracking k (after an admin reset).
func (t *topTalkers[K]) forget(k K) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i, ok := t.index[k]; ok {
		heap.Remove(&t.heap, i)
		delete(t.index, k)
	}
}

// talkerHeap is a min-heap by count that keeps index up to date.
type talkerHeap[K comparable] struct {
	items []talker[K]
	index map[K]int
}

func (h *talkerHeap[K]) Len() int           { return len(h.items) }
func (h *talkerHeap[K]) Less(i, j int) bool { return h.items[i].count < h.items[j].count }
func (h *talkerHeap[K]) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.index[h.items[i].key] = i
	h.index[h.items[j].key] = j
}
func (h *talkerHeap[K]) Push(x any) {
	t := x.(talker[K])
	h.index[t.key] = len(h.items)
	h.items = append(h.items, t)
}
func (h *talkerHeap[K]) Pop() any {
	t := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	delete(h.index, t.key)
	return t
}
