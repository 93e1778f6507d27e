package trace

import (
	"math"
	"time"
)

// The population (docs/accuracy.md, "Headline"): a day of traffic under a
// rule of 100 requests per minute, so a source at the limit sends 144,000 a
// day.
const (
	popLimit      = 100
	popAtLimit    = popLimit * 24 * 60 // requests a day at ρ = 1
	popFullSize   = 270_000
	popHeavyShare = 0.00002 // 5 sources at full scale
	popAbuseShare = 0.0002  // 54 sources at full scale
)

// Population classes, in source index order.
const (
	Benign = iota
	Heavy
	Abusive
)

// populationCell is round(270,000×frac) sources in three classes, indexed
// benign first, then heavy, then abusive. Daily volumes within a class are
// stratified quantiles u = (j+0.5)/n of the class's distribution, so the
// volume mix is the same at every scale; the shape of each source's traffic
// is drawn from its own stream:
//
//	benign   truncated Pareto(α 1.2, 300 … 72,000) a day (ρ ≤ 0.5)
//	         u0 < 0.4 Poisson, < 0.8 page-load clusters, else diurnal ±80%
//	heavy    (0.5 + u) × 144,000 a day (ρ 0.5 … 1.5)
//	         u0 < 0.5 diurnal ±50%, else page-load clusters
//	abusive  truncated Pareto(α 1.5, 3 … 1000 × 144,000) a day
//	         u0 < 0.5 Poisson, else on/off
//
// Diurnal sources take their phase from their second draw, 2π×u1.
func populationCell(seed uint64, frac float64) *Cell {
	n := int(math.Round(popFullSize * frac))
	heavy := max(1, int(math.Round(float64(n)*popHeavyShare)))
	abusive := max(1, int(math.Round(float64(n)*popAbuseShare)))
	benign := n - heavy - abusive
	span := daySeconds * time.Second
	classOf := func(i int) (class, j, size int) {
		switch {
		case i < benign:
			return Benign, i, benign
		case i < benign+heavy:
			return Heavy, i - benign, heavy
		}
		return Abusive, i - benign - heavy, abusive
	}
	return &Cell{
		Name: "population", Limit: popLimit, Period: minute, Span: span, Sources: n,
		Classes: []string{"benign", "heavy", "abusive"},
		class:   func(i int) int { c, _, _ := classOf(i); return c },
		gen: func(i int, out []int64) []int64 {
			class, j, size := classOf(i)
			u := (float64(j) + 0.5) / float64(size)
			s := newStream(seed, uint64(i))
			u0 := s.uniform()
			us := span.Microseconds()
			switch class {
			case Benign:
				rate := truncParetoQuantile(u, 1.2, 300, popAtLimit/2) / daySeconds
				out = grow(out, rate, span)
				switch {
				case u0 < 0.4:
					return poisson(s, rate, us, out)
				case u0 < 0.8:
					return clusters(s, rate, us, out)
				}
				return diurnal(s, rate, 0.8, 2*math.Pi*s.uniform(), us, out)
			case Heavy:
				rate := (0.5 + u) * popAtLimit / daySeconds
				out = grow(out, rate, span)
				if u0 < 0.5 {
					return diurnal(s, rate, 0.5, 2*math.Pi*s.uniform(), us, out)
				}
				return clusters(s, rate, us, out)
			}
			rate := truncParetoQuantile(u, 1.5, 3*popAtLimit, 1000*popAtLimit) / daySeconds
			out = grow(out, rate, span)
			if u0 < 0.5 {
				return poisson(s, rate, us, out)
			}
			return onOff(s, rate, us, out)
		},
	}
}
