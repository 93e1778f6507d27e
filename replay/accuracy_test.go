package replay

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"math"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/trace"
	"github.com/edgerate/edge/window"
)

// These tests follow the accuracy note (shared/reference/accuracy.md §3.7),
// at ci scale.

func cells(t testing.TB, name string, seed uint64) []*trace.Cell {
	t.Helper()
	if seed == 0 {
		seed, _ = trace.DefaultSeed(name)
	}
	cs, err := trace.Scenario(name, seed, trace.CI)
	if err != nil {
		t.Fatalf("Scenario(%q): %v", name, err)
	}
	return cs
}

func run(t testing.TB, in Input, opts Options) *Report {
	t.Helper()
	r, err := Run(in, opts)
	if err != nil {
		t.Fatalf("Run(%s): %v", in.Name, err)
	}
	return r
}

func byName(t testing.TB, name string) map[string]*Report {
	t.Helper()
	out := make(map[string]*Report)
	for _, c := range cells(t, name, 0) {
		out[c.Name] = run(t, CellInput(c), Options{})
	}
	return out
}

// newTracker is a tracker on a fresh production store, as Run makes one.
func newTracker(t testing.TB, limit int64, period time.Duration) *tracker {
	t.Helper()
	l := window.Limit{Limit: limit, Period: period}
	all := l
	all.CountBlocked = true
	s, err := window.New(window.Options{Capacity: 2, Limits: []window.Limit{all, l}})
	if err != nil {
		t.Fatal(err)
	}
	tr := &tracker{p: params{limit: limit, period: period.Microseconds()}, store: s}
	tr.reset(s.KeyString(ruleAll, "k"), s.KeyString(ruleAdmitted, "k"))
	return tr
}

// TestCloudflareWorkedExample replays the example of Cloudflare's 2017 post
// through the production store: limit 50 per minute, 42 requests in the
// previous minute, 18 in the current one, 15 s in, so the estimate is
// 42×45/60 + 18 = 49.5: allowed at L = 50, denied at L = 49, and one request
// later 50.5 is denied at L = 50.
func TestCloudflareWorkedExample(t *testing.T) {
	const ws = 28_333_334 * 60 * 1_000_000 // a minute boundary, µs
	for _, tt := range []struct {
		limit     int64
		wantAllow []bool // the 61st and 62nd requests, count-all
	}{
		{50, []bool{true, false}},
		{49, []bool{false, false}},
	} {
		tr := newTracker(t, tt.limit, time.Minute)
		for i := range int64(42) {
			tr.step(ws - 60_000_000 + i*1_000_000)
		}
		for range 18 {
			tr.step(ws + 15_000_000)
		}
		for i, want := range tt.wantAllow {
			got, _ := tr.step(ws + 15_000_000)
			wantEst := 49.5 + float64(i)
			if tr.lastEst != wantEst || got != want {
				t.Errorf("L=%d request %d: estimate %v allowed %v, want %v %v", tt.limit, 61+i, tr.lastEst, got, wantEst, want)
			}
		}
	}
}

// TestEstimateAgainstExactByHand checks the exact count and the estimate
// where they differ by construction.
func TestEstimateAgainstExactByHand(t *testing.T) {
	const w = 60_000_000 // µs
	const ws = 100 * w
	tests := []struct {
		name    string
		before  []int64 // earlier requests
		at      int64
		wantEst float64
		wantN   int64
	}{
		{"previous period's requests just before its end: E under-counts by prev×f", rep(10, ws-1000), ws + w/2, 5, 10},
		{"previous period's requests at its start: E over-counts", rep(10, ws-w), ws + w/2, 5, 0},
		{"a request exactly at t − W is not in N", []int64{ws - w/2}, ws + w/2, 0.5, 0},
		{"a request just after t − W is in N", []int64{ws - w/2 + 1}, ws + w/2, 0.5, 1},
		{"an idle gap of two periods empties prev", rep(10, ws-1000), ws + 2*w, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTracker(t, 1000, time.Minute)
			for _, b := range tt.before {
				tr.step(b)
			}
			tr.step(tt.at)
			if math.Abs(tr.lastEst-tt.wantEst) > 1e-9 || tr.lastN != tt.wantN {
				t.Errorf("got E = %v, N = %d; want E = %v, N = %d", tr.lastEst, tr.lastN, tt.wantEst, tt.wantN)
			}
		})
	}
}

func rep(n int, t int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = t
	}
	return out
}

// refLimiter is the integer reference of the estimate, written apart from
// window/: allow iff prev×(W − e) + curr×W < L×W in 128-bit integers, with
// epoch-aligned periods in nanoseconds.
type refLimiter struct {
	limit, period   uint64 // period in ns
	countBlocked    bool
	started         bool
	win, prev, curr uint64
}

func (r *refLimiter) allow(tMicros int64) bool {
	tn := uint64(tMicros) * 1000 // the traces start at the epoch: t ≥ 0
	w, e := tn/r.period, tn%r.period
	switch {
	case !r.started:
		r.started, r.win = true, w
	case w == r.win+1:
		r.prev, r.curr, r.win = r.curr, 0, w
	case w > r.win+1:
		r.prev, r.curr, r.win = 0, 0, w
	}
	h1, l1 := bits.Mul64(r.prev, r.period-e)
	h2, l2 := bits.Mul64(r.curr, r.period)
	lo, carry := bits.Add64(l1, l2, 0)
	hi := h1 + h2 + carry
	lh, ll := bits.Mul64(r.limit, r.period)
	ok := hi < lh || (hi == lh && lo < ll)
	if ok || r.countBlocked {
		r.curr++
	}
	return ok
}

// TestProductionEqualsIntegerReference replays every ci cell and the ci
// population through the replay's tracker (so through window.Store) and
// through refLimiter, in both counting modes, and requires identical
// decisions on every request.
func TestProductionEqualsIntegerReference(t *testing.T) {
	var all []*trace.Cell
	for _, name := range trace.Scenarios() {
		all = append(all, cells(t, name, 0)...)
	}
	var total int64
	for _, c := range all {
		var mu sync.Mutex
		var diffs, n int64
		firstDiff := ""
		check := func(i int, times func(try trace.Try)) {
			tr := newTracker(t, c.Limit, c.Period)
			ra := &refLimiter{limit: uint64(c.Limit), period: uint64(c.Period), countBlocked: true}
			rb := &refLimiter{limit: uint64(c.Limit), period: uint64(c.Period)}
			var d, k int64
			where := ""
			times(func(at int64) (bool, time.Duration) {
				k++
				gotAll, gotAdm := tr.step(at)
				wantAll, wantAdm := ra.allow(at), rb.allow(at)
				if gotAll != wantAll || gotAdm.Allowed != wantAdm {
					if d++; where == "" {
						where = c.Name + " source " + strconv.Itoa(i) + " at " + strconv.FormatInt(at, 10) + "µs"
					}
				}
				return gotAdm.Allowed, gotAdm.RetryAfter
			})
			mu.Lock()
			defer mu.Unlock()
			diffs += d
			n += k
			if firstDiff == "" {
				firstDiff = where
			}
		}
		if c.Adaptive() {
			check(0, func(try trace.Try) { c.Probe(try) })
		} else {
			var wg sync.WaitGroup
			workers := runtime.GOMAXPROCS(0)
			for w := range workers {
				wg.Go(func() {
					var buf []int64
					for i := w; i < c.Sources; i += workers {
						buf = c.Times(i, buf[:0])
						check(i, func(try trace.Try) {
							for _, at := range buf {
								try(at)
							}
						})
					}
				})
			}
			wg.Wait()
		}
		if diffs != 0 {
			t.Errorf("%s: %d of %d decisions differ from the integer reference; first: %s", c.Name, diffs, n, firstDiff)
		}
		total += n
	}
	if total < 10_000_000 {
		t.Errorf("compared %d requests, want the whole ci matrix (over 10 million)", total)
	}
	t.Logf("%d requests, both modes: 0 differences", total)
}

// TestPoissonAverageDifference checks D1 against the analytic
// √(2/π)×(π/8)/√λ ≈ 0.313/√λ for Poisson sources of λ requests per period
// (accuracy note §2 item 1), within ±6% relative, and that the estimate is
// unbiased: |bias| < 0.02×√λ.
func TestPoissonAverageDifference(t *testing.T) {
	const c = 0.31333 // √(2/π) × π/8
	for name, r := range byName(t, "lambda") {
		lambda := float64(r.Rule.Limit)
		want := c / math.Sqrt(lambda)
		got := r.CountAll.D1
		t.Logf("%s: D1 %.4f, analytic %.4f (%+.1f%%), bias %+.3f", name, got, want, 100*(got/want-1), r.CountAll.Bias)
		if math.Abs(got/want-1) > 0.06 {
			t.Errorf("%s: D1 = %.4f, want %.4f ± 6%%", name, got, want)
		}
		if math.Abs(r.CountAll.Bias) > 0.02*math.Sqrt(lambda) {
			t.Errorf("%s: bias = %.4f, want |bias| < %.4f", name, r.CountAll.Bias, 0.02*math.Sqrt(lambda))
		}
	}
}

// TestAtLimitMisjudged checks that a Poisson source sending at the limit is
// misjudged on 10–16% of its requests whatever the limit, and that at half
// or twice the limit (L = 100) it never is.
func TestAtLimitMisjudged(t *testing.T) {
	rs := byName(t, "poisson")
	for _, tt := range []struct {
		cell     string
		min, max float64
	}{
		{"poisson/L=10/rho=1", 0.10, 0.16},
		{"poisson/L=100/rho=1", 0.10, 0.16},
		{"poisson/L=100/rho=0.5", 0, 0},
		{"poisson/L=100/rho=2", 0, 0},
	} {
		r, ok := rs[tt.cell]
		if !ok {
			t.Fatalf("no cell %s", tt.cell)
		}
		got := r.CountAll.MisjudgedFraction
		t.Logf("%s: misjudged %.4f of %d", tt.cell, got, r.Requests)
		if got < tt.min || got > tt.max {
			t.Errorf("%s: misjudged %.4f, want %.2f–%.2f", tt.cell, got, tt.min, tt.max)
		}
	}
}

// TestAdversaryDoublesInOnePeriod replays the adversary of accuracy note §2
// item 3 in count-admitted mode: the store lets through about 2×L in one
// sliding period, the exact log never more than L, while both admit about L
// per period on average.
func TestAdversaryDoublesInOnePeriod(t *testing.T) {
	c := cells(t, "edge", 0)[0]
	r := run(t, CellInput(c), Options{})
	ca := r.CountAdmitted
	t.Logf("overshoot approx %.2f, exact %.2f; admitted %d approx, %d exact over %v", ca.OvershootApprox, ca.OvershootExact, ca.AdmittedApprox, ca.AdmittedExact, c.Span)
	if ca.OvershootApprox < 1.95 || ca.OvershootApprox > 2.0 {
		t.Errorf("store overshoot = %.3f×L, want 1.95–2.0", ca.OvershootApprox)
	}
	if ca.OvershootExact > 1.0 {
		t.Errorf("exact log overshoot = %.3f×L, want ≤ 1", ca.OvershootExact)
	}
	periods := float64(c.Span / c.Period)
	if perPeriod := float64(ca.AdmittedApprox) / periods / float64(c.Limit); perPeriod < 0.95 || perPeriod > 1.05 {
		t.Errorf("store admitted %.3f×L per period on average, want about 1", perPeriod)
	}
}

func reportJSON(t testing.TB, rs []*Report) []byte {
	t.Helper()
	b, err := json.Marshal(rs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSameSeedSameBytes replays the same seed with different worker counts
// and GOMAXPROCS and requires byte-identical JSON; another seed must differ.
func TestSameSeedSameBytes(t *testing.T) {
	replayAll := func(seed uint64, workers int) []byte {
		var rs []*Report
		for _, name := range []string{"nearlimit", "clusters", "onoff"} {
			for _, c := range cells(t, name, seed) {
				rs = append(rs, run(t, CellInput(c), Options{Workers: workers}))
			}
		}
		return reportJSON(t, rs)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	one := replayAll(0, 1)
	runtime.GOMAXPROCS(2)
	two := replayAll(0, 4)
	if !bytes.Equal(one, two) {
		t.Errorf("same seed, GOMAXPROCS 1 vs 2: outputs differ:\n%s\n%s", one, two)
	}
	if other := replayAll(99, 2); bytes.Equal(one, other) {
		t.Errorf("seeds 0 and 99 gave the same output")
	}
}

// TestStreamingEqualsInterleaved replays the ci population one source at a
// time and all sources in global time order, and requires the same report.
func TestStreamingEqualsInterleaved(t *testing.T) {
	c := cells(t, "population", 0)[0]
	in := CellInput(c)
	streaming := reportJSON(t, []*Report{run(t, in, Options{})})
	interleaved := reportJSON(t, []*Report{run(t, in, Options{Interleaved: true})})
	if !bytes.Equal(streaming, interleaved) {
		t.Errorf("streaming and interleaved replays differ:\n%s\n%s", streaming, interleaved)
	}
}

// TestPopulationSmoke checks the ci population (1%: 2,700 sources) against
// the accuracy note's bounds (§3.7 T8).
func TestPopulationSmoke(t *testing.T) {
	r := run(t, CellInput(cells(t, "population", 0)[0]), Options{})
	c := r.CountAll
	t.Logf("requests %d, misjudged %.4f%%, D1 %.2f%%, missed sources %d (max %.2f×L), wrongly limited sources %d",
		r.Requests, 100*c.MisjudgedFraction, 100*c.D1, c.MissedSources, c.MissedMaxPeakOverLimit, c.WronglyLimitedCount)
	if r.Sources != 2700 {
		t.Errorf("sources = %d, want 2700", r.Sources)
	}
	if r.Requests < 3_600_000 || r.Requests > 4_400_000 {
		t.Errorf("requests = %d, want 4.0 M ± 10%%", r.Requests)
	}
	if c.MisjudgedFraction >= 0.01 {
		t.Errorf("misjudged = %.4f, want < 1%%", c.MisjudgedFraction)
	}
	if c.D1 < 0.08 || c.D1 > 0.20 {
		t.Errorf("D1 = %.4f, want 8–20%%", c.D1)
	}
	if c.WronglyLimitedCount > c.MissedSources {
		t.Errorf("wrongly limited sources %d > missed sources %d", c.WronglyLimitedCount, c.MissedSources)
	}
	if r.Store.Evicted != 0 || r.Store.Overflowed != 0 {
		t.Errorf("store evicted %d and overflowed %d, want 0 at full capacity", r.Store.Evicted, r.Store.Overflowed)
	}
}

// nasa reads testdata/nasa_19950801.tsv.gz, a gzip of
// shared/data/nasa_19950801.tsv (provenance in testdata/README.md).
func nasa(t testing.TB) []trace.Record {
	t.Helper()
	f, err := os.Open("testdata/nasa_19950801.tsv.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var recs []trace.Record
	st, err := trace.ReadLog(z, trace.FormatAuto, func(r trace.Record) { recs = append(recs, r) })
	if err != nil {
		t.Fatal(err)
	}
	if st.Format != trace.FormatNASA || st.Records != 30_969 || st.Skipped != 0 {
		t.Fatalf("read %+v, want 30969 NASA records and none skipped", st)
	}
	return recs
}

// TestNASATrace replays the NASA-HTTP extract (1 Aug 1995, 30,969 requests,
// 2,365 hosts, one-second timestamps) under three rules, keyed by host, and
// asserts the counts exactly. They are the accuracy note's §3.8 figures.
func TestNASATrace(t *testing.T) {
	srcs := Group(nasa(t), func(r *trace.Record) (string, bool) { return r.Source, true })
	if len(srcs) != 2365 {
		t.Fatalf("%d hosts, want 2365", len(srcs))
	}
	tests := []struct {
		limit                          int64
		period                         time.Duration
		wronglyAllowed, wronglyLimited int64
		d1                             float64 // ±0.05 percentage points
		exactLimited, approxLimited    int
		missed, falselyLimited         int
	}{
		{10, 10 * time.Second, 32, 11, 0.111, 25, 22, 5, 2},
		{20, time.Minute, 14, 3, 0.106, 8, 6, 2, 0},
		{60, 10 * time.Minute, 18, 0, 0.074, 4, 3, 1, 0},
	}
	for _, tt := range tests {
		name := strconv.FormatInt(tt.limit, 10) + "/" + tt.period.String()
		t.Run(name, func(t *testing.T) {
			r := run(t, SourcesInput("nasa", Rule{Name: name, Limit: tt.limit, Period: tt.period}, srcs), Options{})
			c := r.CountAll
			if r.Requests != 30_969 || c.WronglyAllowed != tt.wronglyAllowed || c.WronglyLimited != tt.wronglyLimited ||
				c.SourcesExactLimited != tt.exactLimited || c.SourcesApproxLimited != tt.approxLimited ||
				c.MissedSources != tt.missed || c.WronglyLimitedCount != tt.falselyLimited ||
				math.Abs(c.D1-tt.d1) > 0.0005 {
				t.Errorf("got requests %d, wrongly allowed %d, wrongly limited %d, D1 %.4f, sources limited exact %d approx %d, missed %d, wrongly limited %d;\n"+
					"want 30969, %d, %d, %.3f, %d, %d, %d, %d",
					r.Requests, c.WronglyAllowed, c.WronglyLimited, c.D1, c.SourcesExactLimited, c.SourcesApproxLimited, c.MissedSources, c.WronglyLimitedCount,
					tt.wronglyAllowed, tt.wronglyLimited, tt.d1, tt.exactLimited, tt.approxLimited, tt.missed, tt.falselyLimited)
			}
		})
	}
}
