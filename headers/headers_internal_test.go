package headers

import (
	"math"
	"strconv"
	"testing"
)

// TestAppendInt checks the fields' own decimal writer against strconv at
// every boundary it has and beyond.
func TestAppendInt(t *testing.T) {
	var ns []int64
	for n := int64(-20); n <= 10020; n++ {
		ns = append(ns, n)
	}
	ns = append(ns, 99999, 100000, math.MaxInt64, math.MinInt64)
	for _, n := range ns {
		if got, want := string(appendInt([]byte("x"), n)), "x"+strconv.FormatInt(n, 10); got != want {
			t.Fatalf("appendInt(%d) = %q, want %q", n, got, want)
		}
	}
}
