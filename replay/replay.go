// Package replay measures the production counters against an exact count:
// it sends recorded or synthetic traffic through a window.Store, counting
// by the rule's algorithm (the sliding window unless Rule.Algorithm says
// otherwise), and, side by side, through an exact sliding log of every
// source, and reports where and by how much they disagree. Compare runs
// one trace through every algorithm.
//
// # What is compared
//
// For each request of a source at time t, with a rule of L requests per
// period W:
//
//   - the exact count N is the number of the source's earlier requests in
//     (t − W, t]; the exact limiter allows iff N < L;
//   - the production decision is window.Store.Allow, which for the sliding
//     window allows iff the two-counter estimate E = prev×(W − e)/W + curr
//     is below L, and for the other algorithms decides as they do (see
//     package window);
//   - for the sliding window, E itself is recomputed here from the same
//     counts, in float64, only to measure |E − N|; no decision is taken
//     from it. The other algorithms keep no estimate of N, so these
//     figures (D1, D2, D3, Bias) are left at zero for them.
//
// Both counting modes of the production rule are replayed at once, each
// source having one key under each of two store rules:
//
//   - count-all (count_blocked: true): every request counts, whatever was
//     decided. Both limiters' states are then functions of the trace alone,
//     so "wrongly allowed" (the store allows, the exact log denies) and
//     "wrongly limited" are defined request by request.
//   - count-admitted (count_blocked: false): each side counts only what it
//     admitted, so once they disagree their states diverge and the
//     per-request disagreement depends on the path taken. This mode reports
//     admitted totals and the overshoot: the most requests the store
//     admitted in any sliding period, over L. The exact log's overshoot is
//     at most 1 by construction.
//
// Command is edge replay's logic (its flags and the loading of -config
// stay with the command): what to replay, the reports, the JSON document
// and the figures' data.
//
// docs/accuracy.md says how to read these figures and where the method
// stops.
package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/trace"
	"github.com/edgerate/edge/window"
)

// A Rule is what a replay enforces: Limit requests per Period per source.
type Rule struct {
	// Name labels the rule in reports.
	Name string
	// Algorithm is how the store counts; the zero value is the sliding
	// window. The exact log it is compared with is the same whatever it is.
	Algorithm algorithm.Algorithm
	// Limit is the number of requests allowed per Period; at least 1.
	Limit int64
	// Period is the window length; at least 1ms, whole milliseconds, as
	// window.Limit requires.
	Period time.Duration
	// Burst is a bucket's capacity (window.Limit.Burst); 0 means Limit.
	// Windows ignore it.
	Burst int64
	// Mitigation, when positive, blocks a source for this long once it goes
	// over the limit, in the store as in the exact log.
	Mitigation time.Duration
	// Precision is how finely a sliding window counts
	// (window.Limit.Precision); other algorithms ignore it. With Fine the
	// estimate compared with the exact count is the store's own
	// (window.State.Estimate), which for a key counted in a log is its
	// exact count.
	Precision algorithm.Precision
}

// A Source is one client's requests.
type Source struct {
	// Name identifies the source in reports (a client address, say).
	Name string
	// Times are the request times in µs since the Unix epoch, ascending;
	// equal times keep their order.
	Times []int64
	// Key is the source's client key as the proxy builds it
	// (rules.AppendKey), which decides whether the accuracy sample takes
	// it (window.Sampled); "" means Name.
	Key string
}

// Input is what a replay reads: a rule and its sources. Make one with
// CellInput or SourcesInput.
type Input struct {
	// Name labels the input in reports.
	Name string
	Rule Rule
	// Sources is the number of sources.
	Sources int
	// Classes names source classes reported separately; nil for one class.
	Classes []string

	times   func(i int, buf []int64) []int64
	probe   func(try trace.Try) []int64
	class   func(i int) int
	srcName func(i int) string
	srcKey  func(i int) string // what window.Sampled hashes
}

// CellInput replays a synthetic cell under its own rule.
func CellInput(c *trace.Cell) Input {
	in := Input{
		Name:    c.Name,
		Rule:    Rule{Name: c.Name, Limit: c.Limit, Period: c.Period},
		Sources: c.Sources,
		Classes: c.Classes,
		class:   c.Class,
		srcName: func(i int) string {
			if c.Classes != nil {
				return c.Classes[c.Class(i)] + "/" + strconv.Itoa(i)
			}
			return strconv.Itoa(i)
		},
	}
	in.srcKey = in.srcName
	if c.Adaptive() {
		in.probe = c.Probe
	} else {
		in.times = c.Times
	}
	return in
}

// SourcesInput replays recorded sources under rule. The sources are not
// copied and must not change during the replay.
func SourcesInput(name string, rule Rule, srcs []Source) Input {
	return Input{
		Name:    name,
		Rule:    rule,
		Sources: len(srcs),
		times: func(i int, buf []int64) []int64 {
			return append(buf, srcs[i].Times...)
		},
		srcName: func(i int) string { return srcs[i].Name },
		srcKey:  func(i int) string { return cmp.Or(srcs[i].Key, srcs[i].Name) },
	}
}

// Options tune a replay. The zero value is ready to use.
type Options struct {
	// Workers is how many sources are replayed at once; 0 means GOMAXPROCS.
	// Results do not depend on it.
	Workers int
	// Capacity is, with Interleaved, the shared store's capacity in
	// sources; 0 means all of them with room to spare, so that no eviction
	// distorts the comparison. A smaller capacity measures what eviction
	// costs; the store's evictions are reported either way. Without
	// Interleaved every source has a store of its own and Capacity is
	// ignored.
	Capacity int
	// Interleaved feeds every request of every source to one goroutine in
	// global time order (ties by source index, then by order), as a live
	// proxy sees them, instead of one source at a time. It holds the whole
	// trace in memory; results must not change.
	Interleaved bool
	// Sample, when positive, also judges the store's decisions as the
	// proxy's accuracy sample (accuracy_sample) does: for the sources
	// whose key window.Sampled takes at 1 in Sample, against a
	// window.Log of what the store counted, in both counting modes; the
	// figures are Report.Sample. 0 samples nothing.
	Sample int
	// ByRate, for the sliding window, also reports the average difference
	// by the exact count each request saw (Report.ByRate).
	ByRate bool
	// Progress, when set, is called after each source with the number of
	// sources finished so far. It is called from several goroutines at once.
	Progress func(done int)

	// observe, when set, sees every production decision of a streaming or
	// adaptive replay: source i's request at t, its count-all verdict and
	// its count-admitted decision. Tests check them against a reference.
	// It is called from several goroutines at once, never twice at once for
	// one source.
	observe func(i int, t int64, all bool, adm window.Decision)
}

// shards is the number of fixed groups sources are reduced in: source i
// belongs to shard i mod shards, each shard adds its sources in index order
// and the shards are added in order. Float sums are then the same whatever
// the number of workers.
const shards = 64

// Run replays in and compares the store with the exact logs. It stops
// early, with ctx's error, when ctx is done.
func Run(ctx context.Context, in Input, opts Options) (*Report, error) {
	if in.times == nil && in.probe == nil {
		return nil, errors.New("replay: empty Input; use CellInput or SourcesInput")
	}
	if p := in.Rule.Period; p < time.Millisecond || p%time.Millisecond != 0 {
		// A quota's Period is 0: TableRules leaves quotas out.
		return nil, fmt.Errorf("replay: %s: period must be a whole number of milliseconds, at least 1ms, got %v", in.Name, p)
	}
	if in.probe != nil && in.Sources != 1 {
		return nil, fmt.Errorf("replay: an adaptive input has 1 source, got %d", in.Sources)
	}
	r := newRunner(in, opts)
	if _, err := r.newStore(1); err != nil {
		return nil, err
	}
	var stats window.Stats
	capacity := 0
	switch {
	case in.probe != nil:
		r.adaptive()
	case opts.Interleaved:
		var err error
		if stats, capacity, err = r.interleaved(ctx); err != nil {
			return nil, err
		}
	default:
		r.perSource(ctx)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("replay: %s: %w", in.Name, err)
	}
	return r.report(stats, capacity), nil
}

// runner is one Run: the rule, and the per-source results it gathers.
// record may be called from several goroutines at once for different
// sources, as long as one shard's sources are recorded by one goroutine.
type runner struct {
	in     Input
	opts   Options
	p      params
	limits []window.Limit // ruleAll and ruleAdmitted

	peaks    []int64
	verdicts []uint8
	sums     [][]acc // [shard][class]
	done     atomic.Int64
}

func newRunner(in Input, opts Options) *runner {
	lim := window.Limit{
		Algorithm: in.Rule.Algorithm, Limit: in.Rule.Limit, Period: in.Rule.Period,
		Burst: in.Rule.Burst, Mitigation: in.Rule.Mitigation, Precision: in.Rule.Precision,
	}
	allLim, admLim := lim, lim
	allLim.CountBlocked = true
	r := &runner{
		in:     in,
		opts:   opts,
		limits: []window.Limit{allLim, admLim},
		p: params{
			limit:      in.Rule.Limit,
			period:     in.Rule.Period.Microseconds(),
			mitigation: in.Rule.Mitigation.Microseconds(),
			estimate:   in.Rule.Algorithm == algorithm.SlidingWindow,
			peek:       in.Rule.Algorithm == algorithm.SlidingWindow && in.Rule.Precision == algorithm.Fine,
		},
		peaks:    make([]int64, in.Sources),
		verdicts: make([]uint8, in.Sources),
		sums:     make([][]acc, shards),
	}
	for i := range r.sums {
		r.sums[i] = make([]acc, max(len(in.Classes), 1))
	}
	return r
}

// newStore makes a store for n sources (two keys each).
func (r *runner) newStore(n int) (*window.Store, error) {
	s, err := window.New(window.Options{Capacity: 2 * n, Limits: r.limits})
	if err != nil {
		return nil, fmt.Errorf("replay: rule %s: %w", r.in.Rule.Name, err)
	}
	return s, nil
}

// keys are source i's keys in s under both rules.
func (r *runner) keys(s *window.Store, i int) (window.Key, window.Key) {
	id := strconv.Itoa(i) // distinct per source; the store hashes it
	return s.KeyString(ruleAll, id), s.KeyString(ruleAdmitted, id)
}

// sample makes tr judge source i's decisions as the accuracy sample does,
// if the sample takes the source.
func (r *runner) sample(tr *tracker, i int) {
	if r.opts.Sample <= 0 || r.in.srcKey == nil || !window.Sampled([]byte(r.in.srcKey(i)), r.opts.Sample) {
		return
	}
	if tr.logs == nil {
		tr.logs = new([2]window.Log)
	}
	from := time.Unix(0, 0)
	tr.logs[ruleAll].Reset(r.limits[ruleAll], from)
	tr.logs[ruleAdmitted].Reset(r.limits[ruleAdmitted], from)
	tr.sampled = true
	tr.a.sampled = 1
}

// record adds source i's results and reports progress.
func (r *runner) record(i int, tr *tracker) {
	a, peak := tr.finish()
	r.peaks[i] = peak
	r.verdicts[i] = verdict(&a)
	class := 0
	if r.in.class != nil {
		class = r.in.class(i)
	}
	r.sums[i%shards][class].add(&a)
	n := r.done.Add(1)
	if r.opts.Progress != nil {
		r.opts.Progress(int(n))
	}
}

// adaptive replays the one source of an adaptive input, which reacts to
// each decision.
func (r *runner) adaptive() {
	store, _ := r.newStore(1)
	tr := &tracker{p: r.p, store: store}
	tr.reset(r.keys(store, 0))
	r.sample(tr, 0)
	r.in.probe(func(t int64) (bool, time.Duration) {
		all, d := tr.step(t)
		if r.opts.observe != nil {
			r.opts.observe(0, t, all, d)
		}
		return d.Allowed, d.RetryAfter
	})
	r.record(0, tr)
}

// interleaved replays every source through one store, in global time
// order, as in the proxy. It returns the store's statistics and capacity.
func (r *runner) interleaved(ctx context.Context) (window.Stats, int, error) {
	// Shards fill unevenly, so the default capacity has 25% slack: the
	// comparison must not be shaped by eviction unless asked.
	capacity := r.opts.Capacity
	n := capacity
	if n <= 0 {
		capacity = r.in.Sources
		n = r.in.Sources + r.in.Sources/4 + 32
	}
	store, err := r.newStore(n)
	if err != nil {
		return window.Stats{}, 0, err
	}
	r.interleave(ctx, store)
	return store.Stats(), capacity, nil
}

// perSource replays the sources one after another on a store each, each
// from the start of the trace: a shared store would see time jump back and
// forth between them and evict or expire one source's counters on
// another's clock. Workers take whole shards, so that each shard's sums
// are added by one goroutine, in source order.
func (r *runner) perSource(ctx context.Context) {
	workers := r.opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, shards) {
		wg.Go(func() {
			tr := &tracker{p: r.p}
			var buf []int64
			for s := int(next.Add(1) - 1); s < shards; s = int(next.Add(1) - 1) {
				for i := s; i < r.in.Sources && ctx.Err() == nil; i += shards {
					buf = r.in.times(i, buf[:0])
					r.replaySource(tr, i, buf)
				}
			}
		})
	}
	wg.Wait()
}

// replaySource replays source i's times through tr on a store of its own.
func (r *runner) replaySource(tr *tracker, i int, times []int64) {
	store, _ := r.newStore(1)
	tr.store = store
	tr.reset(r.keys(store, i))
	r.sample(tr, i)
	for _, t := range times {
		all, d := tr.step(t)
		if r.opts.observe != nil {
			r.opts.observe(i, t, all, d)
		}
	}
	r.record(i, tr)
}

// report adds up the sources' results.
func (r *runner) report(stats window.Stats, capacity int) *Report {
	in := r.in
	total := make([]acc, max(len(in.Classes), 1))
	var all acc
	for s := range r.sums {
		for c := range r.sums[s] {
			total[c].add(&r.sums[s][c])
		}
	}
	for c := range total {
		all.add(&total[c])
	}
	rep := &Report{
		Name:      in.Name,
		Precision: precisionOf(in.Rule).String(),
		Rule:      ruleReport(in.Rule),
		Sources:   in.Sources,
		Requests:  all.requests,
		Store: StoreReport{
			Shared: r.opts.Interleaved, Capacity: capacity, Evicted: stats.Evicted, Overflowed: stats.Overflowed,
			FineFallback: stats.FineFallback,
		},
		CountAll:      countAll(&all, in.Rule.Limit),
		CountAdmitted: countAdmitted(&all, in.Rule.Limit),
		Peaks:         peakStats(r.peaks),
		peaks:         r.peaks,
	}
	if r.opts.Sample > 0 {
		rep.Sample = sampleReport(&all, r.opts.Sample)
	}
	if r.opts.ByRate && r.p.estimate {
		rep.ByRate = rateBins(&all)
	}
	rep.CountAll.Missed = listSources(in, r.peaks, r.verdicts, verdictFN, in.Rule.Limit)
	rep.CountAll.WronglyLimitedSources = listSources(in, r.peaks, r.verdicts, verdictFP, in.Rule.Limit)
	for c, name := range in.Classes {
		rep.Classes = append(rep.Classes, ClassReport{
			Name:          name,
			Sources:       total[c].sources,
			Requests:      total[c].requests,
			CountAll:      countAll(&total[c], in.Rule.Limit),
			CountAdmitted: countAdmitted(&total[c], in.Rule.Limit),
		})
	}
	return rep
}

// precisionOf is the precision rule counts by: Fine only for a sliding
// window.
func precisionOf(rule Rule) algorithm.Precision {
	if rule.Algorithm == algorithm.SlidingWindow && rule.Precision == algorithm.Fine {
		return algorithm.Fine
	}
	return algorithm.Standard
}

// interleave replays every source's requests in global time order through
// one set of trackers on store.
func (r *runner) interleave(ctx context.Context, store *window.Store) {
	in := r.in
	times := make([][]int64, in.Sources)
	trs := make([]tracker, in.Sources)
	for i := range times {
		times[i] = in.times(i, nil)
		trs[i] = tracker{p: r.p, store: store}
		trs[i].reset(r.keys(store, i))
		r.sample(&trs[i], i)
	}
	// A k-way merge on (time, source): a binary heap of source indices.
	pos := make([]int, in.Sources)
	h := make([]int, 0, in.Sources)
	less := func(a, b int) bool {
		ta, tb := times[a][pos[a]], times[b][pos[b]]
		return ta < tb || (ta == tb && a < b)
	}
	down := func(i int) {
		for {
			l, small := 2*i+1, i
			if l < len(h) && less(h[l], h[small]) {
				small = l
			}
			if r := l + 1; r < len(h) && less(h[r], h[small]) {
				small = r
			}
			if small == i {
				return
			}
			h[i], h[small] = h[small], h[i]
			i = small
		}
	}
	for i := range times {
		if len(times[i]) > 0 {
			h = append(h, i)
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(i)
	}
	for steps := 0; len(h) > 0; steps++ {
		if steps%(1<<20) == 0 && ctx.Err() != nil {
			return
		}
		i := h[0]
		trs[i].step(times[i][pos[i]])
		if pos[i]++; pos[i] == len(times[i]) {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		down(0)
	}
	for i := range trs {
		r.record(i, &trs[i])
	}
}

// Per-source verdict bits.
const (
	verdictFN = 1 << iota // the exact log denied, the store never did
	verdictFP             // the store denied, the exact log never did
)

func verdict(a *acc) uint8 {
	var v uint8
	if a.fn > 0 {
		v |= verdictFN
	}
	if a.fp > 0 {
		v |= verdictFP
	}
	return v
}

// maxListed bounds the sources named in a report's lists.
const maxListed = 10

// listSources names the sources with verdict bit v, highest peak first
// (ties by index), at most maxListed of them.
func listSources(in Input, peaks []int64, verdicts []uint8, v uint8, limit int64) []SourcePeak {
	var idx []int
	for i, got := range verdicts {
		if got&v != 0 {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int {
		if c := cmp.Compare(peaks[b], peaks[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	var out []SourcePeak
	for _, i := range idx[:min(len(idx), maxListed)] {
		out = append(out, SourcePeak{Name: in.srcName(i), Peak: peaks[i], PeakOverLimit: ratio(peaks[i], limit)})
	}
	return out
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func frac(a int64, b int64) float64 { return ratio(a, b) }

func mean(sum float64, n int64) float64 {
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

func countAll(a *acc, limit int64) CountAll {
	return CountAll{
		ExactDenied:            a.exactDenied,
		ApproxDenied:           a.approxDenied,
		WronglyAllowed:         a.wronglyAllowed,
		WronglyLimited:         a.wronglyLimited,
		WronglyAllowedFraction: frac(a.wronglyAllowed, a.requests),
		WronglyLimitedFraction: frac(a.wronglyLimited, a.requests),
		MisjudgedFraction:      frac(a.wronglyAllowed+a.wronglyLimited, a.requests),
		D1:                     mean(a.d1Sum, a.d1N),
		D2:                     mean(a.d2Sum, a.requests),
		D3:                     mean(a.d3Sum, a.d3N),
		Bias:                   mean(a.biasSum, a.requests),
		CriticalShare:          frac(a.critical, a.requests),
		SourcesExactLimited:    a.srcExactLimited,
		SourcesApproxLimited:   a.srcApproxLimited,
		MissedSources:          a.fn,
		MissedMaxPeakOverLimit: ratio(a.fnMaxPeak, limit),
		WronglyLimitedCount:    a.fp,
		WronglyLimitedMaxPeak:  ratio(a.fpMaxPeak, limit),
	}
}

func countAdmitted(a *acc, limit int64) CountAdmitted {
	return CountAdmitted{
		AdmittedExact:        a.admExact,
		AdmittedApprox:       a.admApprox,
		AdmittedRatio:        ratio(a.admApprox, a.admExact),
		OvershootApprox:      ratio(a.overApprox, limit),
		OvershootExact:       ratio(a.overExact, limit),
		MostInPeriodApprox:   a.overApprox,
		MostInPeriodExact:    a.overExact,
		BurstApprox:          a.burstApprox,
		BurstExact:           a.burstExact,
		SourcesExactLimited:  a.admSrcExactLimited,
		SourcesApproxLimited: a.admSrcApproxLimited,
		PathDependent:        true,
		WronglyAllowed:       a.admWronglyAllowed,
		WronglyLimited:       a.admWronglyLimited,
	}
}

func ruleReport(r Rule) RuleReport {
	rr := RuleReport{
		Name: r.Name, Algorithm: r.Algorithm.String(), Limit: r.Limit,
		PeriodSeconds:     r.Period.Seconds(),
		MitigationSeconds: r.Mitigation.Seconds(),
	}
	if r.Algorithm == algorithm.TokenBucket || r.Algorithm == algorithm.LeakyBucket {
		rr.Burst = cmp.Or(r.Burst, r.Limit)
	}
	return rr
}

// peakStats summarises per-source peaks by nearest rank.
func peakStats(peaks []int64) Peaks {
	s := slices.Clone(peaks)
	slices.Sort(s)
	return Peaks{P50: rank(s, 0.5), P99: rank(s, 0.99), P999: rank(s, 0.999), Max: rank(s, 1)}
}

// rank returns the q-quantile of sorted s by nearest rank: the smallest
// value with at least q×n values at or below it.
func rank(s []int64, q float64) int64 {
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
