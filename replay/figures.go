package replay

import (
	"cmp"
	"fmt"
	"slices"
)

// This file gathers what edge-plot draws: the average difference by
// request rate (Options.ByRate) and the request-by-request course of
// chosen sources (Follow).

// A RateBin is the requests that saw an exact count N (the source's
// requests in the last period before them) in [Low, High), a power of two:
// the average difference at N requests per period, which for a Poisson
// source of λ requests per period, whose requests see N ≈ λ, is about
// 0.313/√λ (docs/accuracy.md).
type RateBin struct {
	Low  int64 `json:"low"`
	High int64 `json:"high"`
	// N is the bin's requests' mean exact count.
	N        float64 `json:"n"`
	Requests int64   `json:"requests"`
	// D1 is the bin's average difference, mean |E − N|/N (as
	// CountAll.D1).
	D1 float64 `json:"d1"`
}

// nBins is how many bins of N an acc keeps: N up to 2⁶³.
const nBins = 64

// nBin accumulates the requests of one RateBin.
type nBin struct {
	d1Sum    float64
	nSum     float64
	requests int64
}

// rateBins returns the non-empty bins of a.
func rateBins(a *acc) []RateBin {
	var out []RateBin
	for k, b := range a.byN {
		if b.requests == 0 {
			continue
		}
		out = append(out, RateBin{
			Low: 1 << k, High: 1 << (k + 1), N: b.nSum / float64(b.requests),
			Requests: b.requests, D1: b.d1Sum / float64(b.requests),
		})
	}
	return out
}

// A Point is one request of a followed source, in count-all mode
// (count_blocked: true): the exact count N and the window's estimate E
// of the source's earlier requests in the last period, and both
// limiters' decisions.
type Point struct {
	// At is the request's time in µs since the Unix epoch.
	At           int64   `json:"t_us"`
	Exact        int64   `json:"exact"`
	Estimate     float64 `json:"estimate"`
	Allowed      bool    `json:"allowed"`
	ExactAllowed bool    `json:"exact_allowed"`
}

// A SourceTrace is the course of one source through a replay.
type SourceTrace struct {
	Name          string  `json:"name"`
	Limit         int64   `json:"limit"`
	PeriodSeconds float64 `json:"period_seconds"`
	Points        []Point `json:"points"`
}

// Follow replays the sources of in named names, each alone, and records
// every request of theirs. A name in no source of in is an error; an
// adaptive input cannot be followed (its traffic answers the store).
func Follow(in Input, names []string) ([]SourceTrace, error) {
	if in.times == nil {
		return nil, fmt.Errorf("replay: %s: only recorded or non-adaptive synthetic sources can be followed", in.Name)
	}
	want := map[string]int{}
	for i, n := range names {
		want[n] = i
	}
	out := make([]SourceTrace, len(names))
	found := make([]bool, len(names))
	r := newRunner(in, Options{})
	for i := range in.Sources {
		j, ok := want[in.srcName(i)]
		if !ok || found[j] {
			continue
		}
		found[j] = true
		store, err := r.newStore(1)
		if err != nil {
			return nil, err
		}
		tr := &tracker{p: r.p, store: store}
		tr.reset(r.keys(store, i))
		st := SourceTrace{Name: names[j], Limit: in.Rule.Limit, PeriodSeconds: in.Rule.Period.Seconds()}
		for _, t := range in.times(i, nil) {
			allowed, _ := tr.step(t)
			st.Points = append(st.Points, Point{At: t, Exact: tr.lastN, Estimate: tr.lastEst, Allowed: allowed, ExactAllowed: tr.lastExact})
		}
		out[j] = st
	}
	for j, ok := range found {
		if !ok {
			return nil, fmt.Errorf("replay: %s: no source named %q", in.Name, names[j])
		}
	}
	return out, nil
}

// FollowChoice names up to n sources of rep, a report of in, worth
// following: the missed ones (over the limit, never refused by the
// window) and the wrongly limited ones (refused by the window, never over
// the limit), highest peak first, alternately; then, if that is fewer
// than n, those whose peak is nearest 1.1 times the limit, where the
// window misjudges most.
func FollowChoice(in Input, rep *Report, n int) []string {
	var out []string
	a, b := rep.CountAll.Missed, rep.CountAll.WronglyLimitedSources
	for i := 0; len(out) < n && (i < len(a) || i < len(b)); i++ {
		if i < len(a) {
			out = append(out, a[i].Name)
		}
		if i < len(b) && len(out) < n {
			out = append(out, b[i].Name)
		}
	}
	if len(out) >= n || len(rep.peaks) != in.Sources || in.srcName == nil {
		return out
	}
	target := 11 * rep.Rule.Limit / 10
	idx := make([]int, in.Sources)
	for i := range idx {
		idx[i] = i
	}
	dist := func(i int) int64 {
		d := rep.peaks[i] - target
		return max(d, -d)
	}
	slices.SortStableFunc(idx, func(x, y int) int { return cmp.Compare(dist(x), dist(y)) })
	for _, i := range idx {
		if len(out) == n {
			break
		}
		if name := in.srcName(i); !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// A Labelled is a report under a label, for a figure that sets two
// reports side by side (two algorithms, or two precisions).
type Labelled struct {
	Label  string  `json:"label"`
	Report *Report `json:"report"`
}

// PlotData is what edge replay -plot hands to edge-plot for one input:
// JSON in a file of its own.
type PlotData struct {
	// Command is the command line that made it, quoted under the figures.
	Command string `json:"command"`
	// Report is the replay's report, with ByRate.
	Report *Report `json:"report"`
	// Pair is two reports of the same traffic to set side by side.
	Pair [2]Labelled `json:"pair"`
	// Traces are the followed sources of Report.
	Traces []SourceTrace `json:"traces"`
}
