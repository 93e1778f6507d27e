package cluster

import "math"

// Splits of a PoP-wide limit between nodes that decide alone, without
// Redis on the request path (LaunchDarkly's Floodgate). A client whose
// requests land at random on n nodes sends each node a Binomial(limit, 1/n)
// share of them, close to Poisson(limit/n); a node allowing only limit/n
// refuses that client in about half of the windows in which it sends
// exactly the limit, where a node allowing the Poisson quantile refuses it
// in at most 1 − confidence of them. docs/cluster.md has the measurement.

// EvenShare returns a node's share of limit when nodes nodes split it
// evenly: limit ÷ nodes rounded up, so the shares together are never
// below the limit. It returns 0 for a limit of 0 and treats nodes below 1
// as 1.
func EvenShare(limit int64, nodes int) int64 {
	if limit <= 0 {
		return 0
	}
	n := int64(max(nodes, 1))
	return (limit-1)/n + 1
}

// PoissonShare returns a node's share of limit when nodes nodes split it
// by the Poisson quantile: the smallest k whose Poisson(limit ÷ nodes)
// cumulative probability reaches confidence, never more than limit
// itself (a node alone never allows more than the PoP). confidence must
// be in (0, 1); it returns 0 for a limit of 0 and treats nodes below 1
// as 1.
//
// The quantile is exact for every λ = limit ÷ nodes up to 1e9: the
// probabilities are summed around the mode, each term relative to the
// mode's (so nothing underflows or overflows, however large λ), over
// λ ± (12√λ + 30), outside which the mass is below 1e-30; the partial sum
// is divided by the total, so a scale error in the terms cancels. That is
// about 24√λ terms: 760,000 at λ = 1e9, a few milliseconds, computed when
// a rule is compiled or the node count changes, never per request.
func PoissonShare(limit int64, nodes int, confidence float64) int64 {
	if limit <= 0 {
		return 0
	}
	if nodes <= 1 {
		return limit
	}
	k := poissonQuantile(float64(limit)/float64(nodes), confidence)
	return min(k, limit)
}

// poissonQuantile returns the smallest k with P(X ≤ k) ≥ c for X ~
// Poisson(lambda), lambda > 0, 0 < c < 1.
func poissonQuantile(lambda, c float64) int64 {
	mode := math.Floor(lambda)
	span := math.Ceil(12*math.Sqrt(lambda)) + 30
	lo := max(mode-span, 0)
	hi := mode + span
	// w(j) = P(X = j) / P(X = mode): going down from the mode,
	// w(j−1) = w(j)·j/λ; going up, w(j+1) = w(j)·λ/(j+1). Below the
	// mode the terms are summed from the smallest up (Kahan), so the
	// cumulative sum at k is the mass below plus the terms mode..k.
	below := make([]float64, 0, int(mode-lo)) // w(mode−1), w(mode−2), …, w(lo)
	w := 1.0
	for j := mode; j > lo; j-- {
		w *= j / lambda
		below = append(below, w)
	}
	var mass kahan
	for i := len(below) - 1; i >= 0; i-- {
		mass.add(below[i])
	}
	var total kahan
	total.add(mass.sum)
	w = 1.0
	for j := mode; j <= hi; j++ {
		total.add(w)
		w *= lambda / (j + 1)
	}
	target := c * total.sum
	w = 1.0
	for j := mode; j <= hi; j++ {
		mass.add(w)
		if j == mode && mass.sum-w >= target {
			// the quantile is below the mode: walk back down.
			return quantileBelow(below, mode, mass.sum-w, target)
		}
		if mass.sum >= target {
			return int64(j)
		}
		w *= lambda / (j + 1)
	}
	return int64(hi)
}

// quantileBelow finds the quantile when it lies below the mode: cum is
// P(X ≤ mode−1) (relative), and below[i] = w(mode−1−i).
func quantileBelow(below []float64, mode, cum, target float64) int64 {
	for i, w := range below {
		// cum is P(X ≤ mode−1−i); if P(X ≤ mode−2−i) is under target,
		// mode−1−i is the smallest k reaching it.
		if cum-w < target {
			return int64(mode) - 1 - int64(i)
		}
		cum -= w
	}
	return int64(mode) - int64(len(below))
}

// kahan is a compensated sum: adding a million terms loses no more than
// a few units in the last place.
type kahan struct{ sum, comp float64 }

func (k *kahan) add(x float64) {
	y := x - k.comp
	t := k.sum + y
	k.comp = (t - k.sum) - y
	k.sum = t
}
