package replay

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/edgerate/edge/internal/algorithm"
)

// Algorithms are the algorithms a replay can count by, in the order
// Compare runs them.
var Algorithms = []algorithm.Algorithm{algorithm.SlidingWindow, algorithm.FixedWindow, algorithm.TokenBucket, algorithm.LeakyBucket}

// ParseAlgorithm returns the algorithm the configuration spells name
// ("token_bucket").
func ParseAlgorithm(name string) (algorithm.Algorithm, error) {
	for _, a := range Algorithms {
		if a.String() == name {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q; want sliding_window, fixed_window, token_bucket or leaky_bucket", name)
}

// A Comparison is one trace replayed through every algorithm under the
// same limit and period, each counting only what it admitted (the
// default, count_blocked: false), with the exact sliding log as the first
// row.
type Comparison struct {
	Name     string       `json:"name"`
	Rule     RuleReport   `json:"rule"`
	Sources  int          `json:"sources"`
	Requests int64        `json:"requests"`
	Rows     []CompareRow `json:"rows"`
}

// A CompareRow is what one algorithm did to the trace.
type CompareRow struct {
	// Algorithm is the algorithm's configuration name, or "exact" for the
	// exact sliding log.
	Algorithm string `json:"algorithm"`
	// Burst is a bucket's capacity; 0 for a window.
	Burst int64 `json:"burst,omitempty"`
	// Requests is what the sources sent: the same in every row, except
	// for a synthetic source that reacts to refusals.
	Requests int64 `json:"requests"`
	Admitted int64 `json:"admitted"`
	Refused  int64 `json:"refused"`
	// MostInPeriod is the most requests one source had admitted within any
	// sliding period; MostInPeriodOverLimit the same over the limit.
	MostInPeriod          int64   `json:"most_in_period"`
	MostInPeriodOverLimit float64 `json:"most_in_period_over_limit"`
	// MostInSecond is the largest burst admitted: the most requests one
	// source had admitted within any span of one second.
	MostInSecond int64 `json:"most_in_second"`
	// SourcesLimited is the number of sources refused at least once.
	SourcesLimited int `json:"sources_limited"`
}

// Compare replays in once per algorithm, with in.Rule's limit, period and
// mitigation, and burst as the buckets' capacity (0: the limit), and
// gathers the count-admitted figures of each. in.Rule's own algorithm and
// burst are not used. opts.Progress counts up to len(Algorithms) ×
// in.Sources.
func Compare(ctx context.Context, in Input, burst int64, opts Options) (*Comparison, error) {
	c := &Comparison{Name: in.Name, Sources: in.Sources}
	progress := opts.Progress
	for i, a := range Algorithms {
		if progress != nil {
			// Progress counts the sources of every replay.
			opts.Progress = func(done int) { progress(i*in.Sources + done) }
		}
		in.Rule.Algorithm, in.Rule.Burst = a, 0
		if a == algorithm.TokenBucket || a == algorithm.LeakyBucket {
			in.Rule.Burst = burst
		}
		r, err := Run(ctx, in, opts)
		if err != nil {
			return nil, err
		}
		ca := &r.CountAdmitted
		if i == 0 {
			c.Rule, c.Requests = r.Rule, r.Requests
			c.Rule.Algorithm = ""
			c.Rows = append(c.Rows, CompareRow{
				Algorithm:             "exact",
				Requests:              r.Requests,
				Admitted:              ca.AdmittedExact,
				Refused:               r.Requests - ca.AdmittedExact,
				MostInPeriod:          ca.MostInPeriodExact,
				MostInPeriodOverLimit: ca.OvershootExact,
				MostInSecond:          ca.BurstExact,
				SourcesLimited:        ca.SourcesExactLimited,
			})
		}
		c.Rows = append(c.Rows, CompareRow{
			Algorithm:             a.String(),
			Burst:                 r.Rule.Burst,
			Requests:              r.Requests,
			Admitted:              ca.AdmittedApprox,
			Refused:               r.Requests - ca.AdmittedApprox,
			MostInPeriod:          ca.MostInPeriodApprox,
			MostInPeriodOverLimit: ca.OvershootApprox,
			MostInSecond:          ca.BurstApprox,
			SourcesLimited:        ca.SourcesApproxLimited,
		})
	}
	return c, nil
}

// WriteComparisons prints comparisons for people: a table per input, one
// row per algorithm.
func WriteComparisons(w io.Writer, cs []*Comparison) error {
	for i, c := range cs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		requests := fmt.Sprintf("%d requests", c.Requests)
		for _, r := range c.Rows {
			if r.Requests != c.Requests {
				requests = "requests that depend on the answers (an adaptive source)"
			}
		}
		fmt.Fprintf(w, "%s: %s from %d sources, limit %d per %s, only admitted requests count:\n",
			c.Name, requests, c.Sources, c.Rule.Limit, seconds(c.Rule.PeriodSeconds))
		tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "algorithm\tburst\tadmitted\trefused\tmost in one period (×limit)\tmost in one second\tsources limited\t")
		for _, r := range c.Rows {
			burst := "-"
			if r.Burst > 0 {
				burst = fmt.Sprint(r.Burst)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d (%s)\t%d (%.2f)\t%d\t%d\t\n",
				r.Algorithm, burst, r.Admitted, r.Refused, pct(frac(r.Refused, r.Requests)),
				r.MostInPeriod, r.MostInPeriodOverLimit, r.MostInSecond, r.SourcesLimited)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
