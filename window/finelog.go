package window

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// This file holds the logs of fine precision (fine.go): the pool a rule's
// logs come from, a key's log of ticks and what it counts.

// fineHead is a log's header; its ticks are in finePool.ticks.
type fineHead struct {
	last uint32 // low 32 bits of the tick the key was last judged at
	head uint16 // where the next tick is written
	n    uint16 // ticks held, the oldest at head − n
	// units per sub-period: the one with index j (tick ÷ eighthTicks) in
	// slot j mod (fineEighths+1), as the window spans fineEighths of them
	// whole and one in part.
	eighths [fineEighths + 1]uint32
}

// finePool holds a Fine rule's logs, each used by one key at a time. A
// log is read and written under the lock of the shard holding its key;
// mu guards only the free list.
type finePool struct {
	size  int // ticks per log: the rule's limit
	heads []fineHead
	ticks []uint16 // log i's are ticks[i*size : (i+1)*size]
	mu    sync.Mutex
	free  []uint32     // indices of free logs
	spare atomic.Int64 // len(free), read without mu
}

// newFinePool returns a pool of logs of size ticks that fits in about
// bytes, with room for at least one.
func newFinePool(size, bytes int) *finePool {
	n := max(bytes/(2*size+fineMeta+4), 1)
	fp := &finePool{
		size:  size,
		heads: make([]fineHead, n),
		ticks: make([]uint16, n*size),
		free:  make([]uint32, n),
	}
	for i := range fp.free {
		fp.free[i] = uint32(n - 1 - i)
	}
	fp.spare.Store(int64(n))
	return fp
}

// get takes a free log, cleared, and reports whether there was one.
func (fp *finePool) get() (uint32, bool) {
	if fp.spare.Load() == 0 {
		return 0, false // a full pool is the common case under pressure: no lock
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if len(fp.free) == 0 {
		return 0, false
	}
	i := fp.free[len(fp.free)-1]
	fp.free = fp.free[:len(fp.free)-1]
	fp.spare.Add(-1)
	fp.heads[i] = fineHead{}
	return i, true
}

// put gives log i back.
func (fp *finePool) put(i uint32) {
	fp.mu.Lock()
	fp.free = append(fp.free, i) // within its capacity: i was taken from it
	fp.spare.Add(1)
	fp.mu.Unlock()
}

// pressed reports whether fewer than ⌊n/8⌋ of the pool's n logs are free:
// a pool of fewer than eight is never pressed.
func (fp *finePool) pressed() bool { return fp.spare.Load() < int64(len(fp.heads)/8) }

// inUse is the number of logs taken.
func (fp *finePool) inUse() int {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	return len(fp.heads) - len(fp.free)
}

// fineLog is one key's log.
type fineLog struct {
	h     *fineHead
	ticks []uint16
}

func (fp *finePool) log(i uint32) fineLog {
	return fineLog{h: &fp.heads[i], ticks: fp.ticks[int(i)*fp.size : (int(i)+1)*fp.size]}
}

// clampFine keeps the counts of ent, two counters of a Fine rule, below
// fineMark, which marks a key with a log.
func (p *params) clampFine(ent *counters) {
	if p.fine != nil {
		ent.prev, ent.curr = min(ent.prev, fineMark-1), min(ent.curr, fineMark-1)
	}
}

// hasLog reports whether ent is a Fine key's with a log.
func (p *params) hasLog(ent *counters) bool { return p.fine != nil && ent.prev == fineMark }

// tick returns the tick holding elapsed time e of period w.
func (p *params) tick(w, e int64) int64 {
	hi, lo := bits.Mul64(uint64(e), fineTicks)
	q, _ := bits.Div64(hi, lo, uint64(p.period))
	return w*fineTicks + int64(q)
}

// tickStart returns the time (ns since the epoch) at which tick k begins:
// the least e with ⌊e×fineTicks/P⌋ ≥ k mod fineTicks, in period k ÷
// fineTicks.
func (p *params) tickStart(k int64) int64 {
	w, s := k/fineTicks, k%fineTicks
	if s < 0 {
		w, s = w-1, s+fineTicks
	}
	hi, lo := bits.Mul64(uint64(s), uint64(p.period))
	q, r := bits.Div64(hi, lo, fineTicks)
	return w*p.period + ceilQuotient(q, r)
}

// age returns the age in ticks at tick now of the k-th newest tick of l
// (1 ≤ k ≤ l.h.n).
func (l fineLog) age(now int64, k int) int64 {
	i := (int(l.h.head) - k + len(l.ticks)) % len(l.ticks)
	return int64(uint16(uint16(now) - l.ticks[i]))
}

// prune drops the ticks that have left the window at tick now.
func (l fineLog) prune(now int64) {
	for l.h.n > 0 && l.age(now, int(l.h.n)) >= fineTicks {
		l.h.n--
	}
}

// push records c units at tick now; the log keeps the newest len(ticks).
func (l fineLog) push(now int64, c uint64) {
	if c == 0 {
		return
	}
	size := uint64(len(l.ticks))
	for range min(c, size) {
		l.ticks[l.h.head] = uint16(now)
		if l.h.head++; int(l.h.head) == len(l.ticks) {
			l.h.head = 0
		}
	}
	l.h.n = uint16(min(uint64(l.h.n)+c, size))
	s := &l.h.eighths[slot(floorDiv(now, eighthTicks))]
	*s = min(satAdd(*s, c), fineMark-1)
}

// clear forgets every tick, at tick now.
func (l fineLog) clear(now int64) {
	l.h.n = 0
	l.h.eighths = [fineEighths + 1]uint32{}
	l.h.last = uint32(now)
}

// moveTo makes now the log's latest tick: it clears sub-periods the
// window has moved past since the last one and drops ticks that left it.
// now is at least the last tick (see fineAt).
func (l fineLog) moveTo(now int64) {
	last := now - int64(uint32(now)-l.h.last)
	from, to := floorDiv(last, eighthTicks)+1, floorDiv(now, eighthTicks)
	for j := from; j <= min(to, from+fineEighths); j++ {
		l.h.eighths[slot(j)] = 0
	}
	l.h.last = uint32(now)
	l.prune(now)
}

// estimate is the log's count of units in the window at tick now (after
// moveTo): exact while it holds fewer ticks than its size (every unit of
// the window, since it loses its oldest first), else the larger of its
// size and the sub-periods' count, the last whole sub-periods and the
// part of the one the window starts in, its units taken as spread evenly.
func (l fineLog) estimate(now int64) float64 {
	if int(l.h.n) < len(l.ticks) {
		return float64(l.h.n)
	}
	j := floorDiv(now, eighthTicks)
	r := now - j*eighthTicks
	var whole uint64
	for i := j - fineEighths + 1; i <= j; i++ {
		whole += uint64(l.h.eighths[slot(i)])
	}
	part := float64(l.h.eighths[slot(j-fineEighths)]) * float64(eighthTicks-1-r) / eighthTicks
	return max(float64(whole)+part, float64(len(l.ticks)))
}
