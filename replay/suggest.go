package replay

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
)

// A Suggestion is a limit read off the history of a rule: the peak rate of
// the source at a chosen percentile, plus headroom, and what that limit
// would have done to the same traffic.
type Suggestion struct {
	Rule     RuleReport `json:"rule"`
	Sources  int        `json:"sources"`
	Requests int64      `json:"requests"`
	// Peaks is the distribution over sources of the most requests each sent
	// in any sliding period.
	Peaks      Peaks   `json:"peaks"`
	Percentile float64 `json:"percentile"`
	Headroom   float64 `json:"headroom"`
	// Limit is ⌈peak at Percentile × (1 + Headroom)⌉.
	Limit        int64 `json:"suggested_limit"`
	CountBlocked bool  `json:"count_blocked"`
	// BlockedSources and BlockedRequests are what the production window
	// would have blocked at Limit, counting as CountBlocked says.
	BlockedSources  int     `json:"blocked_sources"`
	BlockedRequests int64   `json:"blocked_requests"`
	BlockedFraction float64 `json:"blocked_fraction"`
}

// Suggest replays in to find each source's peak rate under in.Rule's
// period, picks the peak at percentile (0 < percentile ≤ 100) over sources,
// adds headroom (0.2 is 20%), and replays again at that limit to count what
// it would have blocked.
func Suggest(ctx context.Context, in Input, percentile, headroom float64, countBlocked bool, opts Options) (*Suggestion, error) {
	if !(percentile > 0 && percentile <= 100) {
		return nil, fmt.Errorf("replay: percentile must be in (0, 100], got %g", percentile)
	}
	if !(headroom >= 0) || math.IsInf(headroom, 0) {
		return nil, fmt.Errorf("replay: headroom must be at least 0, got %g", headroom)
	}
	first, err := Run(ctx, in, opts)
	if err != nil {
		return nil, err
	}
	sorted := slices.Clone(first.peaks)
	slices.Sort(sorted)
	at := rank(sorted, percentile/100)
	limit := max(int64(math.Ceil(float64(at)*(1+headroom))), 1)
	in.Rule.Limit = limit
	second, err := Run(ctx, in, opts)
	if err != nil {
		return nil, err
	}
	s := &Suggestion{
		Rule:         ruleReport(in.Rule),
		Sources:      first.Sources,
		Requests:     first.Requests,
		Peaks:        first.Peaks,
		Percentile:   percentile,
		Headroom:     headroom,
		Limit:        limit,
		CountBlocked: countBlocked,
	}
	if countBlocked {
		s.BlockedSources = second.CountAll.SourcesApproxLimited
		s.BlockedRequests = second.CountAll.ApproxDenied
	} else {
		s.BlockedSources = second.CountAdmitted.SourcesApproxLimited
		s.BlockedRequests = second.Requests - second.CountAdmitted.AdmittedApprox
	}
	s.BlockedFraction = frac(s.BlockedRequests, s.Requests)
	return s, nil
}

// WriteSuggestions prints suggestions for people, one row per rule.
func WriteSuggestions(w io.Writer, ss []*Suggestion) error {
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rule\tperiod\tsources\trequests\tpeak p50\tp99\tp99.9\tmax\tsuggested limit\tblocked sources\tblocked requests\t")
	for _, s := range ss {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d (p%g + %g%%)\t%d\t%d (%s)\t\n",
			s.Rule.Name, seconds(s.Rule.PeriodSeconds), s.Sources, s.Requests,
			s.Peaks.P50, s.Peaks.P99, s.Peaks.P999, s.Peaks.Max,
			s.Limit, s.Percentile, 100*s.Headroom, s.BlockedSources, s.BlockedRequests, pct(s.BlockedFraction))
	}
	return tw.Flush()
}
