package cluster

import (
	"math"
	"math/big"
	"testing"
)

func TestEvenShare(t *testing.T) {
	for _, tc := range []struct {
		name        string
		limit       int64
		nodes, want int
	}{
		{"zero limit", 0, 3, 0},
		{"divides", 99, 3, 33},
		{"rounds up", 100, 3, 34},
		{"more nodes than limit", 2, 10, 1},
		{"one node", 7, 1, 7},
		{"nodes below one", 7, 0, 7},
		{"huge", 1e18, 7, 142857142857142858},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EvenShare(tc.limit, tc.nodes); got != int64(tc.want) {
				t.Errorf("EvenShare(%d, %d) = %d, want %d", tc.limit, tc.nodes, got, tc.want)
			}
		})
	}
}

// exactQuantile sums Poisson probabilities in exact rational arithmetic
// (e^−λ to 60 digits): the reference for small λ.
func exactQuantile(t *testing.T, lambda *big.Rat, c float64) int64 {
	t.Helper()
	l, _ := lambda.Float64()
	emL := new(big.Float).SetPrec(200).SetFloat64(math.Exp(-l)) // one rounding, relative 1e-16
	cum := new(big.Float).SetPrec(200)
	term := new(big.Float).SetPrec(200).Set(emL)
	lf := new(big.Float).SetPrec(200).SetRat(lambda)
	target := new(big.Float).SetPrec(200).SetFloat64(c)
	for k := int64(0); k < 100000; k++ {
		cum.Add(cum, term)
		if cum.Cmp(target) >= 0 {
			return k
		}
		term.Mul(term, lf)
		term.Quo(term, new(big.Float).SetPrec(200).SetInt64(k+1))
	}
	t.Fatalf("no quantile for λ=%v", l)
	return 0
}

func TestPoissonQuantileExactForSmallLambda(t *testing.T) {
	// Known values: the 95% quantiles of Poisson(1), (5), (10) are 3, 9, 15.
	for _, tc := range []struct {
		lambda float64
		c      float64
		want   int64
	}{{1, 0.95, 3}, {5, 0.95, 9}, {10, 0.95, 15}, {0.5, 0.95, 2}, {100, 0.95, 117}} {
		if got := poissonQuantile(tc.lambda, tc.c); got != tc.want {
			t.Errorf("poissonQuantile(%v, %v) = %d, want %d", tc.lambda, tc.c, got, tc.want)
		}
	}
	for _, c := range []float64{0.05, 0.3, 0.5, 0.9, 0.95, 0.99, 0.999} {
		for num := int64(1); num <= 600; num += 7 {
			lambda := big.NewRat(num, 3)
			l, _ := lambda.Float64()
			want := exactQuantile(t, lambda, c)
			if got := poissonQuantile(l, c); got != want {
				t.Errorf("poissonQuantile(%v, %v) = %d, want %d (exact)", l, c, got, want)
			}
		}
	}
}

func TestPoissonQuantileLargeLambda(t *testing.T) {
	// Above λ ≈ 1e4 the Cornish-Fisher expansion of the quantile
	// (normal, skewness and continuity corrections) is within one of the
	// truth; the sum must agree with it there.
	for _, lambda := range []float64{1e4, 1e6, 3.3e7, 1e9} {
		for _, c := range []float64{0.5, 0.95, 0.99} {
			z := math.Sqrt2 * math.Erfinv(2*c-1)
			approx := lambda + z*math.Sqrt(lambda) + (z*z-1)/6 - 0.5
			got := poissonQuantile(lambda, c)
			if math.Abs(float64(got)-approx) > 1.5 {
				t.Errorf("poissonQuantile(%g, %v) = %d, want about %.1f", lambda, c, got, approx)
			}
		}
	}
}

func TestPoissonShare(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int64
		nodes int
		c     float64
		want  int64
	}{
		{"zero limit", 0, 3, 0.95, 0},
		{"one node takes the limit", 100, 1, 0.95, 100},
		{"three nodes", 30, 3, 0.95, 15},
		{"capped at the limit", 1, 2, 0.95, 1},
		{"ten nodes of 1000", 1000, 10, 0.95, 117},
		{"largest limit", 1e9, 1, 0.95, 1e9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PoissonShare(tc.limit, tc.nodes, tc.c); got != tc.want {
				t.Errorf("PoissonShare(%d, %d, %v) = %d, want %d", tc.limit, tc.nodes, tc.c, got, tc.want)
			}
		})
	}
}

func BenchmarkPoissonShare1e9(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		PoissonShare(2e9, 2, 0.95)
	}
}
