// Package trace makes request traces to replay through a rate limiter:
// seeded synthetic sources, and readers for access logs.
//
// A trace is a set of sources (clients, keys); a source is an ascending list
// of arrival times in integer microseconds. Synthetic times count from the
// Unix epoch, so that a period of W starts at every multiple of W, as the
// production window's epoch-aligned periods do; log times are Unix times.
//
// # Determinism
//
// Every synthetic source is generated on its own: source i of a scenario
// draws from rand.NewPCG(seed, stream) where stream names the cell and the
// source, through fixed formulas (uniform = top 53 bits × 2⁻⁵³, exponential
// = −log1p(−u), Pareto by inversion). A source's times therefore do not
// depend on which other sources are generated, in which order, or on how
// many goroutines do it: the same seed gives the same trace at any
// GOMAXPROCS, on one architecture and Go release (math.Log1p, Pow and Sin
// are pure Go on amd64 but may use FMA elsewhere).
//
// docs/accuracy.md describes the scenarios, the population and what their
// figures mean; the exact formulas, and every choice they involve, are
// written next to the code.
package trace

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Scale is the size of a synthetic scenario.
type Scale int

const (
	// CI runs in seconds, inside go test.
	CI Scale = iota
	// Medium is the full matrix with fewer sources per cell, and the
	// population at 10%.
	Medium
	// Full is the published size: the population is 270,000 sources and
	// about 390 million requests over a day.
	Full
)

// String returns the flag spelling: ci, medium or full.
func (s Scale) String() string {
	switch s {
	case CI:
		return "ci"
	case Medium:
		return "medium"
	case Full:
		return "full"
	}
	return "Scale(" + strconv.Itoa(int(s)) + ")"
}

// ParseScale parses ci, medium or full.
func ParseScale(s string) (Scale, error) {
	for _, sc := range []Scale{CI, Medium, Full} {
		if s == sc.String() {
			return sc, nil
		}
	}
	return 0, fmt.Errorf("scale: must be ci, medium or full, got %q", s)
}

// A Cell is one experiment of a scenario: a rule (Limit per Period) and the
// sources sent at it over Span. Its sources are generated on demand, one at
// a time, so that a cell of 400 million requests never has to be held in
// memory. A Cell is immutable and safe for concurrent use.
type Cell struct {
	// Name identifies the cell within its scenario, such as
	// "poisson/L=10/rho=0.5".
	Name string
	// Limit is the rule's number of requests per Period.
	Limit int64
	// Period is the rule's window length.
	Period time.Duration
	// Span is how long the trace lasts; every time is in [0, Span).
	Span time.Duration
	// Sources is the number of sources.
	Sources int
	// Classes names the classes sources belong to (the population's benign,
	// heavy and abusive); nil when there is one class.
	Classes []string

	gen   func(i int, out []int64) []int64
	class func(i int) int
	probe func(try Try) []int64
}

// Times appends the arrival times of source i (in µs after the epoch,
// ascending) to out and returns it. It panics for an adaptive cell, whose
// sources exist only in a dialogue with a limiter (see Probe).
func (c *Cell) Times(i int, out []int64) []int64 {
	if c.gen == nil {
		panic("trace: Times on an adaptive cell " + c.Name)
	}
	return c.gen(i, out)
}

// Class returns the index in Classes of source i's class; 0 when the cell
// has one class.
func (c *Cell) Class(i int) int {
	if c.class == nil {
		return 0
	}
	return c.class(i)
}

// Adaptive reports whether the cell's sources react to the limiter's
// decisions; generate them with Probe, not Times.
func (c *Cell) Adaptive() bool { return c.probe != nil }

// Try sends one request at t (µs) and reports whether the limiter admitted
// it and, if not, how long until it would admit the next one.
type Try func(t int64) (allowed bool, retryAfter time.Duration)

// Probe generates the single source of an adaptive cell, sending each of its
// requests through try in time order, and returns their times.
func (c *Cell) Probe(try Try) []int64 {
	if c.probe == nil {
		panic("trace: Probe on a non-adaptive cell " + c.Name)
	}
	return c.probe(try)
}

// Default seeds, one per scenario: a run without -seed replays the traces
// docs/accuracy.md quotes.
var defaultSeeds = map[string]uint64{
	"poisson": 1, "onoff": 2, "clusters": 3, "diurnal": 4, "nearlimit": 5,
	"edge": 6, "lambda": 7, "population": 11,
}

// Scenarios lists the scenario names Scenario accepts, in a fixed order.
func Scenarios() []string {
	return []string{"poisson", "lambda", "nearlimit", "onoff", "clusters", "diurnal", "edge", "population"}
}

// DefaultSeed returns a scenario's default seed, and false for an unknown
// name.
func DefaultSeed(name string) (uint64, bool) {
	s, ok := defaultSeeds[name]
	return s, ok
}

// Scenario returns the cells of a named synthetic scenario at a scale:
//
//   - poisson: Poisson sources, limit L ∈ {10, 100, 1000} per minute, at
//     rate ρ×L per minute for ρ from 0.25 to 4; 200 sources × 100 minutes
//     per cell (50 at medium; ci: L ∈ {10, 100}, ρ ∈ {0.5, 1, 2}, 50).
//   - lambda: Poisson sources at exactly the limit, λ requests per minute,
//     for the average difference as a function of λ (ci: λ ∈ {25, 100,
//     400}), 200 sources × 100 minutes.
//   - nearlimit: Poisson sources spread evenly over ρ ∈ [0.8, 1.2].
//   - onoff: bursty sources, ON and OFF periods Pareto-distributed (means
//     10 s and 50 s), ρ ∈ {0.5, 1, 2, 4}; 200 sources × 1000 minutes.
//   - clusters: page loads, 7 requests on average 200 ms apart per click.
//   - diurnal: Poisson sources whose rate swings ±80% over a day.
//   - edge: the adversary (adaptive): it waits for the last millisecond of
//     one period to send as much as the limiter admits, then sends whenever
//     the limiter admits through the next period, and so on.
//   - population: 270,000 sources over a day under 100 per minute, most far
//     below the limit, a few far above, a handful near it (scaled to 10% at
//     medium, 1% at ci).
func Scenario(name string, seed uint64, scale Scale) ([]*Cell, error) {
	if scale < CI || scale > Full {
		return nil, fmt.Errorf("scale: unknown %v", scale)
	}
	perCell := map[Scale]int{CI: 50, Medium: 50, Full: 200}[scale]
	limits := []int64{10, 100, 1000}
	if scale == CI {
		limits = []int64{10, 100}
	}
	var cells []*Cell
	add := func(c *Cell) { cells = append(cells, c) }
	switch name {
	case "poisson":
		rhos := []float64{0.25, 0.5, 0.8, 0.9, 1, 1.1, 1.2, 1.5, 2, 4}
		if scale == CI {
			rhos = []float64{0.5, 1, 2}
		}
		for _, l := range limits {
			for _, rho := range rhos {
				add(rateCell(seed, len(cells), fmt.Sprintf("poisson/L=%d/rho=%g", l, rho), l, perCell, 100, rho, poisson))
			}
		}
	case "lambda":
		lambdas := []int64{10, 25, 27, 50, 100, 400, 1000}
		if scale == CI {
			lambdas = []int64{25, 100, 400}
		}
		for _, l := range lambdas {
			add(rateCell(seed, len(cells), fmt.Sprintf("lambda/L=%d", l), l, 200, 100, 1, poisson))
		}
	case "nearlimit":
		for _, l := range limits {
			add(nearLimitCell(seed, len(cells), l, perCell))
		}
	case "onoff", "clusters":
		rhos := []float64{0.5, 1, 2, 4}
		windows := 1000
		if scale == CI {
			rhos, windows = []float64{1}, 200
		}
		gen := onOff
		if name == "clusters" {
			gen = clusters
		}
		for _, l := range limits {
			for _, rho := range rhos {
				add(rateCell(seed, len(cells), fmt.Sprintf("%s/L=%d/rho=%g", name, l, rho), l, perCell, windows, rho, gen))
			}
		}
	case "diurnal":
		keys := map[Scale]int{CI: 20, Medium: 50, Full: 100}[scale]
		dl := limits
		if scale == CI {
			dl = []int64{10}
		}
		for _, l := range dl {
			add(diurnalCell(seed, len(cells), l, keys))
		}
	case "edge":
		windows := map[Scale]int{CI: 20, Medium: 100, Full: 100}[scale]
		add(edgeCell(100, windows))
	case "population":
		add(populationCell(seed, map[Scale]float64{CI: 0.01, Medium: 0.1, Full: 1}[scale]))
	default:
		return nil, fmt.Errorf("synthetic: unknown scenario %q; want one of %s", name, strings.Join(Scenarios(), ", "))
	}
	return cells, nil
}

// minute is the period of every synthetic rule.
const minute = time.Minute

// streamID separates the random streams of a scenario's cells: cell c's
// source i draws from stream c<<32 | i, so cell 0's source i uses stream i.
func streamID(cell, source int) uint64 { return uint64(cell)<<32 | uint64(source) }

// rateCell is a cell of sources from one generator at ρ times the limit.
func rateCell(seed uint64, idx int, name string, limit int64, sources, windows int, rho float64,
	gen func(*stream, float64, int64, []int64) []int64) *Cell {
	span := time.Duration(windows) * minute
	rate := rho * float64(limit) / minute.Seconds()
	return &Cell{
		Name: name, Limit: limit, Period: minute, Span: span, Sources: sources,
		gen: func(i int, out []int64) []int64 {
			return gen(newStream(seed, streamID(idx, i)), rate, span.Microseconds(), grow(out, rate, span))
		},
	}
}

// nearLimitCell is Poisson sources at ρ spread evenly over [0.8, 1.2].
func nearLimitCell(seed uint64, idx int, limit int64, sources int) *Cell {
	span := 100 * minute
	return &Cell{
		Name: fmt.Sprintf("nearlimit/L=%d", limit), Limit: limit, Period: minute, Span: span, Sources: sources,
		gen: func(i int, out []int64) []int64 {
			rho := 0.8 + 0.4*(float64(i)+0.5)/float64(sources)
			rate := rho * float64(limit) / minute.Seconds()
			return poisson(newStream(seed, streamID(idx, i)), rate, span.Microseconds(), grow(out, rate, span))
		},
	}
}

// diurnalCell is sources at the limit on average, ±80% over the day, each
// with its own phase 2π×i/sources.
func diurnalCell(seed uint64, idx int, limit int64, sources int) *Cell {
	span := daySeconds * time.Second
	rate := float64(limit) / minute.Seconds()
	return &Cell{
		Name: fmt.Sprintf("diurnal/L=%d/rho=1", limit), Limit: limit, Period: minute, Span: span, Sources: sources,
		gen: func(i int, out []int64) []int64 {
			phase := 2 * math.Pi * float64(i) / float64(sources)
			return diurnal(newStream(seed, streamID(idx, i)), rate, 0.8, phase, span.Microseconds(), grow(out, rate, span))
		},
	}
}

// edgeTick is the adversary's clock resolution.
const edgeTick = 1000 // µs

// edgeCell is the adversary that docs/accuracy.md describes under
// count-admitted mode (2 × L admitted in one sliding period). In even periods
// it waits until the last tick and then sends until the limiter refuses; in
// odd periods it sends from the start, and after each refusal waits for the
// limiter's own Retry-After (rounded up to a tick) before trying again. It
// knows the algorithm, so it never wastes more than one request per refusal.
func edgeCell(limit int64, windows int) *Cell {
	span := time.Duration(windows) * minute
	period := minute.Microseconds()
	return &Cell{
		Name: fmt.Sprintf("edge/L=%d", limit), Limit: limit, Period: minute, Span: span, Sources: 1,
		probe: func(try Try) []int64 {
			var out []int64
			for w := int64(0); w < int64(windows); w++ {
				ws, end := w*period, (w+1)*period
				t := ws
				if w%2 == 0 {
					t = end - edgeTick
				}
				for t < end {
					out = append(out, t)
					ok, retry := try(t)
					if ok {
						continue
					}
					wait := (retry.Microseconds() + edgeTick) / edgeTick * edgeTick
					if w%2 == 0 {
						break
					}
					t += wait
				}
			}
			return out
		},
	}
}

// grow returns out with room for the expected number of arrivals plus a
// margin, to avoid repeated growth of a source's slice.
func grow(out []int64, rate float64, span time.Duration) []int64 {
	n := rate*span.Seconds()*1.05 + 64
	if n > 1<<28 {
		n = 1 << 28
	}
	if cap(out)-len(out) < int(n) {
		out = append(make([]int64, 0, len(out)+int(n)), out...)
	}
	return out
}
