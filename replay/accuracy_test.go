package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/trace"
	"github.com/edgerate/edge/window"
)

// These tests check the claims of docs/accuracy.md at ci scale (its last
// section, "How it is checked", lists them).

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
	r, err := Run(context.Background(), in, opts)
	if err != nil {
		t.Fatalf("Run(%s): %v", in.Name, err)
	}
	return r
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

// ciMatrix is every ci cell of every scenario (the ci population
// included, about 20 million requests), replayed once for all the tests
// below, with every production decision checked against refLimiter.
//
// The race detector makes each decision about 20 times slower (the store
// takes a mutex per request), so under it the matrix keeps what the tests
// below assert on: the whole ci population, the Poisson and adversary cells,
// and the λ cells with λ ≥ 100 cut to a million requests (100 and 25
// sources instead of 200). The cells left
// out are still replayed by TestSameSeedSameBytes, and in full by go test
// without -race (about 5 s).
type ciMatrix struct {
	reports  map[string]*Report
	order    []string
	diffs    map[string]int64
	first    map[string]string
	requests int64
}

var (
	matrixOnce sync.Once
	matrix     ciMatrix
)

func ci(t testing.TB) *ciMatrix {
	t.Helper()
	matrixOnce.Do(func() {
		m := ciMatrix{reports: map[string]*Report{}, diffs: map[string]int64{}, first: map[string]string{}}
		for _, name := range trace.Scenarios() {
			if raceEnabled && name != "population" && name != "poisson" && name != "lambda" && name != "edge" {
				continue
			}
			for _, c := range cells(t, name, 0) {
				in := CellInput(c)
				if raceEnabled && c.Limit >= 100 && strings.HasPrefix(c.Name, "lambda/") {
					in = subset(in, seq(int(10_000/c.Limit))) // a million requests
				}
				r, d, first := replayWithReference(t, in)
				m.reports[c.Name] = r
				m.order = append(m.order, c.Name)
				m.diffs[c.Name], m.first[c.Name] = d, first
				m.requests += r.Requests
			}
		}
		matrix = m
	})
	if matrix.reports == nil {
		t.Fatal("the ci matrix failed to run")
	}
	return &matrix
}

// replayWithReference runs in and compares each production decision, in
// both modes, with refLimiter's. It returns the report, the number of
// differing decisions and the first of them.
func replayWithReference(t testing.TB, in Input) (*Report, int64, string) {
	refs := make([][2]refLimiter, in.Sources)
	for i := range refs {
		refs[i][0] = refLimiter{limit: uint64(in.Rule.Limit), period: uint64(in.Rule.Period), countBlocked: true}
		refs[i][1] = refLimiter{limit: uint64(in.Rule.Limit), period: uint64(in.Rule.Period)}
	}
	var diffs atomic.Int64
	var mu sync.Mutex
	first := ""
	opts := Options{observe: func(i int, at int64, all bool, adm window.Decision) {
		wantAll, wantAdm := refs[i][0].allow(at), refs[i][1].allow(at)
		if all != wantAll || adm.Allowed != wantAdm {
			if diffs.Add(1) == 1 {
				mu.Lock()
				first = fmt.Sprintf("%s source %d at %dµs: count-all %v, want %v; count-admitted %v, want %v",
					in.Name, i, at, all, wantAll, adm.Allowed, wantAdm)
				mu.Unlock()
			}
		}
	}}
	r := run(t, in, opts)
	mu.Lock()
	defer mu.Unlock()
	return r, diffs.Load(), first
}

// TestProductionEqualsIntegerReference requires the production store's
// decisions, as the replay makes them, to equal the integer reference's on
// every request of the ci matrix and the ci population, in both counting
// modes.
func TestProductionEqualsIntegerReference(t *testing.T) {
	m := ci(t)
	for _, name := range m.order {
		if d := m.diffs[name]; d != 0 {
			t.Errorf("%s: %d of %d requests decided differently from the integer reference; first: %s", name, d, m.reports[name].Requests, m.first[name])
		}
	}
	if pop := m.reports["population"]; pop == nil || pop.Sources != 2700 {
		t.Errorf("the ci population was not compared")
	}
	if want := map[bool]int64{false: 19_000_000, true: 8_000_000}[raceEnabled]; m.requests < want {
		t.Errorf("compared %d requests, want at least %d", m.requests, want)
	}
	t.Logf("%d requests in %d cells, both modes: 0 differences", m.requests, len(m.order))
}

// TestPoissonAverageDifference checks D1 against the analytic
// √(2/π)×(π/8)/√λ ≈ 0.313/√λ for Poisson sources of λ requests per period
// (derived in docs/accuracy.md, "What the numbers mean"), within ±6%
// relative, and that the estimate is
// unbiased: |bias| < 0.02×√λ.
func TestPoissonAverageDifference(t *testing.T) {
	const c = 0.31333 // √(2/π) × π/8
	m := ci(t)
	for _, name := range m.order {
		r := m.reports[name]
		if !strings.HasPrefix(name, "lambda/") {
			continue
		}
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
	rs := ci(t).reports
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

// TestAdversaryDoublesInOnePeriod replays the adversary docs/accuracy.md
// describes, in count-admitted mode: the store lets through about 2×L in one
// sliding period, the exact log never more than L, while both admit about L
// per period on average.
func TestAdversaryDoublesInOnePeriod(t *testing.T) {
	c := cells(t, "edge", 0)[0]
	r := ci(t).reports[c.Name]
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
		for _, name := range []string{"nearlimit", "clusters", "onoff", "diurnal"} {
			for _, c := range cells(t, name, seed) {
				if c.Limit != 10 { // the small cells: this test runs three times
					continue
				}
				in := CellInput(c)
				if raceEnabled {
					in = subset(in, seq(10))
				}
				rs = append(rs, run(t, in, Options{Workers: workers}))
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
// Under the race detector, which makes it about 20 times slower, it uses
// every eighth source and the heavy ones.
func TestStreamingEqualsInterleaved(t *testing.T) {
	c := cells(t, "population", 0)[0]
	in := CellInput(c)
	if raceEnabled {
		var keep []int
		for i := range c.Sources {
			if i%8 == 0 || c.Class(i) == trace.Heavy {
				keep = append(keep, i)
			}
		}
		in = subset(in, keep)
	}
	s := run(t, in, Options{})
	i := run(t, in, Options{Interleaved: true})
	if i.Store.Evicted != 0 || i.Store.Overflowed != 0 {
		t.Errorf("interleaved: the shared store evicted %d and overflowed %d, want 0", i.Store.Evicted, i.Store.Overflowed)
	}
	s.Store, i.Store = StoreReport{}, StoreReport{} // per-source stores vs one shared store
	streaming, interleaved := reportJSON(t, []*Report{s}), reportJSON(t, []*Report{i})
	if !bytes.Equal(streaming, interleaved) {
		t.Errorf("streaming and interleaved replays differ:\n%s\n%s", streaming, interleaved)
	}
	t.Logf("%d sources, %d requests: identical", s.Sources, s.Requests)
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// subset is in restricted to the sources keep, renumbered from 0.
func subset(in Input, keep []int) Input {
	out := in
	out.Sources = len(keep)
	out.times = func(i int, buf []int64) []int64 { return in.times(keep[i], buf) }
	out.class = func(i int) int { return in.class(keep[i]) }
	out.srcName = func(i int) string { return in.srcName(keep[i]) }
	return out
}

// TestPopulationSmoke checks the ci population (1%: 2,700 sources) against
// bounds around the full population's figures in docs/accuracy.md.
func TestPopulationSmoke(t *testing.T) {
	r := ci(t).reports["population"]
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
}

// nasa reads testdata/nasa_19950801.tsv.gz, an extract of the NASA-HTTP
// trace (provenance in testdata/README.md).
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
// asserts the counts exactly. They are the figures docs/accuracy.md quotes.
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
