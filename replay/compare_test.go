package replay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
)

// TestCompareKnownAnswer replays two sources with known answers through
// every algorithm, limit 4 per minute, buckets of 2:
//
//   - "edge" sends 10 requests 1ms before a period boundary and 10 at it:
//     a fixed window admits 4 and 4 more (8 within 1ms, twice the limit);
//     the sliding window and the exact log see the first 4 still inside
//     the period and admit none of the second 10; a bucket admits its
//     burst, 2, and finds nothing refilled 1ms later.
//   - "refill" sends 10 at the start of a period and 10 a quarter period
//     (15s) later: the windows admit 4 and then nothing (still the same
//     period); a bucket admits 2, then the 1 unit refilled in 15s at 4
//     per minute.
func TestCompareKnownAnswer(t *testing.T) {
	const sec = int64(time.Second / time.Microsecond)
	base := 1000 * 60 * sec // epoch-aligned: a period starts here
	burst := func(at int64) []int64 {
		ts := make([]int64, 10)
		for i := range ts {
			ts[i] = at
		}
		return ts
	}
	srcs := []Source{
		{Name: "edge", Times: append(burst(base+60*sec-1000), burst(base+60*sec)...)},
		{Name: "refill", Times: append(burst(base), burst(base+15*sec)...)},
	}
	in := SourcesInput("known", Rule{Name: "known", Limit: 4, Period: time.Minute}, srcs)
	c, err := Compare(context.Background(), in, 2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []CompareRow{
		{Algorithm: "exact", Requests: 40, Admitted: 8, Refused: 32, MostInPeriod: 4, MostInPeriodOverLimit: 1, MostInSecond: 4, SourcesLimited: 2},
		{Algorithm: "sliding_window", Requests: 40, Admitted: 8, Refused: 32, MostInPeriod: 4, MostInPeriodOverLimit: 1, MostInSecond: 4, SourcesLimited: 2},
		{Algorithm: "fixed_window", Requests: 40, Admitted: 12, Refused: 28, MostInPeriod: 8, MostInPeriodOverLimit: 2, MostInSecond: 8, SourcesLimited: 2},
		{Algorithm: "token_bucket", Burst: 2, Requests: 40, Admitted: 5, Refused: 35, MostInPeriod: 3, MostInPeriodOverLimit: 0.75, MostInSecond: 2, SourcesLimited: 2},
		{Algorithm: "leaky_bucket", Burst: 2, Requests: 40, Admitted: 5, Refused: 35, MostInPeriod: 3, MostInPeriodOverLimit: 0.75, MostInSecond: 2, SourcesLimited: 2},
	}
	if c.Requests != 40 || c.Sources != 2 || len(c.Rows) != len(want) {
		t.Fatalf("got %d requests, %d sources, %d rows; want 40, 2, %d", c.Requests, c.Sources, len(c.Rows), len(want))
	}
	for i, w := range want {
		if got := c.Rows[i]; got != w {
			t.Errorf("row %d:\ngot  %+v\nwant %+v", i, got, w)
		}
	}
	var b strings.Builder
	if err := WriteComparisons(&b, []*Comparison{c}); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"known: 40 requests from 2 sources, limit 4 per 60s",
		"fixed_window      -        12  28 (70.00%)",
		"token_bucket      2         5  35 (87.50%)",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("table has no line with %q:\n%s", line, b.String())
		}
	}
}

// TestReplayAlgorithm replays one source through each algorithm beside the
// exact log, with every request counted: a burst of 10 at the start of a
// period, limit 4, bucket burst 2. The store's denials follow the
// algorithm; the exact log's do not change.
func TestReplayAlgorithm(t *testing.T) {
	const sec = int64(time.Second / time.Microsecond)
	base := 1000 * 60 * sec
	times := make([]int64, 10)
	for i := range times {
		times[i] = base
	}
	tests := []struct {
		algorithm    algorithm.Algorithm
		burst        int64
		approxDenied int64
		wronglyLimit int64
		label        string
	}{
		{algorithm.SlidingWindow, 0, 6, 0, "4/60s"},
		{algorithm.FixedWindow, 0, 6, 0, "4/60s fixed_window"},
		{algorithm.TokenBucket, 2, 8, 2, "4/60s token_bucket burst 2"},
		{algorithm.TokenBucket, 0, 6, 0, "4/60s token_bucket burst 4"},
		{algorithm.LeakyBucket, 3, 7, 1, "4/60s leaky_bucket burst 3"},
	}
	for _, tt := range tests {
		t.Run(tt.label, func(t *testing.T) {
			rule := Rule{Name: "r", Algorithm: tt.algorithm, Limit: 4, Period: time.Minute, Burst: tt.burst}
			r := run(t, SourcesInput("one", rule, []Source{{Name: "s", Times: times}}), Options{})
			c := r.CountAll
			if c.ExactDenied != 6 || c.ApproxDenied != tt.approxDenied || c.WronglyLimited != tt.wronglyLimit || c.WronglyAllowed != 0 {
				t.Errorf("got exact denied %d, store denied %d, wrongly limited %d, wrongly allowed %d; want 6, %d, %d, 0",
					c.ExactDenied, c.ApproxDenied, c.WronglyLimited, c.WronglyAllowed, tt.approxDenied, tt.wronglyLimit)
			}
			if got := r.Rule.Algorithm; got != tt.algorithm.String() {
				t.Errorf("report's algorithm %q, want %q", got, tt.algorithm)
			}
			var b strings.Builder
			if err := WriteTable(&b, []*Report{r}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tt.label) {
				t.Errorf("table has no %q:\n%s", tt.label, b.String())
			}
		})
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range Algorithms {
		if got, err := ParseAlgorithm(a.String()); err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", a.String(), got, err, a)
		}
	}
	// TableRules reads a configuration's algorithms by name.
	for i, a := range []algorithm.Algorithm{algorithm.SlidingWindow, algorithm.FixedWindow, algorithm.TokenBucket, algorithm.LeakyBucket} {
		if got, err := ParseAlgorithm(a.String()); err != nil || got != Algorithms[i] {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", a, got, err, Algorithms[i])
		}
	}
	if _, err := ParseAlgorithm("quota"); err == nil || !strings.Contains(err.Error(), `unknown algorithm "quota"`) {
		t.Errorf("ParseAlgorithm(quota): got %v, want an unknown algorithm error", err)
	}
}
