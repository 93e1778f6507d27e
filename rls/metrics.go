package rls

import (
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are labelled from the configuration only: the domain as a file
// names it and the entry's path in its tree ("key_value.key2", with a
// wildcard's pattern as written). A value a client sends never becomes a
// label, nor does a domain no file names ("unknown" counts those).

// Outcomes of one descriptor, the outcome label of
// edge_rls_descriptors_total.
const (
	outcomeOK        = iota // counted, within its limit
	outcomeOver             // counted, over its limit
	outcomeShadow           // over its limit in shadow_mode: answered OK
	outcomeUnlimited        // its entry is unlimited
	outcomeReplaced         // its limit was dropped by another's replaces
	outcomeNoLimit          // no entry with a limit matched
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "over_limit", "shadow_over_limit", "unlimited", "replaced", "no_limit"}

// Codes of a whole answer, the code label of edge_rls_requests_total.
const (
	codeOK = iota
	codeOver
	codeInvalid // refused INVALID_ARGUMENT, counting nothing
	numCodes
)

var codeNames = [numCodes]string{"ok", "over_limit", "invalid_argument"}

func codeOf(c pb.RateLimitResponse_Code) int {
	if c == pb.RateLimitResponse_OVER_LIMIT {
		return codeOver
	}
	return codeOK
}

type metrics struct {
	requests       *prometheus.CounterVec // domain, code
	descriptors    *prometheus.CounterVec // domain, descriptor, outcome
	unknownDomain  prometheus.Counter
	unknownInvalid prometheus.Counter // INVALID_ARGUMENT for a domain no file names
	unavailable    prometheus.Counter
}

// entryStats are one entry's descriptor counters, resolved once per
// configuration so that a decision does no label lookup.
type entryStats [numOutcomes]prometheus.Counter

func (es *entryStats) add(o int) { es[o].Inc() }

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_rls_requests_total",
			Help: "ShouldRateLimit calls answered, by domain and overall code.",
		}, []string{"domain", "code"}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_rls_descriptors_total",
			Help: "Descriptors decided, by domain, configuration entry and outcome.",
		}, []string{"domain", "descriptor", "outcome"}),
	}
	m.unknownDomain = m.requests.WithLabelValues("unknown", "ok")
	m.unknownInvalid = m.requests.WithLabelValues("unknown", codeNames[codeInvalid])
	m.unavailable = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "edge_rls_unavailable_total",
		Help: "ShouldRateLimit calls answered UNAVAILABLE because the shared counter store did not answer.",
	})
	if reg != nil {
		reg.MustRegister(m.requests, m.descriptors, m.unavailable)
	}
	return m
}

// attach resolves ds's counters: one set per entry with a limit, one for
// descriptors that match none.
func (m *metrics) attach(ds *domainState) {
	for c := range ds.requests {
		ds.requests[c] = m.requests.WithLabelValues(ds.Name, codeNames[c])
	}
	ds.noLimit = m.entry(ds.Name, "")
	var walk func([]*Descriptor)
	walk = func(es []*Descriptor) {
		for _, e := range es {
			if e.Limit != nil {
				ds.stats[e] = m.entry(ds.Name, e.Path)
			}
			walk(e.Children())
		}
	}
	walk(ds.Descriptors())
}

func (m *metrics) entry(domain, path string) *entryStats {
	var es entryStats
	for o := range es {
		es[o] = m.descriptors.WithLabelValues(domain, path, outcomeNames[o])
	}
	return &es
}
