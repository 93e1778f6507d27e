package proxy

import (
	"context"
	"math"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// recentSeconds is how many seconds of per-second figures the status page
// can show: the ring keeps recentSeconds+1 samples of each counter, the
// differences of neighbours being the figures.
const recentSeconds = 300

// recentSlots is the ring's length in samples.
const recentSlots = recentSeconds + 1

// counterRing is one counter's value at each sample of the ring:
// recentSlots × 8 bytes, 2408 bytes.
type counterRing [recentSlots]float64

// domainRing is one domain's sampled counters: requests served and
// blocked (edge_requests_total), origin responses (every code class),
// those with no response (code_class error) and 5xx, the sum of their
// latencies (edge_upstream_request_duration_seconds), and requests decided
// without Redis (edge_store_fallback_requests_total). 7 rings, 16856 bytes.
type domainRing struct {
	served, blocked, upstream, upstreamErrors, upstream5xx, latencySum, fallback counterRing
	rules                                                                        map[string]*ruleRing
}

// ruleRing is one rule's sampled decisions (edge_rule_decisions_total):
// allowed, limited (soft_limited for a soft rule) and mitigated. 3 rings,
// 7224 bytes.
type ruleRing struct {
	allowed, limited, mitigated counterRing
}

// recent holds the last recentSeconds of per-second figures of every
// domain and rule, for the status page. It reads the very counters that
// /metrics exports, once a second (Proxy.Record), so the page and a
// Prometheus query over the same seconds agree. Memory is fixed per
// domain and rule (see domainRing and ruleRing); a domain or rule that a
// reload removes is dropped at the next sample. Safe for concurrent use.
type recent struct {
	mu      sync.Mutex
	times   [recentSlots]time.Time // when each slot was sampled
	head    int                    // the newest slot
	n       int                    // slots filled, at most recentSlots
	domains map[string]*domainRing
}

// domainSample and ruleSample are the counters' values read for one
// sample, before the ring's lock is taken.
type domainSample struct {
	name                                                                         string
	served, blocked, upstream, upstreamErrors, upstream5xx, latencySum, fallback float64
	rules                                                                        []ruleSample
}

type ruleSample struct {
	name                        string
	allowed, limited, mitigated float64
}

// counterValue reads a counter's value as /metrics would export it; 0 for
// nil (a counter the configuration does not have).
func counterValue(c prometheus.Counter) float64 {
	if c == nil {
		return 0
	}
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// histogramValue reads a histogram's count and sum of observations.
func histogramValue(o prometheus.Observer) (count, sum float64) {
	h, ok := o.(prometheus.Metric)
	if !ok {
		return 0, 0
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		return 0, 0
	}
	return float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()
}

// sample reads the counters of every domain and rule of st.
func sample(st *state) []domainSample {
	out := make([]domainSample, 0, len(st.domains))
	for _, d := range st.domains {
		ds := domainSample{
			name:     d.Name,
			served:   counterValue(d.requests.served),
			blocked:  counterValue(d.requests.blocked),
			fallback: counterValue(d.requests.fallback),
		}
		if d.upstreamObs != nil {
			for class, o := range d.upstreamObs {
				n, s := histogramValue(o)
				ds.upstream += n
				ds.latencySum += s
				switch class {
				case 4:
					ds.upstream5xx = n
				case 5:
					ds.upstreamErrors = n
				}
			}
		}
		for _, rs := range d.rules {
			ds.rules = append(ds.rules, ruleSample{
				name:      rs.Name,
				allowed:   counterValue(rs.outcomes.allowed),
				limited:   counterValue(rs.outcomes.limited),
				mitigated: counterValue(rs.outcomes.mitigated),
			})
		}
		out = append(out, ds)
	}
	return out
}

// put stores v at slot i of r; a ring just made (fresh) takes v in every
// slot, so that its figures before it existed are 0.
func (r *counterRing) put(i int, v float64, fresh bool) {
	if fresh {
		for j := range r {
			r[j] = v
		}
		return
	}
	r[i] = v
}

// record stores samples taken at now as the ring's newest slot. A sample
// not later than the newest is ignored, so figures never run backwards.
func (rc *recent) record(now time.Time, samples []domainSample) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.n > 0 && !now.After(rc.times[rc.head]) {
		return
	}
	if rc.domains == nil {
		rc.domains = make(map[string]*domainRing)
	}
	if rc.n > 0 {
		rc.head = (rc.head + 1) % recentSlots
	}
	rc.n = min(rc.n+1, recentSlots)
	i := rc.head
	rc.times[i] = now
	seen := make(map[string]bool, len(samples))
	for _, s := range samples {
		seen[s.name] = true
		d, ok := rc.domains[s.name]
		if !ok {
			d = &domainRing{rules: make(map[string]*ruleRing)}
			rc.domains[s.name] = d
		}
		d.served.put(i, s.served, !ok)
		d.blocked.put(i, s.blocked, !ok)
		d.upstream.put(i, s.upstream, !ok)
		d.upstreamErrors.put(i, s.upstreamErrors, !ok)
		d.upstream5xx.put(i, s.upstream5xx, !ok)
		d.latencySum.put(i, s.latencySum, !ok)
		d.fallback.put(i, s.fallback, !ok)
		rulesSeen := make(map[string]bool, len(s.rules))
		for _, rsmp := range s.rules {
			rulesSeen[rsmp.name] = true
			r, ok := d.rules[rsmp.name]
			if !ok {
				r = &ruleRing{}
				d.rules[rsmp.name] = r
			}
			r.allowed.put(i, rsmp.allowed, !ok)
			r.limited.put(i, rsmp.limited, !ok)
			r.mitigated.put(i, rsmp.mitigated, !ok)
		}
		for name := range d.rules {
			if !rulesSeen[name] {
				delete(d.rules, name)
			}
		}
	}
	for name := range rc.domains {
		if !seen[name] {
			delete(rc.domains, name)
		}
	}
}

// Record samples every domain's and rule's counters at now, the newest of
// the figures GET /v1/status shows. RunRecorder calls it once a second.
func (p *Proxy) Record(now time.Time) {
	p.recent.record(now, sample(p.state.Load()))
}

// RunRecorder calls Record every second, with the Proxy's clock, until ctx
// is done.
func (p *Proxy) RunRecorder(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	p.Record(p.now())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.Record(p.now())
		}
	}
}

// statusView is GET /v1/status: the build, the uptime, and the last
// seconds of per-second figures of every domain and rule, oldest first.
// Times[i] is the end of the interval of every series' [i]; totals are the
// counters' values at the newest sample, as /metrics showed them then.
type statusView struct {
	Version       string             `json:"version"`
	GoVersion     string             `json:"go_version"`
	StartedAt     time.Time          `json:"started_at"`
	UptimeSeconds float64            `json:"uptime_seconds"`
	Times         []float64          `json:"times"` // Unix seconds
	Domains       []domainStatusView `json:"domains"`
	// ConnectionsRefused are the connections the connection limits
	// refused since start, by reason (connections.go).
	ConnectionsRefused map[string]float64 `json:"connections_refused"`
	// TLS is the HTTPS listener's certificates and handshakes; absent
	// when edge serves no TLS.
	TLS *tlsStatusView `json:"tls,omitempty"`
}

type domainStatusView struct {
	Name string `json:"name"`
	// Per second: requests served and blocked, origin responses, failed
	// forwards (no response), 5xx responses, decisions without Redis.
	Served         []float64 `json:"served"`
	Blocked        []float64 `json:"blocked"`
	Upstream       []float64 `json:"upstream_responses"`
	UpstreamErrors []float64 `json:"upstream_errors"`
	Upstream5xx    []float64 `json:"upstream_5xx"`
	Fallback       []float64 `json:"fallback"`
	// UpstreamLatency is the mean time to the origin's response headers
	// over each second, null for a second without one.
	UpstreamLatency []*float64       `json:"upstream_latency_seconds"`
	Totals          domainTotals     `json:"totals"`
	Rules           []ruleStatusView `json:"rules"`
}

type domainTotals struct {
	Served          float64 `json:"served"`
	Blocked         float64 `json:"blocked"`
	Upstream        float64 `json:"upstream_responses"`
	UpstreamErrors  float64 `json:"upstream_errors"`
	Upstream5xx     float64 `json:"upstream_5xx"`
	UpstreamLatency float64 `json:"upstream_latency_seconds_sum"`
	Fallback        float64 `json:"fallback"`
	// Answered counts the other answers edge made itself, by outcome
	// name, as edge_requests_total does (answer.go).
	Answered map[string]float64 `json:"answered"`
}

type ruleStatusView struct {
	Name      string     `json:"name"`
	Allowed   []float64  `json:"allowed"`
	Limited   []float64  `json:"limited"`
	Mitigated []float64  `json:"mitigated"`
	Totals    ruleTotals `json:"totals"`
	// SlotsInUse is a concurrency rule's requests in flight now, over all
	// its keys, as edge_concurrency_slots_in_use exports it; absent for
	// the other algorithms.
	SlotsInUse *int64 `json:"slots_in_use,omitempty"`
	// ResetsAt is when a quota's calendar period ends and every key's
	// count starts again at 0; absent for the other algorithms.
	ResetsAt *time.Time `json:"resets_at,omitempty"`
}

type ruleTotals struct {
	Allowed   float64 `json:"allowed"`
	Limited   float64 `json:"limited"`
	Mitigated float64 `json:"mitigated"`
}

// perSecond is r's figures over the last n intervals of the ring, whose
// slots (oldest first) are idx and sampling times times: each the counter's
// increase over its interval divided by the interval's length. An increase
// below 0 is a counter that started again from 0 (its series was deleted
// by a reload and made again): its value is the increase, as Prometheus's
// rate() takes it.
func (r *counterRing) perSecond(idx []int, secs []float64) []float64 {
	out := make([]float64, len(idx)-1)
	for k := 1; k < len(idx); k++ {
		d := r[idx[k]] - r[idx[k-1]]
		if d < 0 {
			d = r[idx[k]]
		}
		out[k-1] = round3(d / secs[k-1])
	}
	return out
}

// view returns the last seconds intervals (fewer when the ring holds fewer)
// of the domains of st, in configuration order, with the state of their
// rules at now.
func (rc *recent) view(st *state, seconds int, now time.Time) (times []float64, domains []domainStatusView) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := min(seconds+1, rc.n)
	idx := make([]int, n)
	for k := range n {
		idx[k] = (rc.head - (n - 1 - k) + recentSlots) % recentSlots
	}
	var secs []float64
	times = []float64{}
	for k := 1; k < n; k++ {
		secs = append(secs, rc.times[idx[k]].Sub(rc.times[idx[k-1]]).Seconds())
		times = append(times, float64(rc.times[idx[k]].UnixMilli())/1e3)
	}
	domains = []domainStatusView{}
	for _, d := range st.domains {
		dr, ok := rc.domains[d.Name]
		if !ok || n == 0 {
			continue
		}
		last := idx[n-1]
		dv := domainStatusView{
			Name:           d.Name,
			Served:         dr.served.perSecond(idx, secs),
			Blocked:        dr.blocked.perSecond(idx, secs),
			Upstream:       dr.upstream.perSecond(idx, secs),
			UpstreamErrors: dr.upstreamErrors.perSecond(idx, secs),
			Upstream5xx:    dr.upstream5xx.perSecond(idx, secs),
			Fallback:       dr.fallback.perSecond(idx, secs),
			Totals: domainTotals{
				Served: dr.served[last], Blocked: dr.blocked[last], Upstream: dr.upstream[last],
				UpstreamErrors: dr.upstreamErrors[last], Upstream5xx: dr.upstream5xx[last],
				UpstreamLatency: dr.latencySum[last], Fallback: dr.fallback[last],
				Answered: answeredTotals(d),
			},
			UpstreamLatency: make([]*float64, 0, len(secs)),
			Rules:           []ruleStatusView{},
		}
		for k := 1; k < n; k++ {
			count := dr.upstream[idx[k]] - dr.upstream[idx[k-1]]
			sum := dr.latencySum[idx[k]] - dr.latencySum[idx[k-1]]
			if count <= 0 || sum < 0 {
				dv.UpstreamLatency = append(dv.UpstreamLatency, nil)
				continue
			}
			mean := round3(sum / count)
			dv.UpstreamLatency = append(dv.UpstreamLatency, &mean)
		}
		for _, rs := range d.rules {
			rr, ok := dr.rules[rs.Name]
			if !ok {
				continue
			}
			rv := ruleStatusView{
				Name:      rs.Name,
				Allowed:   rr.allowed.perSecond(idx, secs),
				Limited:   rr.limited.perSecond(idx, secs),
				Mitigated: rr.mitigated.perSecond(idx, secs),
				Totals:    ruleTotals{Allowed: rr.allowed[last], Limited: rr.limited[last], Mitigated: rr.mitigated[last]},
			}
			switch rs.Algorithm {
			case algorithm.Concurrency:
				n := d.slotsInUse(rs.Index)
				rv.SlotsInUse = &n
			case algorithm.Quota:
				end := quotaEnd(rs.Rule, now)
				rv.ResetsAt = &end
			}
			dv.Rules = append(dv.Rules, rv)
		}
		domains = append(domains, dv)
	}
	return times, domains
}

// round3 rounds v to 3 decimals: a ticker's second is not exactly 1 s,
// and 39.970325590 requests per second says no more than 39.97.
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// getStatus serves GET /v1/status?seconds=120 (1 to 300; 300 when left
// out).
func (p *Proxy) getStatus(w http.ResponseWriter, r *http.Request) {
	seconds, ok := queryInt(w, r, "seconds", recentSeconds, recentSeconds)
	if !ok {
		return
	}
	now := p.now()
	v := statusView{
		Version: p.version, GoVersion: runtime.Version(),
		StartedAt: p.startedAt.UTC(), UptimeSeconds: now.Sub(p.startedAt).Seconds(),
	}
	v.Times, v.Domains = p.recent.view(p.state.Load(), seconds, now)
	v.ConnectionsRefused = map[string]float64{
		RefusedPerClient: counterValue(p.metrics.connsRefusedPerClient),
		RefusedRate:      counterValue(p.metrics.connsRefusedRate),
	}
	v.TLS = p.tlsStatus(now)
	writeJSON(w, http.StatusOK, v)
}

// quotaEnd is when the calendar period of quota r holding now ends, in
// UTC.
func quotaEnd(r *rules.Rule, now time.Time) time.Time {
	_, end := window.Limit{Limit: 1, Algorithm: algorithm.Quota, Reset: r.Reset, Location: r.Location}.QuotaPeriod(now)
	return end.UTC()
}

// answeredTotals reads d's counts of the answers edge made itself, by
// outcome.
func answeredTotals(d *domain) map[string]float64 {
	out := make(map[string]float64, len(answeredOutcomes))
	for _, o := range answeredOutcomes {
		out[o] = counterValue(d.requests.answered[o])
	}
	return out
}
