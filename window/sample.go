package window

import (
	"errors"
	"fmt"
	"github.com/edgerate/edge/internal/algorithm"
	"math"
	"sync"
	"time"
)

// This file holds the accuracy sample: a fixed 1-in-N sample of keys whose
// requests are also kept in an exact log, so that the sliding window's
// decisions can be checked against the exact count while it serves. The
// Store is not involved: the sample reads the Decisions the Store made.

// Sampled reports whether the client key b (as the proxy builds it) is in
// a 1-in-every sample. The hash is fixed, not seeded (FNV-1a over 64 bits,
// then a finaliser that spreads its low bits), so that the same key is
// sampled by every process, every node and edge replay alike. every ≤ 0
// samples nothing, every = 1 every key. It does not allocate.
func Sampled(b []byte, every int) bool {
	if every <= 0 {
		return false
	}
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	// FNV's low bits depend mostly on the last bytes; mix them (the
	// splitmix64 finaliser) before taking the remainder.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h%uint64(every) == 0
}

// LogUnits is the largest limit whose log keeps every unit: a rule with a
// larger limit keeps a coarse log of logBuckets counts per period instead.
// A log keeps up to 2×LogUnits+2 units: a window that does not count
// blocked requests counts at most 2×limit units in any period (the
// overshoot docs/accuracy.md measures), so a refund never leaves the log
// short of a unit it dropped to make room.
const LogUnits = 128

// logBuckets is how many sub-periods a coarse log cuts a period into; it
// holds two more, so that the sub-period the window's start falls in and
// the one now are both held.
const logBuckets = 256

// A Verdict is what a Log found for one request.
type Verdict uint8

const (
	// NotJudged: the request was not compared, because it was decided by a
	// mitigation or in the overflow counter, the log is still warming up,
	// or a coarse log cannot tell which side of the limit the exact count
	// is on.
	NotJudged Verdict = iota
	// Agreed: the window decided as the exact count would.
	Agreed
	// WronglyAllowed: the window allowed a request the exact count refuses.
	WronglyAllowed
	// WronglyLimited: the window refused a request the exact count allows.
	WronglyLimited
)

// String names v as the constant does.
func (v Verdict) String() string {
	switch v {
	case Agreed:
		return "Agreed"
	case WronglyAllowed:
		return "WronglyAllowed"
	case WronglyLimited:
		return "WronglyLimited"
	}
	return "NotJudged"
}

// A Log is the record of the units one key's window counted in its last
// period, against which the window's decisions are judged. For a limit of
// at most LogUnits it keeps the time of every unit (the newest 258 of
// them: more cannot change a decision) and the count is exact; for a
// larger limit it keeps counts per sub-period of Period/256 (rounded up to
// a whole nanosecond) and knows the count only to within the sub-period
// the window's start falls in: a request whose verdict depends on that
// sub-period is not judged. Either way a Log holds 258 8-byte words.
//
// The zero Log is not usable; call Reset. A Log is not safe for concurrent
// use.
type Log struct {
	limit     uint64
	period    int64 // ns
	width     int64 // coarse: sub-period length, ns; 0: every unit kept
	judgeFrom int64 // ns: requests before it are not judged

	// Every unit: a ring of times (ns), oldest at head. Coarse: counts
	// per sub-period j at slots[j % len(slots)], top the newest j.
	slots   [logBuckets + 2]int64
	head, n int
	top     int64
}

// Reset makes l an empty log for a window of l's limit and period (as New
// clamps them; a rule counted by any algorithm but the sliding window
// judges nothing) that judges requests from judgeFrom on.
func (l *Log) Reset(lim Limit, judgeFrom time.Time) {
	var p params
	p.init(lim)
	*l = Log{limit: p.limit, period: int64(p.period), judgeFrom: judgeFrom.UnixNano()}
	if lim.Algorithm != algorithm.SlidingWindow || lim.Soft {
		l.limit = 0 // judges nothing
	}
	if l.limit > LogUnits {
		l.width = (l.period + logBuckets - 1) / logBuckets
	}
}

// Judge compares d, the window's decision on a request at now costing cost
// units, with the exact count of the units the log holds from the last
// period, then records what the window counted for it. The exact limiter
// allows a request iff N + max(cost, 1) − 1 < limit, as the window does
// with its estimate in place of N.
func (l *Log) Judge(now time.Time, cost int64, d Decision) Verdict {
	t := now.UnixNano()
	v := NotJudged
	if l.limit > 0 && !d.Mitigated && !d.Overflow && cost >= 0 && cost <= MaxCost && t >= l.judgeFrom {
		lo, hi := l.count(t)
		need := uint64(max(cost, 1) - 1)
		if allowLo, allowHi := lo+need < l.limit, hi+need < l.limit; allowLo == allowHi {
			switch {
			case d.Allowed == allowLo:
				v = Agreed
			case d.Allowed:
				v = WronglyAllowed
			default:
				v = WronglyLimited
			}
		}
	}
	if d.counted && cost > 0 && !d.Overflow {
		l.add(t, uint64(cost))
	}
	return v
}

// count returns bounds on the units held in (t − period, t]: exact (lo =
// hi) when every unit is kept.
func (l *Log) count(t int64) (lo, hi uint64) {
	cutoff := t - l.period
	if l.width == 0 {
		for l.n > 0 && l.slots[l.head] <= cutoff {
			l.head = (l.head + 1) % len(l.slots)
			l.n--
		}
		return uint64(l.n), uint64(l.n)
	}
	l.advance(t / l.width)
	edge := floorDiv(cutoff, l.width) // its units may be either side of cutoff
	for j := max(edge+1, l.top-int64(len(l.slots))+1); j <= l.top; j++ {
		lo += uint64(l.slots[l.slot(j)])
	}
	hi = lo
	if edge > l.top-int64(len(l.slots)) && edge <= l.top {
		hi += uint64(l.slots[l.slot(edge)])
	}
	return lo, hi
}

func (l *Log) slot(j int64) int {
	s := j % int64(len(l.slots))
	if s < 0 {
		s += int64(len(l.slots))
	}
	return int(s)
}

// advance moves a coarse log's newest sub-period to j, emptying those it
// passes.
func (l *Log) advance(j int64) {
	if j <= l.top {
		return
	}
	if j-l.top >= int64(len(l.slots)) {
		clear(l.slots[:])
	} else {
		for k := l.top + 1; k <= j; k++ {
			l.slots[l.slot(k)] = 0
		}
	}
	l.top = j
}

// add records units at t.
func (l *Log) add(t int64, units uint64) {
	if l.limit == 0 {
		return
	}
	if l.width == 0 {
		size := len(l.slots)
		for range min(units, uint64(size)) {
			if l.n == size {
				l.head = (l.head + 1) % len(l.slots) // the oldest makes room
				l.n--
			}
			l.slots[(l.head+l.n)%len(l.slots)] = t
			l.n++
		}
		return
	}
	j := floorDiv(t, l.width)
	l.advance(j)
	if j > l.top-int64(len(l.slots)) {
		s := &l.slots[l.slot(j)]
		*s = int64(min(uint64(*s)+units, math.MaxInt64/2))
	}
}

// Refund takes back units recorded at now, for a request the window
// counted and then refunded (blocked by another rule).
func (l *Log) Refund(now time.Time, units int64) {
	t := now.UnixNano()
	if l.limit == 0 || units <= 0 {
		return
	}
	if l.width > 0 {
		j := floorDiv(t, l.width)
		if j <= l.top && j > l.top-int64(len(l.slots)) {
			s := &l.slots[l.slot(j)]
			*s -= min(*s, units)
		}
		return
	}
	// Drop the newest units at t, keeping the order of the rest.
	var keep [len(Log{}.slots)]int64
	n := 0
	for i := l.n - 1; i >= 0; i-- {
		if at := l.slots[(l.head+i)%len(l.slots)]; at == t && units > 0 {
			units--
		} else {
			keep[n] = at
			n++
		}
	}
	for i := range n { // keep is newest first
		l.slots[i] = keep[n-1-i]
	}
	l.head, l.n = 0, n
}

// SampleOptions configure a Sample.
type SampleOptions struct {
	// Every samples one key in Every (Sampled); at least 1.
	Every int
	// Keys is the most keys logged at once; at least 1. A Log takes about
	// 2 KiB, allocated as sampled keys arrive.
	Keys int
	// Limits are the Store's, one per rule. Only sliding-window rules that
	// are not soft are judged.
	Limits []Limit
	// Cold makes logs made within the longest period after Start judge
	// nothing until they have seen one period: set it when the Store
	// carried counters from an earlier one, whose history no log holds.
	Cold bool
	// Start is when the sample begins (for Cold).
	Start time.Time
}

// A Sample holds the Logs of the sampled keys of one Store. It is safe for
// concurrent use: one mutex guards it, taken only for sampled keys.
type Sample struct {
	every     int
	limits    []Limit
	maxPeriod int64

	mu        sync.Mutex
	index     map[Key]int
	logs      []Log
	keys      []Key
	capacity  int
	hand      int
	coldUntil int64 // ns: logs made before it start cold
	skipped   uint64
}

// NewSample returns an empty Sample for opts.
func NewSample(opts SampleOptions) (*Sample, error) {
	var errs []error
	if opts.Every < 1 {
		errs = append(errs, fmt.Errorf("window: sample every must be at least 1, got %d", opts.Every))
	}
	if opts.Keys < 1 {
		errs = append(errs, fmt.Errorf("window: sample keys must be at least 1, got %d", opts.Keys))
	}
	if n := len(opts.Limits); n < 1 || n > MaxRules {
		errs = append(errs, fmt.Errorf("window: need 1 to %d limits, got %d", MaxRules, n))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s := &Sample{every: opts.Every, limits: opts.Limits, index: make(map[Key]int), capacity: opts.Keys}
	for _, l := range opts.Limits {
		var p params
		p.init(l)
		s.maxPeriod = max(s.maxPeriod, int64(p.period))
	}
	if opts.Cold {
		s.coldUntil = opts.Start.UnixNano() + s.maxPeriod
	}
	return s, nil
}

// Every returns the sample's rate: one key in Every.
func (s *Sample) Every() int { return s.every }

// Sampled reports whether the client key b is in the sample.
func (s *Sample) Sampled(b []byte) bool { return Sampled(b, s.every) }

// Judge is Log.Judge on k's log, made if k has none. When all the sample's
// logs are taken, a log that has held no unit for its period is reused; if
// there is none, k's request is not logged (SampleStats.Skipped), and logs
// made within the longest period after that start cold, since the request
// missing from them may be in their key's window.
func (s *Sample) Judge(k Key, now time.Time, cost int64, d Decision) Verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[k]
	if !ok {
		t := now.UnixNano()
		if i = s.room(t); i < 0 {
			s.skipped++
			s.coldUntil = max(s.coldUntil, t+s.maxPeriod)
			return NotJudged
		}
		from := now
		if t < s.coldUntil {
			from = now.Add(s.limits[k.Rule()].Period)
		}
		s.logs[i].Reset(s.limits[k.Rule()], from)
		s.keys[i] = k
		s.index[k] = i
	}
	return s.logs[i].Judge(now, cost, d)
}

// Refund is Log.Refund on k's log, if it has one.
func (s *Sample) Refund(k Key, now time.Time, cost int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.index[k]; ok {
		s.logs[i].Refund(now, cost)
	}
}

// room returns the index of a free log, or -1. The caller holds s.mu.
func (s *Sample) room(t int64) int {
	if len(s.logs) < s.capacity {
		s.logs = append(s.logs, Log{})
		s.keys = append(s.keys, Key{})
		return len(s.logs) - 1
	}
	for range min(sampleSize, len(s.logs)) {
		i := s.hand
		s.hand = (s.hand + 1) % len(s.logs)
		if l := &s.logs[i]; l.idle(t) {
			delete(s.index, s.keys[i])
			return i
		}
	}
	return -1
}

// idle reports whether l holds no unit in its last period at t.
func (l *Log) idle(t int64) bool {
	if l.limit == 0 {
		return true
	}
	lo, hi := l.count(t)
	return lo == 0 && hi == 0
}

// SampleStats describe a Sample's use of memory.
type SampleStats struct {
	Keys     int    // keys logged now
	Capacity int    // most keys logged at once
	Skipped  uint64 // sampled requests not logged because every log was busy
}

// Stats returns the sample's statistics.
func (s *Sample) Stats() SampleStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SampleStats{Keys: len(s.index), Capacity: s.capacity, Skipped: s.skipped}
}
