package proxy

import (
	"net/http"
	"sync/atomic"

	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
)

// This file sheds load by priority (a domain's shed and priorities keys),
// as Stripe's fleet-usage load shedder does: a domain's requests in flight
// are bounded by max_in_flight, and as they near it the least important
// are refused first, sheddable ones, then normal ones, keeping a reserve
// that only critical requests may use.
//
// Shedding is decided after the rate rules, so that a client over its
// limit gets its 429 and a request refused for load gives back what the
// rules counted (giveBack, charge.go: limit keeps the tally open until
// then). It is decided as late as it can be: once the request is ready for
// the origin, its wait in a leaky bucket queue over and its body buffered
// (or, unbuffered, about to stream), so that "in flight" means sent to the
// origin and not yet finished: a slow client sending its body holds no
// slot. A request admitted holds its slot until ServeHTTP returns.

// shedRetryAfter is the Retry-After, in seconds, of a request refused for
// load: load changes from one second to the next.
var shedRetryAfter = []string{"1"}

// shedState is one domain's load shedding: its compiled thresholds and
// the count of its requests in flight, which a reload keeps (build) so
// that requests admitted before it still count.
type shedState struct {
	*rules.Shed
	inFlight *atomic.Int64
	gauge    prometheus.Gauge
	refused  [3]prometheus.Counter // by rules.Class
}

// newShedState returns d's shedding, continuing prev's count of requests
// in flight if prev had one; nil if the domain does not shed.
func (m *metrics) newShedState(rd *rules.Domain, prev *domain) *shedState {
	if rd.Shed == nil {
		return nil
	}
	s := &shedState{Shed: rd.Shed, inFlight: new(atomic.Int64), gauge: m.shedInFlight.WithLabelValues(rd.Name)}
	if prev != nil && prev.shed != nil {
		s.inFlight = prev.shed.inFlight
	}
	for c := range s.refused {
		s.refused[c] = m.shedRefused.WithLabelValues(rd.Name, rules.Class(c).String())
	}
	return s
}

// admit classifies r (to ex.host, at the cleaned path) and takes a slot
// for it if its class may have one, in one atomic step, so that no class
// passes its threshold however many requests arrive at once. For a
// request refused it makes ex.ans (shedAnswer). The caller writes it,
// gives back what the rules counted, and releases the slot of an admitted
// request (release) when it is done.
func (p *Proxy) admit(r *http.Request, ex *exchange, s *shedState, path string) bool {
	class := s.Classify(ex.host, r.Method, path, r.Header)
	limit := s.Limits[class]
	for {
		n := s.inFlight.Load()
		if n >= limit {
			break
		}
		if s.inFlight.CompareAndSwap(n, n+1) {
			s.gauge.Inc()
			return true
		}
	}
	s.refused[class].Inc()
	ex.ans.shedAnswer(class.String(), ex.form())
	return false
}

// release gives back an admitted request's slot.
func (s *shedState) release() {
	s.inFlight.Add(-1)
	s.gauge.Dec()
}
