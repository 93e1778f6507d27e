package trace

import (
	"math"
	"math/rand/v2"
	"slices"
)

// stream is one source's random numbers: a PCG generator seeded with
// (scenario seed, source index), read through fixed formulas. The
// convenience methods of rand.Rand are avoided on purpose: their algorithms
// are not promised stable across Go releases, and a trace must not change
// when the toolchain does.
type stream struct{ pcg rand.PCG }

func newStream(seed, index uint64) *stream {
	s := &stream{}
	s.pcg.Seed(seed, index)
	return s
}

// uniform returns a float64 in [0, 1) from the top 53 bits of one draw.
func (s *stream) uniform() float64 { return float64(s.pcg.Uint64()>>11) * 0x1p-53 }

// exp returns an exponential variate of mean 1.
func (s *stream) exp() float64 { return -math.Log1p(-s.uniform()) }

// pareto returns a Pareto(alpha, xm) variate.
func (s *stream) pareto(alpha, xm float64) float64 {
	return xm / math.Pow(1-s.uniform(), 1/alpha)
}

// truncParetoQuantile is the u-quantile of a Pareto(alpha, xm) truncated at
// xmax.
func truncParetoQuantile(u, alpha, xm, xmax float64) float64 {
	return xm / math.Pow(1-u*(1-math.Pow(xm/xmax, alpha)), 1/alpha)
}

const usPerSecond = 1e6

// poisson appends the arrivals of a Poisson process of rate requests per
// second over [0, span) µs to out.
func poisson(s *stream, rate float64, span int64, out []int64) []int64 {
	if rate <= 0 {
		return out
	}
	mean := usPerSecond / rate
	end := float64(span)
	for t := s.exp() * mean; t < end; t += s.exp() * mean {
		out = append(out, int64(t))
	}
	return out
}

// On/off source parameters: ON periods Pareto(1.5) with mean 10 s, OFF
// periods Pareto(1.2) with mean 50 s, so the duty cycle is 1/6.
const (
	onAlpha, onMean   = 1.5, 10 * usPerSecond
	offAlpha, offMean = 1.2, 50 * usPerSecond
)

// onOff appends an on/off source of mean rate requests per second: Poisson
// at 6×rate while ON. The process starts u×(mean ON + mean OFF) before 0, so
// that time 0 falls at a random phase of a cycle.
func onOff(s *stream, rate float64, span int64, out []int64) []int64 {
	if rate <= 0 {
		return out
	}
	onXm := onMean * (onAlpha - 1) / onAlpha
	offXm := offMean * (offAlpha - 1) / offAlpha
	gap := usPerSecond / (6 * rate)
	end := float64(span)
	t := -s.uniform() * (onMean + offMean)
	for t < end {
		stop := min(t+s.pareto(onAlpha, onXm), end)
		for x := t + s.exp()*gap; x < stop; x += s.exp() * gap {
			if x >= 0 {
				out = append(out, int64(x))
			}
		}
		t = stop + s.pareto(offAlpha, offXm)
	}
	return out
}

// Page-load clusters: a click brings 1 + Geometric requests (another one
// follows with probability 6/7, so 7 on average) spaced by exponential gaps
// of mean 200 ms.
const (
	clusterMean   = 7
	clusterGapMux = 200e3 // µs
)

// clusters appends a page-load source of mean rate requests per second.
func clusters(s *stream, rate float64, span int64, out []int64) []int64 {
	if rate <= 0 {
		return out
	}
	start := len(out)
	mean := usPerSecond * clusterMean / rate
	end := float64(span)
	for t := s.exp() * mean; t < end; t += s.exp() * mean {
		out = append(out, int64(t))
		x := t
		for s.uniform() >= 1.0/clusterMean {
			if x += s.exp() * clusterGapMux; x < end {
				out = append(out, int64(x))
			}
		}
	}
	slices.Sort(out[start:])
	return out
}

const daySeconds = 86400

// diurnal appends a Poisson source whose rate follows the day:
// rate×(1 + amp×sin(2πt/1d + phase)), by thinning a process at rate×(1+amp).
func diurnal(s *stream, rate, amp, phase float64, span int64, out []int64) []int64 {
	if rate <= 0 {
		return out
	}
	peak := rate * (1 + amp)
	mean := usPerSecond / peak
	end := float64(span)
	for t := s.exp() * mean; t < end; t += s.exp() * mean {
		lam := rate * (1 + amp*math.Sin(2*math.Pi*t/(daySeconds*usPerSecond)+phase))
		if s.uniform()*peak < lam {
			out = append(out, int64(t))
		}
	}
	return out
}
