package proxy

import (
	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
	"github.com/prometheus/client_golang/prometheus"
)

// The live accuracy metric. A fixed sample of client keys (one in
// accuracy_sample, window.Sampled: the same keys on every node and in edge
// replay -sample) keeps, beside the window's two counters, an exact log of
// what the window counted for them in the last period; each decision on a
// sampled key is judged against that log (limit.go), and the verdicts are
// counted in edge_window_sampled_total and edge_window_misjudged_total.
// The unsampled path costs one hash of the key, without allocating
// (BenchmarkServeHTTP's unsampled case).

// sampleKeys bounds the keys one domain's sample logs at once; a log is
// 2 KiB (window.Log), so a domain's sample holds at most 2 MiB, allocated
// as sampled keys arrive. At 1 in 1000 a domain reaches it with about a
// million active keys, the default max_keys.
const sampleKeys = 1024

// judged reports whether the accuracy sample judges r's decisions: a
// sliding window's (the others count exactly what they define, with no
// estimate to misjudge), not a soft rule's (its refusals are draws), and
// not one that counts after the response (count_status,
// response_cost_header), whose units the sample cannot know when it judges.
func judged(r *rules.Rule) bool {
	return r.Algorithm == algorithm.SlidingWindow && !r.Soft && !r.CountsAfter()
}

// newSample makes d's accuracy sample over limits, its store's, and marks
// the rules it judges; nil if accuracy_sample is 0 or no rule is judged.
// carried says the store took counters over from a reload's old store:
// the sample's first logs then judge only from one period on.
func (p *Proxy) newSample(t *rules.Table, d *domain, limits []window.Limit, carried bool) (*window.Sample, error) {
	if t.AccuracySample == 0 {
		return nil, nil
	}
	some := false
	for i := range d.rules {
		rs := &d.rules[i]
		if judged(rs.Rule) {
			rs.judged, some = true, true
			rs.accuracy = p.metrics.accuracyCounters(d.Name, rs.Name)
		}
	}
	if !some {
		return nil, nil
	}
	return window.NewSample(window.SampleOptions{
		Every: t.AccuracySample, Keys: sampleKeys, Limits: limits, Cold: carried, Start: p.now(),
	})
}

// accuracyCounters are one rule's sample counters.
type accuracyCounters struct {
	sampled, allowed, limited prometheus.Counter
}

func (c accuracyCounters) observe(v window.Verdict) {
	switch v {
	case window.NotJudged:
		return
	case window.WronglyAllowed:
		c.allowed.Inc()
	case window.WronglyLimited:
		c.limited.Inc()
	}
	c.sampled.Inc()
}

func (m *metrics) accuracyCounters(domain, rule string) accuracyCounters {
	return accuracyCounters{
		sampled: m.sampled.WithLabelValues(domain, rule),
		allowed: m.misjudged.WithLabelValues(domain, rule, "allowed"),
		limited: m.misjudged.WithLabelValues(domain, rule, "limited"),
	}
}
