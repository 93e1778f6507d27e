package replay

import (
	"math"
	"math/bits"
	"time"

	"github.com/edgerate/edge/window"
)

// Store rules: every source has one key under each, so that one pass judges
// both counting modes.
const (
	ruleAll      = 0 // counts every request (count_blocked: true)
	ruleAdmitted = 1 // counts admitted requests only (count_blocked: false)
)

// params is the replayed rule in the engine's units.
type params struct {
	limit      int64
	period     int64 // µs
	mitigation int64 // µs
	estimate   bool  // the store counts by the sliding window's estimate
	peek       bool  // the estimate is the store's (Fine precision), not the two counters'
}

// burstSpan is the span of time in which the largest burst is measured:
// the most requests of one source admitted within any second (µs).
const burstSpan = 1_000_000

// ring is a FIFO of times: the requests of one source inside the last
// period, oldest first.
type ring struct {
	buf  []int64
	head int
}

func (r *ring) len() int { return len(r.buf) - r.head }

func (r *ring) push(t int64) {
	if r.head > 0 && r.head >= len(r.buf)/2 && len(r.buf) == cap(r.buf) {
		n := copy(r.buf, r.buf[r.head:])
		r.buf, r.head = r.buf[:n], 0
	}
	r.buf = append(r.buf, t)
}

// expire drops the times at or before cutoff.
func (r *ring) expire(cutoff int64) {
	for r.head < len(r.buf) && r.buf[r.head] <= cutoff {
		r.head++
	}
	if r.head == len(r.buf) {
		r.buf, r.head = r.buf[:0], 0
	}
}

func (r *ring) reset() { r.buf, r.head = r.buf[:0], 0 }

// tracker replays one source through the production store (both modes) and
// through exact sliding logs (both modes), and accumulates the comparison.
// It is not safe for concurrent use; one source's requests must come to it
// in time order.
type tracker struct {
	p          params
	store      *window.Store
	kAll, kAdm window.Key

	// count-all: the exact log of every request, and the two counters of
	// the estimate kept independently of the store, for the metrics.
	all                ring
	started            bool
	win, prev, curr    int64
	allMit, admMit     int64 // exact mitigation ends (µs), valid if the flag is set
	allMitOn, admMitOn bool

	// count-admitted: each side's log of what it admitted, over the last
	// period and over the last burstSpan.
	exAdm, apAdm     ring
	exBurst, apBurst ring

	// The accuracy sample's logs of what the store counted, by store rule
	// (ruleAll, ruleAdmitted), when the source is sampled.
	sampled bool
	logs    *[2]window.Log

	lastEst     float64 // the estimate before the last request, for tests
	lastN       int64   // the exact count before the last request, for tests
	lastExact   bool    // the exact log's count-all decision on the last request (Follow)
	maxN        int64   // largest exact count before a request (count-all)
	exDenied    bool
	apDenied    bool
	exAdmDenied bool
	apAdmDenied bool
	a           acc
}

// reset prepares t for another source, keeping its buffers.
func (t *tracker) reset(kAll, kAdm window.Key) {
	all, ex, ap, exB, apB := t.all, t.exAdm, t.apAdm, t.exBurst, t.apBurst
	for _, r := range []*ring{&all, &ex, &ap, &exB, &apB} {
		r.reset()
	}
	*t = tracker{
		p: t.p, store: t.store, kAll: kAll, kAdm: kAdm,
		all: all, exAdm: ex, apAdm: ap, exBurst: exB, apBurst: apB, logs: t.logs,
	}
}

// floorDiv returns ⌊a/b⌋ and a − ⌊a/b⌋·b for b > 0.
func floorDiv(a, b int64) (q, r int64) {
	q, r = a/b, a%b
	if r < 0 {
		q, r = q-1, r+b
	}
	return q, r
}

// ceilMillis rounds a µs time up to a whole millisecond, as the store keeps
// mitigation ends.
func ceilMillis(t int64) int64 {
	q, r := floorDiv(t, 1000)
	if r > 0 {
		q++
	}
	return q * 1000
}

// step judges one request at t (µs since the epoch) in both modes. It
// returns the production store's count-all verdict and its count-admitted
// decision, the one an adaptive source reacts to.
func (t *tracker) step(at int64) (allAllowed bool, adm window.Decision) {
	now := time.UnixMicro(at)
	t.a.requests++
	allAllowed = t.stepAll(at, now)
	return allAllowed, t.stepAdmitted(at, now)
}

// stepAll judges a request at in count-all mode: by the exact log, by the
// store, and by the estimate's own counters, whose value (not decision) is
// compared with the exact count. It returns the store's decision.
func (t *tracker) stepAll(at int64, now time.Time) bool {
	p := &t.p
	// Exact: N = earlier requests in (at − W, at].
	t.all.expire(at - p.period)
	n := int64(t.all.len())
	exAllow := n < p.limit
	if t.allMitOn && at < t.allMit {
		exAllow = false
	} else if !exAllow && p.mitigation > 0 {
		t.allMitOn, t.allMit = true, ceilMillis(at+p.mitigation)
	}
	// The estimate's own counters (for its value, not the decision, which
	// is the store's).
	w, e := floorDiv(at, p.period)
	switch {
	case !t.started:
		t.started, t.win = true, w
	case w == t.win+1:
		t.prev, t.curr, t.win = t.curr, 0, w
	case w > t.win+1:
		t.prev, t.curr, t.win = 0, 0, w
	}
	est := float64(t.prev)*float64(p.period-e)/float64(p.period) + float64(t.curr)
	if p.peek {
		est = t.store.Peek(t.kAll, now).Estimate
	}
	t.lastEst, t.lastN, t.lastExact = est, n, exAllow
	d := t.store.Allow(t.kAll, now)
	apAllow := d.Allowed
	if t.sampled {
		t.a.sample[ruleAll].add(t.logs[ruleAll].Judge(now, 1, d))
	}
	t.all.push(at)
	t.curr++
	t.tallyAll(n, est, exAllow, apAllow)
	return apAllow
}

// tallyAll adds one count-all request to the tallies: the exact count n
// before it, the estimate est, and both decisions.
func (t *tracker) tallyAll(n int64, est float64, exAllow, apAllow bool) {
	p, a := &t.p, &t.a
	if 5*n >= 4*p.limit && 5*n < 6*p.limit {
		a.critical++
	}
	t.maxN = max(t.maxN, n)
	if !exAllow {
		a.exactDenied++
		t.exDenied = true
	}
	if !apAllow {
		a.approxDenied++
		t.apDenied = true
	}
	switch {
	case apAllow && !exAllow:
		a.wronglyAllowed++
	case !apAllow && exAllow:
		a.wronglyLimited++
	}
	if !p.estimate {
		return
	}
	diff := est - float64(n)
	a.biasSum += diff
	ad := math.Abs(diff)
	a.d2Sum += ad / float64(p.limit)
	if n >= 1 {
		a.d1Sum += ad / float64(n)
		a.d1N++
		b := &a.byN[bits.Len64(uint64(n))-1]
		b.d1Sum += ad / float64(n)
		b.nSum += float64(n)
		b.requests++
	}
	if 2*n >= p.limit {
		a.d3Sum += ad / float64(n)
		a.d3N++
	}
}

// stepAdmitted judges a request at in count-admitted mode, where each side
// counts only what it admitted, and returns the store's decision.
func (t *tracker) stepAdmitted(at int64, now time.Time) window.Decision {
	p, a := &t.p, &t.a
	t.exAdm.expire(at - p.period)
	exAdm := int64(t.exAdm.len()) < p.limit
	if t.admMitOn && at < t.admMit {
		exAdm = false
	} else if !exAdm && p.mitigation > 0 {
		t.admMitOn, t.admMit = true, ceilMillis(at+p.mitigation)
	}
	if exAdm {
		t.exAdm.push(at)
		a.admExact++
		a.overExact = max(a.overExact, int64(t.exAdm.len()))
		a.burstExact = max(a.burstExact, admitIn(&t.exBurst, at))
	} else {
		t.exAdmDenied = true
	}
	d := t.store.Allow(t.kAdm, now)
	if t.sampled {
		t.a.sample[ruleAdmitted].add(t.logs[ruleAdmitted].Judge(now, 1, d))
		t.a.sampleRequests++
	}
	if d.Allowed {
		t.apAdm.expire(at - p.period)
		t.apAdm.push(at)
		a.admApprox++
		a.overApprox = max(a.overApprox, int64(t.apAdm.len()))
		a.burstApprox = max(a.burstApprox, admitIn(&t.apBurst, at))
	} else {
		t.apAdmDenied = true
	}
	switch {
	case d.Allowed && !exAdm:
		a.admWronglyAllowed++
	case !d.Allowed && exAdm:
		a.admWronglyLimited++
	}
	return d
}

// admitIn records a request admitted at in r, the admitted requests of the
// last burstSpan, and returns how many r holds: those admitted in
// (at − burstSpan, at].
func admitIn(r *ring, at int64) int64 {
	r.expire(at - burstSpan)
	r.push(at)
	return int64(r.len())
}

// finish closes the source: its per-source verdicts go into its acc.
func (t *tracker) finish() (acc, int64) {
	a := t.a
	a.sources = 1
	peak := t.maxN + 1 // the most requests the source sent in one period
	if t.a.requests == 0 {
		peak = 0
	}
	if t.exDenied {
		a.srcExactLimited = 1
	}
	if t.apDenied {
		a.srcApproxLimited = 1
	}
	if t.exDenied && !t.apDenied {
		a.fn = 1
		a.fnMaxPeak = peak
	}
	if t.apDenied && !t.exDenied {
		a.fp = 1
		a.fpMaxPeak = peak
	}
	if t.exAdmDenied {
		a.admSrcExactLimited = 1
	}
	if t.apAdmDenied {
		a.admSrcApproxLimited = 1
	}
	return a, peak
}

// acc accumulates a set of sources. Float sums are added in a fixed order
// (see Run), so that results do not depend on scheduling.
type acc struct {
	sources  int
	requests int64

	exactDenied, approxDenied         int64
	wronglyAllowed, wronglyLimited    int64
	d1Sum, d2Sum, d3Sum, biasSum      float64
	d1N, d3N, critical                int64
	srcExactLimited, srcApproxLimited int
	fn, fp                            int
	fnMaxPeak, fpMaxPeak              int64

	admExact, admApprox                     int64
	admWronglyAllowed, admWronglyLimited    int64
	admSrcExactLimited, admSrcApproxLimited int
	overExact, overApprox                   int64
	burstExact, burstApprox                 int64

	// The accuracy sample: sources sampled, their requests, and the
	// verdicts of their logs by store rule.
	sampled        int
	sampleRequests int64
	sample         [2]sampleAcc

	byN [nBins]nBin // the average difference by exact count (Options.ByRate)
}

// sampleAcc counts a sample log's verdicts.
type sampleAcc struct{ judged, wronglyAllowed, wronglyLimited int64 }

func (s *sampleAcc) add(v window.Verdict) {
	switch v {
	case window.NotJudged:
		return
	case window.WronglyAllowed:
		s.wronglyAllowed++
	case window.WronglyLimited:
		s.wronglyLimited++
	}
	s.judged++
}

func (a *acc) add(b *acc) {
	a.sources += b.sources
	a.requests += b.requests
	a.exactDenied += b.exactDenied
	a.approxDenied += b.approxDenied
	a.wronglyAllowed += b.wronglyAllowed
	a.wronglyLimited += b.wronglyLimited
	a.d1Sum += b.d1Sum
	a.d2Sum += b.d2Sum
	a.d3Sum += b.d3Sum
	a.biasSum += b.biasSum
	a.d1N += b.d1N
	a.d3N += b.d3N
	a.critical += b.critical
	a.srcExactLimited += b.srcExactLimited
	a.srcApproxLimited += b.srcApproxLimited
	a.fn += b.fn
	a.fp += b.fp
	a.fnMaxPeak = max(a.fnMaxPeak, b.fnMaxPeak)
	a.fpMaxPeak = max(a.fpMaxPeak, b.fpMaxPeak)
	a.admExact += b.admExact
	a.admApprox += b.admApprox
	a.admWronglyAllowed += b.admWronglyAllowed
	a.admWronglyLimited += b.admWronglyLimited
	a.admSrcExactLimited += b.admSrcExactLimited
	a.admSrcApproxLimited += b.admSrcApproxLimited
	a.overExact = max(a.overExact, b.overExact)
	a.overApprox = max(a.overApprox, b.overApprox)
	a.burstExact = max(a.burstExact, b.burstExact)
	a.burstApprox = max(a.burstApprox, b.burstApprox)
	a.sampled += b.sampled
	a.sampleRequests += b.sampleRequests
	for i := range a.byN {
		a.byN[i].d1Sum += b.byN[i].d1Sum
		a.byN[i].nSum += b.byN[i].nSum
		a.byN[i].requests += b.byN[i].requests
	}
	for i := range a.sample {
		a.sample[i].judged += b.sample[i].judged
		a.sample[i].wronglyAllowed += b.sample[i].wronglyAllowed
		a.sample[i].wronglyLimited += b.sample[i].wronglyLimited
	}
}
