package replay

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/edgerate/edge/internal/algorithm"
)

// Report is the result of one replay. Fractions are in [0, 1]; the table
// printers show them as percentages.
type Report struct {
	Name string `json:"name"`
	// Precision is the store's precision, "standard" or "fine"
	// (algorithm.Precision); "standard" for every algorithm but the sliding
	// window.
	Precision string     `json:"precision"`
	Rule      RuleReport `json:"rule"`
	Sources   int        `json:"sources"`
	Requests  int64      `json:"requests"`
	// CountAll compares the two limiters when every request counts
	// (count_blocked: true).
	CountAll CountAll `json:"count_all"`
	// CountAdmitted compares them when only admitted requests count
	// (count_blocked: false).
	CountAdmitted CountAdmitted `json:"count_admitted"`
	// Peaks is the distribution over sources of their peak rate: the most
	// requests each sent in any sliding period.
	Peaks Peaks `json:"peaks"`
	// Classes breaks the figures down by source class, when the input has
	// classes.
	Classes []ClassReport `json:"classes,omitempty"`
	Store   StoreReport   `json:"store"`
	// Sample is what the proxy's accuracy sample would report for the
	// same traffic (Options.Sample); nil when not asked for.
	Sample *SampleReport `json:"sample,omitempty"`
	// ByRate is the average difference by the exact count each request
	// saw, in requests per period (Options.ByRate); nil when not asked
	// for, or for an algorithm without an estimate.
	ByRate []RateBin `json:"by_rate,omitempty"`

	peaks []int64 // per source, for Suggest
}

// SampleReport is what edge's accuracy sample (accuracy_sample: Every)
// reports for a replay's traffic, as edge_window_sampled_total and
// edge_window_misjudged_total would: over the sampled sources, the store's
// decisions judged against an exact log of what the store itself counted.
// In count-all mode that log is the exact log of CountAll, so the figures
// are CountAll's restricted to the sample; in count-admitted mode it holds
// what the store admitted, not what an exact limiter would have.
type SampleReport struct {
	Every    int   `json:"every"`
	Sources  int   `json:"sources"`
	Requests int64 `json:"requests"`
	// CountAll is a rule with count_blocked: true, CountAdmitted one with
	// count_blocked: false.
	CountAll      SampleCounts `json:"count_all"`
	CountAdmitted SampleCounts `json:"count_admitted"`
}

// SampleCounts are the verdicts of the sample's logs. Judged excludes
// requests decided by a mitigation and, for limits above window.LogUnits,
// those whose verdict the coarse log could not tell.
type SampleCounts struct {
	Judged            int64   `json:"judged"`
	WronglyAllowed    int64   `json:"wrongly_allowed"`
	WronglyLimited    int64   `json:"wrongly_limited"`
	MisjudgedFraction float64 `json:"misjudged_fraction"`
}

func sampleReport(a *acc, every int) *SampleReport {
	counts := func(s sampleAcc) SampleCounts {
		return SampleCounts{
			Judged: s.judged, WronglyAllowed: s.wronglyAllowed, WronglyLimited: s.wronglyLimited,
			MisjudgedFraction: frac(s.wronglyAllowed+s.wronglyLimited, s.judged),
		}
	}
	return &SampleReport{
		Every: every, Sources: a.sampled, Requests: a.sampleRequests,
		CountAll: counts(a.sample[ruleAll]), CountAdmitted: counts(a.sample[ruleAdmitted]),
	}
}

// RuleReport is the replayed rule.
type RuleReport struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	// Burst is a bucket's capacity; absent for a window.
	Burst             int64   `json:"burst,omitempty"`
	PeriodSeconds     float64 `json:"period_seconds"`
	MitigationSeconds float64 `json:"mitigation_seconds,omitempty"`
}

// CountAll is the request-by-request comparison when every request counts.
type CountAll struct {
	ExactDenied  int64 `json:"exact_denied"`
	ApproxDenied int64 `json:"approx_denied"`
	// WronglyAllowed counts requests the store allowed and the exact log
	// denied; WronglyLimited the reverse.
	WronglyAllowed         int64   `json:"wrongly_allowed"`
	WronglyLimited         int64   `json:"wrongly_limited"`
	WronglyAllowedFraction float64 `json:"wrongly_allowed_fraction"`
	WronglyLimitedFraction float64 `json:"wrongly_limited_fraction"`
	MisjudgedFraction      float64 `json:"misjudged_fraction"`
	// D1 is the average difference, mean |E − N|/N over requests with
	// N ≥ 1: Cloudflare's "average difference between real rate and the
	// approximate rate".
	D1 float64 `json:"d1"`
	// D2 is mean |E − N|/L over all requests: the difference relative to
	// the limit.
	D2 float64 `json:"d2"`
	// D3 is D1 over requests with N ≥ L/2, where decisions are made.
	D3 float64 `json:"d3"`
	// Bias is mean E − N, in requests.
	Bias float64 `json:"bias"`
	// CriticalShare is the share of requests with 0.8L ≤ N < 1.2L. The
	// misjudged fraction divided by it compares across traffic mixes.
	CriticalShare        float64 `json:"critical_share"`
	SourcesExactLimited  int     `json:"sources_exact_limited"`
	SourcesApproxLimited int     `json:"sources_approx_limited"`
	// MissedSources were denied at least once by the exact log and never by
	// the store; MissedMaxPeakOverLimit is the highest peak among them over
	// the limit (Cloudflare's "less than 15% above the threshold").
	MissedSources          int          `json:"missed_sources"`
	MissedMaxPeakOverLimit float64      `json:"missed_max_peak_over_limit"`
	Missed                 []SourcePeak `json:"missed,omitempty"`
	// WronglyLimitedCount is the number of sources the store denied at
	// least once and the exact log never did.
	WronglyLimitedCount   int          `json:"wrongly_limited_sources"`
	WronglyLimitedMaxPeak float64      `json:"wrongly_limited_max_peak_over_limit"`
	WronglyLimitedSources []SourcePeak `json:"wrongly_limited_list,omitempty"`
}

// CountAdmitted compares the limiters when each counts only what it
// admitted. Per-request disagreement depends on the path the two took
// (PathDependent); the admitted totals and the overshoot do not.
type CountAdmitted struct {
	AdmittedExact  int64 `json:"admitted_exact"`
	AdmittedApprox int64 `json:"admitted_approx"`
	// AdmittedRatio is AdmittedApprox / AdmittedExact.
	AdmittedRatio float64 `json:"admitted_ratio"`
	// OvershootApprox is the most requests the store admitted for one
	// source in any sliding period, over the limit; OvershootExact the
	// same for the exact log (at most 1).
	OvershootApprox float64 `json:"overshoot_approx"`
	OvershootExact  float64 `json:"overshoot_exact"`
	// MostInPeriodApprox and MostInPeriodExact are the same peaks in
	// requests: the most one source had admitted within any sliding period.
	MostInPeriodApprox int64 `json:"most_in_period_approx"`
	MostInPeriodExact  int64 `json:"most_in_period_exact"`
	// BurstApprox is the largest burst the store admitted: the most
	// requests one source had admitted within any second (any span of 1s,
	// not calendar seconds); BurstExact the same for the exact log.
	BurstApprox          int64 `json:"burst_approx"`
	BurstExact           int64 `json:"burst_exact"`
	SourcesExactLimited  int   `json:"sources_exact_limited"`
	SourcesApproxLimited int   `json:"sources_approx_limited"`
	PathDependent        bool  `json:"path_dependent"`
	WronglyAllowed       int64 `json:"wrongly_allowed"`
	WronglyLimited       int64 `json:"wrongly_limited"`
}

// ClassReport is the comparison restricted to one class of sources.
type ClassReport struct {
	Name          string        `json:"name"`
	Sources       int           `json:"sources"`
	Requests      int64         `json:"requests"`
	CountAll      CountAll      `json:"count_all"`
	CountAdmitted CountAdmitted `json:"count_admitted"`
}

// SourcePeak names a source and its peak: the most requests it sent in any
// sliding period.
type SourcePeak struct {
	Name          string  `json:"name"`
	Peak          int64   `json:"peak"`
	PeakOverLimit float64 `json:"peak_over_limit"`
}

// Peaks summarises per-source peaks (requests in one sliding period) by
// nearest rank.
type Peaks struct {
	P50  int64 `json:"p50"`
	P99  int64 `json:"p99"`
	P999 int64 `json:"p99_9"`
	Max  int64 `json:"max"`
}

// StoreReport says whether the store's capacity shaped the result.
type StoreReport struct {
	// Shared is true when one store held every source (Interleaved);
	// otherwise each source had a store of its own and nothing was evicted.
	Shared bool `json:"shared"`
	// Capacity is the shared store's capacity in sources (it holds two keys
	// per source); 0 when not shared.
	Capacity   int    `json:"capacity,omitempty"`
	Evicted    uint64 `json:"evicted"`
	Overflowed uint64 `json:"overflowed"`
	// FineFallback counts decisions of a Fine store made in two counters
	// because its pool of logs was full (window.Stats.FineFallback).
	FineFallback uint64 `json:"fine_fallback,omitempty"`
}

func pct(f float64) string {
	switch {
	case f == 0:
		return "0%"
	case f < 0.0001:
		return fmt.Sprintf("%.5f%%", 100*f)
	case f < 0.01:
		return fmt.Sprintf("%.3f%%", 100*f)
	}
	return fmt.Sprintf("%.2f%%", 100*f)
}

// WriteTable prints reports for people: one row per report and mode, and
// the per-source lists and class breakdown of each report below.
func WriteTable(w io.Writer, reports []*Report) error {
	fmt.Fprintln(w, "count-all (count_blocked: true; every request counts):")
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "replay\tlimit/period\tsources\trequests\texact denied\tapprox denied\twrongly allowed\twrongly limited\tmisjudged\tavg diff D1\tD2 (of L)\tbias\tmissed src (max peak/L)\twrongly limited src\t")
	for _, r := range reports {
		c := &r.CountAll
		fmt.Fprintf(tw, "%s\t%d/%s\t%d\t%d\t%d\t%d\t%d (%s)\t%d (%s)\t%s\t%s\t%s\t%s\t%d (%.2f)\t%d\t\n",
			label(r), r.Rule.Limit, ruleSuffix(r.Rule), r.Sources, r.Requests,
			c.ExactDenied, c.ApproxDenied,
			c.WronglyAllowed, pct(c.WronglyAllowedFraction), c.WronglyLimited, pct(c.WronglyLimitedFraction),
			pct(c.MisjudgedFraction), estimate(r.Rule, pct(c.D1)), estimate(r.Rule, pct(c.D2)), estimate(r.Rule, fmt.Sprintf("%+.3f", c.Bias)),
			c.MissedSources, c.MissedMaxPeakOverLimit, c.WronglyLimitedCount)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\ncount-admitted (count_blocked: false; only admitted requests count):")
	tw = tabwriter.NewWriter(w, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "replay\tlimit/period\tsources\trequests\tadmitted exact\tadmitted approx\tapprox/exact\tworst period approx (×L)\tworst period exact (×L)\tsrc limited exact\tsrc limited approx\t")
	for _, r := range reports {
		c := &r.CountAdmitted
		fmt.Fprintf(tw, "%s\t%d/%s\t%d\t%d\t%d\t%d\t%.4f\t%.2f\t%.2f\t%d\t%d\t\n",
			label(r), r.Rule.Limit, ruleSuffix(r.Rule), r.Sources, r.Requests,
			c.AdmittedExact, c.AdmittedApprox, c.AdmittedRatio, c.OvershootApprox, c.OvershootExact,
			c.SourcesExactLimited, c.SourcesApproxLimited)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range reports {
		if err := writeDetails(w, r); err != nil {
			return err
		}
	}
	return nil
}

func writeDetails(w io.Writer, r *Report) error {
	var b strings.Builder
	c := &r.CountAll
	if len(r.Classes) > 0 {
		fmt.Fprintf(&b, "\n%s by class (count-all):\n", label(r))
		tw := tabwriter.NewWriter(&b, 2, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "class\tsources\trequests\tmisjudged\twrongly allowed\twrongly limited\tavg diff D1\tmissed src (max peak/L)\twrongly limited src\tworst period admitted (×L)\t")
		for _, cl := range r.Classes {
			cc := &cl.CountAll
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%d (%.2f)\t%d\t%.2f\t\n", cl.Name, cl.Sources, cl.Requests,
				pct(cc.MisjudgedFraction), pct(cc.WronglyAllowedFraction), pct(cc.WronglyLimitedFraction),
				pct(cc.D1), cc.MissedSources, cc.MissedMaxPeakOverLimit, cc.WronglyLimitedCount,
				cl.CountAdmitted.OvershootApprox)
		}
		tw.Flush()
	}
	if len(c.Missed) > 0 || len(c.WronglyLimitedSources) > 0 {
		fmt.Fprintf(&b, "\n%s sources (count-all), highest peak first; peak = most requests in one sliding period:\n", label(r))
		for _, s := range c.Missed {
			fmt.Fprintf(&b, "  missed          %-40s peak %d (%.2f×L)\n", s.Name, s.Peak, s.PeakOverLimit)
		}
		if n := c.MissedSources - len(c.Missed); n > 0 {
			fmt.Fprintf(&b, "  missed          … and %d more\n", n)
		}
		for _, s := range c.WronglyLimitedSources {
			fmt.Fprintf(&b, "  wrongly limited %-40s peak %d (%.2f×L)\n", s.Name, s.Peak, s.PeakOverLimit)
		}
		if n := c.WronglyLimitedCount - len(c.WronglyLimitedSources); n > 0 {
			fmt.Fprintf(&b, "  wrongly limited … and %d more\n", n)
		}
	}
	fmt.Fprintf(&b, "\n%s: D3 (N ≥ L/2) %s, requests near the limit (0.8L ≤ N < 1.2L) %s, peak per source p50 %d p99 %d p99.9 %d max %d",
		label(r), estimate(r.Rule, pct(c.D3)), pct(c.CriticalShare), r.Peaks.P50, r.Peaks.P99, r.Peaks.P999, r.Peaks.Max)
	if s := r.Sample; s != nil {
		fmt.Fprintf(&b, "; accuracy sample 1 in %d: %d sources, %d requests, count-all misjudged %d of %d judged (%s: %d allowed, %d limited), count-admitted %d of %d (%s: %d allowed, %d limited)",
			s.Every, s.Sources, s.Requests,
			s.CountAll.WronglyAllowed+s.CountAll.WronglyLimited, s.CountAll.Judged, pct(s.CountAll.MisjudgedFraction), s.CountAll.WronglyAllowed, s.CountAll.WronglyLimited,
			s.CountAdmitted.WronglyAllowed+s.CountAdmitted.WronglyLimited, s.CountAdmitted.Judged, pct(s.CountAdmitted.MisjudgedFraction), s.CountAdmitted.WronglyAllowed, s.CountAdmitted.WronglyLimited)
	}
	if r.Store.FineFallback > 0 {
		fmt.Fprintf(&b, "; %d decisions near the limit in two counters (pool of logs full)", r.Store.FineFallback)
	}
	if r.Store.Shared && (r.Store.Evicted > 0 || r.Store.Overflowed > 0) {
		fmt.Fprintf(&b, "; store capacity %d sources: %d evicted, %d overflowed (these distort the comparison)",
			r.Store.Capacity, r.Store.Evicted, r.Store.Overflowed)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// label names a report in tables: its name, and "fine" after it for a
// store of Fine precision, so that the two precisions of one input read
// side by side.
func label(r *Report) string {
	if r.Precision == algorithm.Fine.String() {
		return r.Name + " fine"
	}
	return r.Name
}

// ruleSuffix is what follows the limit in a table's limit/period column:
// the period, and the algorithm when it is not the sliding window
// ("1m token_bucket burst 20").
func ruleSuffix(r RuleReport) string {
	s := seconds(r.PeriodSeconds)
	if r.Algorithm != "" && r.Algorithm != algorithm.SlidingWindow.String() {
		s += " " + r.Algorithm
	}
	if r.Burst > 0 {
		s += fmt.Sprintf(" burst %d", r.Burst)
	}
	return s
}

// estimate returns v for a rule counted by the sliding window's estimate,
// and "-" for the other algorithms, which have no estimate to measure.
func estimate(r RuleReport, v string) string {
	if r.Algorithm != "" && r.Algorithm != algorithm.SlidingWindow.String() {
		return "-"
	}
	return v
}

func seconds(s float64) string {
	if s == math.Trunc(s) {
		return fmt.Sprintf("%gs", s)
	}
	return fmt.Sprintf("%.3fs", s)
}
