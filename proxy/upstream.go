package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/headers"
	"github.com/edgerate/edge/origin"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
)

// A domain's server groups (rules.Upstream: its routes', and its own)
// made live: the servers' state is package origin's (origin.Upstream),
// which both request paths go through: the net/http path's transport
// (upstreamTransport, here) and the fast forward (fastforward.go). This
// file turns each compiled group into the origin component's options,
// observes it in metrics, and answers a request that no server could
// take (when_down). Which group a request goes to is the route step's
// (route.go).

// serverGroup is one of a domain's groups of servers, made live: a
// route's, or the domain's own.
type serverGroup struct {
	// route is the route whose requests the group takes; nil for the
	// domain's own origins. name is its name, "" for the domain's own:
	// the route label of the origin metrics.
	route *rules.Route
	name  string
	up    *rules.Upstream
	// origins are the servers' live state.
	origins *origin.Upstream
	// fast is the group for the fast forward; nil where it does not
	// apply (fastOriginFor).
	fast *fastOrigin
	// tls is the live state of the group's origin_tls (origintls.go);
	// nil for http or h2c servers.
	tls *groupTLS
	// base is the first server's URL, whose path every server of the
	// group shares: the request's path is joined to it (forward.go).
	base *url.URL
}

// group returns d's group named name ("" the domain's own), or nil.
func (d *domain) group(name string) *serverGroup {
	for _, g := range d.groups {
		if g.name == name {
			return g
		}
	}
	return nil
}

// newGroups makes d's groups, its routes' and then its own, in st,
// keeping the state of the servers that stay in the group of the same
// name in prev's (a reload), and the TLS state of old (origintls.go).
// When a server of any group has a max_in_flight, the groups share the
// domain's origin queue (originQueue).
func (p *Proxy) newGroups(d *domain, prev *domain, st, old *state) error {
	if err := p.originQueue(d, prev); err != nil {
		return err
	}
	add := func(route *rules.Route, name string, up *rules.Upstream) error {
		var was *serverGroup
		if prev != nil {
			was = prev.group(name)
		}
		gt := st.originTLS(up, old) // origintls.go
		var rt http.RoundTripper    // the shared transport's
		if gt != nil && gt.transport != nil && p.ownTransport {
			rt = gt.transport
		}
		g, err := p.newGroup(d.Name, route, name, up, was, rt, groupShared{drains: d.drains, queue: d.originQueue})
		if err != nil {
			return err
		}
		g.tls = gt
		d.groups = append(d.groups, g)
		return nil
	}
	for _, r := range d.Routes {
		if err := add(r, r.Name, r.Upstream); err != nil {
			return err
		}
	}
	if d.Upstream != nil {
		return add(nil, "", d.Upstream)
	}
	return nil
}

// originQueue makes d's origin queue, when a server of any of its groups
// has a max_in_flight: prev's (the domain a reload replaces), with the
// requests waiting in it, while its options stay.
func (p *Proxy) originQueue(d *domain, prev *domain) error {
	limited := func(up *rules.Upstream) bool {
		return up != nil && slices.ContainsFunc(up.Servers, func(s rules.OriginServer) bool { return s.MaxInFlight > 0 })
	}
	if !limited(d.Upstream) && !slices.ContainsFunc(d.Routes, func(r *rules.Route) bool { return limited(r.Upstream) }) {
		return nil
	}
	qo := origin.QueueOptions{Max: d.OriginQueue.Max, Timeout: d.OriginQueue.Timeout}
	if prev != nil && prev.originQueue != nil && prev.originQueue.Options() == qo {
		d.originQueue = prev.originQueue
	} else if q, err := origin.NewQueue(qo); err != nil {
		return fmt.Errorf("proxy: domain %q: %w", d.Name, err)
	} else {
		d.originQueue = q
	}
	m := p.metrics
	d.busy = [2]prometheus.Counter{m.originBusy.WithLabelValues(d.Name, "full"), m.originBusy.WithLabelValues(d.Name, "timeout")}
	return nil
}

// groupShared is what every group of a domain shares: its drains
// (drain.go) and its origin queue (nil for none).
type groupShared struct {
	drains *origin.Drains
	queue  *origin.Queue
}

// newGroup makes the group of domain's route (nil and name "": the
// domain's own) from its compiled upstream, keeping the state of the
// servers that stay in prev's (nil for none).
func (p *Proxy) newGroup(domain string, route *rules.Route, name string, ru *rules.Upstream, prev *serverGroup, transport http.RoundTripper, shared groupShared) (*serverGroup, error) {
	opts := origin.UpstreamOptions{
		Balance: origin.Balance(ru.Balance), // the same order (TestBalanceNames)
		Retries: origin.RetryOptions{Attempts: ru.Retries.Attempts, On: originFailures(ru.Retries.On), Budget: ru.Retries.Budget},
	}
	if ps := ru.Passive; ps != nil {
		opts.Passive = &origin.PassiveOptions{MaxFails: ps.MaxFails, FailWindow: ps.FailWindow, EjectFor: ps.EjectFor, On: originFailures(ps.On)}
	}
	if prev != nil {
		opts.Previous = prev.origins
	}
	opts.Drains, opts.Queue = shared.drains, shared.queue // the domain's, for every group of it
	for _, s := range ru.Servers {
		opts.Servers = append(opts.Servers, origin.ServerOptions{URL: s.URL, Name: s.Name, Weight: s.Weight,
			MaxInFlight: s.MaxInFlight, Transport: transport})
	}
	m := p.metrics
	opts.OnEject = func(s *origin.Server, reason string) {
		p.originWarn("origin server ejected", "domain", domain, "route", name, "server", s.Name, "reason", reason)
	}
	opts.OnPanic = func() {
		m.originPanics.WithLabelValues(domain, name).Inc()
		p.originWarn("origin group in panic mode: fewer than half its servers are healthy, balancing over all", "domain", domain, "route", name)
	}
	hist := make(map[*origin.Server]prometheus.Observer)
	opts.OnResponse = func(s *origin.Server, status int, took time.Duration) {
		if o := hist[s]; o != nil {
			o.Observe(took.Seconds())
		}
	}
	g, err := origin.NewUpstream(opts)
	if err != nil {
		if route != nil {
			return nil, fmt.Errorf("proxy: domain %q: route %q: %w", domain, name, err)
		}
		return nil, fmt.Errorf("proxy: domain %q: %w", domain, err)
	}
	for _, s := range g.Servers() {
		hist[s] = m.originSeconds.WithLabelValues(domain, name, s.Name)
	}
	return &serverGroup{route: route, name: name, up: ru, origins: g, base: ru.Servers[0].URL}, nil
}

// originFailures is a rules failure set as origin's (the bits name the
// same failures, in the same order: TestFailureBits).
func originFailures(f rules.Failures) origin.Failure { return origin.Failure(f) }

// checks returns the active checks of st's groups.
func (st *state) checks() []origin.Check {
	var out []origin.Check
	for _, d := range st.domains {
		for _, g := range d.groups {
			out = g.checks(out)
		}
	}
	return out
}

// checks appends the active checks of g's servers to out.
func (g *serverGroup) checks(out []origin.Check) []origin.Check {
	h := g.up.Health
	if h == nil {
		return out
	}
	expect := append([]rules.StatusRange(nil), h.Expect...)
	o := origin.CheckOptions{Path: h.Path, Host: h.Host, Interval: h.Interval, Timeout: h.Timeout,
		HealthyAfter: h.HealthyAfter, UnhealthyAfter: h.UnhealthyAfter,
		Expect: func(status int) bool {
			for _, r := range expect {
				if status >= r.Min && status <= r.Max {
					return true
				}
			}
			return false
		}}
	spelled := fmt.Sprint(expect)
	for _, s := range g.origins.Servers() {
		out = append(out, origin.Check{Server: s, Options: o, Expect: spelled})
	}
	return out
}

// hashes reports whether g chooses its servers by a key of the request
// (balance hash), which the request is then identified for.
func (g *serverGroup) hashes() bool { return g != nil && g.up.Balance == rules.BalanceHash }

// groupKey returns ex's key for its group, a hash group (nil for other
// policies), appended to b.
func groupKey(b []byte, ex *exchange) []byte {
	if !ex.group.hashes() {
		return nil
	}
	return rules.AppendKey(b, ex.group.up.HashKey, &ex.src)
}

// errOriginDown wraps the failure of a request that no server could
// take: every try failed to connect, or every server is drained
// (origin.ErrDrained).
type errOriginDown struct{ err error }

// noServer is the error of a trip whose group offered no server for its
// next try, after lastErr: errOriginDown of origin.ErrDrained when no try
// was made (every server drained), else lastErr, the last try's.
func noServer(trip *origin.Trip, lastErr error) error {
	if trip.Tries == 0 {
		return errOriginDown{origin.ErrDrained}
	}
	return lastErr
}

func (e errOriginDown) Error() string { return "no origin server could be reached: " + e.err.Error() }
func (e errOriginDown) Unwrap() error { return e.err }

// downAnswer makes a the answer to a request no server of g could take:
// when_down's, or else 502 (g nil: 502), and 503 when the servers are
// drained (an operator's order, not a failure of theirs: docs/origins.md,
// "Drain").
func downAnswer(a *answer, g *serverGroup, drained bool) {
	wd := (*rules.WhenDown)(nil)
	if g != nil {
		wd = g.up.WhenDown
	}
	why := ": no origin server could be reached\n"
	if drained {
		why = ": no origin server is in rotation\n"
	}
	if wd == nil {
		status := http.StatusBadGateway
		if drained {
			status = http.StatusServiceUnavailable
		}
		a.textAnswer(status, outcomeOriginDown, strings.ToLower(http.StatusText(status))+why)
		return
	}
	a.reset(wd.Status, outcomeOriginDown)
	if wd.RetryAfter > 0 {
		vals, from := startMade(a.vals, fieldRetryAfter)
		vals = headers.AppendRetryAfter(vals, wd.RetryAfter)
		a.vals = a.endMade(vals, fieldRetryAfter, from)
	}
	a.text(strconv.Itoa(wd.Status) + " " + http.StatusText(wd.Status) + why)
}

// busyAnswer makes a the answer to a request of d that no server took,
// every one that could being at its max_in_flight (err: origin.ErrBusy,
// or ErrQueueTimeout after its wait): 503 with Retry-After 1, as load
// shedding answers, counted by reason.
func busyAnswer(a *answer, d *domain, err error) {
	a.textAnswer(http.StatusServiceUnavailable, outcomeOriginBusy,
		"service unavailable: every origin server is at its limit of requests in flight; retry in 1s\n")
	a.set(fieldRetryAfter, retryAfterOne)
	a.set(fieldCacheControl, noStore)
	if d != nil && d.busy[0] != nil {
		reason := 0
		if errors.Is(err, origin.ErrQueueTimeout) {
			reason = 1
		}
		d.busy[reason].Inc()
	}
}

// upstreamTransport carries the net/http path's requests to the group
// the route step chose (exchange.group): each try on a server the group
// chooses, retried on another where the group allows it, each observed
// (the domain's latency histogram, the origin component's counts) and
// its connection watched (origin.WithWatch).
type upstreamTransport struct {
	d  *domain
	rt http.RoundTripper // for servers without a transport of their own
}

func (t upstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	d := t.d
	ex := exchangeOf(req.Context())
	// Every forward of the domain's carries its exchange (serve.go), with
	// the group chosen.
	g := ex.group.origins
	// The group decides by the request's one reading of the clock; tries
	// are timed by the wall clock, as the latency histograms are.
	now := ex.now
	var kb [128]byte
	trip := g.Start(now, groupKey(kb[:0], ex))
	// A 1xx passed on to the client is a response byte sent: no retry
	// after it.
	var interim atomic.Bool
	ctx := httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(int, textproto.MIMEHeader) error { interim.Store(true); return nil },
	})
	idempotent := origin.Idempotent(req.Method)
	bodyless, whole := !hasBody(req), ex.body != nil && bufferedWhole(ex.body)
	// A body buffered whole is sent again from its buffer: ReverseProxy's
	// body, closed by the failed try, reads no more.
	var replay []byte
	if whole {
		replay = ex.body.r.(*prefixReader).buf
	}
	var lastErr error
	if ex.logged() {
		defer ex.noteLeft(connLeaver(req.Context()))
	}
	for {
		s, err := trip.Next(waitContext(req, ex), now)
		if err != nil {
			if !errors.Is(err, origin.ErrBusy) {
				err = errLeftQueue{err}
			}
			return nil, err
		}
		if s == nil {
			return nil, noServer(&trip, lastErr)
		}
		out := req.WithContext(ctx)
		if trip.Tries > 1 && replay != nil {
			out.Body = io.NopCloser(bytes.NewReader(replay))
		}
		u := *req.URL
		u.Scheme, u.Host = s.URL.Scheme, s.URL.Host
		out.URL = &u
		rt := s.Transport()
		if rt == nil {
			rt = t.rt
		}
		start := time.Now()
		out, w := origin.WithWatch(out)
		resp, err := rt.RoundTrip(out)
		end := time.Now()
		status, f := tryResult(resp, err)
		endTry(&trip, d.upstreamObs, ex, s, status, f, end.Sub(start), now)
		safe := !interim.Load() && (idempotent || f == origin.FailConnect) &&
			(bodyless || whole && f == origin.FailConnect)
		if trip.MayRetry(f, safe, now) {
			if resp != nil {
				resp.Body.Close()
			}
			lastErr = err
			continue
		}
		if err != nil {
			if f == origin.FailConnect {
				err = errOriginDown{err}
			}
			return nil, err
		}
		w.Answered(resp)
		return resp, nil
	}
}

// waitContext is what ends a wait for a server below its max_in_flight
// besides its timeout: the client's leaving, as for a leaky bucket's turn
// (queue.go). That is the server's context of the request, which net/http
// ends on the connection's end: the forward itself does not end on it
// (newForwarder says why), but a request that has sent nothing to an
// origin yet is better dropped than sent for a client that is likely
// gone to an origin that is saturated.
func waitContext(req *http.Request, ex *exchange) context.Context {
	if ex != nil && ex.req != nil {
		return ex.req.Context()
	}
	return req.Context()
}

// errLeftQueue is the error of a request whose client left while it
// waited for a server below its max_in_flight.
type errLeftQueue struct{ err error }

func (e errLeftQueue) Error() string {
	return "the client left while its request waited for an origin server: " + e.err.Error()
}
func (e errLeftQueue) Unwrap() error { return e.err }

// tryResult is a try's status (0 for none) and failure, from its round
// trip's results.
func tryResult(resp *http.Response, err error) (int, origin.Failure) {
	if err != nil {
		return 0, origin.Classify(err)
	}
	return resp.StatusCode, origin.StatusFailure(resp.StatusCode)
}

// endTry ends a try of trip on s that took took, decided at now, on
// either path: the origin component counts it, the domain's latency
// histogram observes it, and the exchange (ex, nil for none) reports it.
func endTry(trip *origin.Trip, obs *upstreamObservers, ex *exchange, s *origin.Server, status int, f origin.Failure, took time.Duration, now time.Time) {
	trip.End(s, status, f, took, now)
	class := 5
	if status >= 100 && status < 600 {
		class = status/100 - 1
	}
	obs[class].Observe(took.Seconds())
	if ex != nil {
		ex.up = upstreamReport{Server: s.Name, Status: status, Took: took, Attempts: trip.Tries}
	}
}

// bufferedWhole reports whether the client's body was read whole before
// the forward (readBody): then nothing of it is read from the client
// while it is sent, and a try that sent none of it may be followed by
// another.
func bufferedWhole(b *clientBody) bool {
	_, ok := b.r.(*prefixReader)
	return ok
}

// originCollector reports the groups' servers at scrape time, from the
// origin component's counts: so the request path only adds to atomics.
type originCollector struct{ m *metrics }

func (c originCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.m.originRequests, c.m.originInFlight, c.m.originHealthy, c.m.originDrained, c.m.originEjections, c.m.originRetries, c.m.originQueued, c.m.originMaxInFlight} {
		ch <- d
	}
}

var originClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx", "error"}

func (c originCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.m.p.state.Load()
	if st == nil {
		return
	}
	now := c.m.p.now()
	for _, d := range st.domains {
		for _, g := range d.groups {
			for _, s := range g.origins.Servers() {
				for i, n := range s.Responses() {
					ch <- prometheus.MustNewConstMetric(c.m.originRequests, prometheus.CounterValue, float64(n), d.Name, g.name, s.Name, originClasses[i])
				}
				ch <- prometheus.MustNewConstMetric(c.m.originInFlight, prometheus.GaugeValue, float64(s.InFlight()), d.Name, g.name, s.Name)
				healthy := 0.0
				if s.Healthy(now) {
					healthy = 1
				}
				ch <- prometheus.MustNewConstMetric(c.m.originHealthy, prometheus.GaugeValue, healthy, d.Name, g.name, s.Name)
				drained := 0.0
				if d.drains.Drained(s.Name) {
					drained = 1
				}
				ch <- prometheus.MustNewConstMetric(c.m.originDrained, prometheus.GaugeValue, drained, d.Name, g.name, s.Name)
				if s.MaxInFlight > 0 {
					ch <- prometheus.MustNewConstMetric(c.m.originMaxInFlight, prometheus.GaugeValue, float64(s.MaxInFlight), d.Name, g.name, s.Name)
				}
				passive, active := s.Ejections()
				ch <- prometheus.MustNewConstMetric(c.m.originEjections, prometheus.CounterValue, float64(passive), d.Name, g.name, s.Name, "passive")
				ch <- prometheus.MustNewConstMetric(c.m.originEjections, prometheus.CounterValue, float64(active), d.Name, g.name, s.Name, "active")
			}
			for outcome, n := range g.origins.RetryCounts() {
				ch <- prometheus.MustNewConstMetric(c.m.originRetries, prometheus.CounterValue, float64(n), d.Name, g.name, outcome)
			}
		}
		if d.originQueue != nil {
			ch <- prometheus.MustNewConstMetric(c.m.originQueued, prometheus.GaugeValue, float64(d.originQueue.Waiting()), d.Name)
		}
	}
}

// originWarn logs what the origin component found (ejections, panic
// mode), a line a second at most, saying how many were held back.
func (p *Proxy) originWarn(msg string, args ...any) {
	if n, ok := p.originLog.allow(time.Now()); ok {
		p.log.Warn(msg, append(args, "suppressed", n)...)
	}
}

// originsView is GET /v1/origins: every domain's servers, as the origin
// component sees them now. The status page shows the same.
type originsView struct {
	Domains []originDomainView `json:"domains"`
}

// originDomainView is one of a domain's groups: a route's (Route its
// name, Match what it takes), or the domain's own (Route "").
type originDomainView struct {
	Domain  string            `json:"domain"`
	Route   string            `json:"route"`
	Match   *originMatchView  `json:"match,omitempty"`
	Balance string            `json:"balance"`
	Checked bool              `json:"checked"` // health is set
	Passive bool              `json:"passive"`
	Panics  uint64            `json:"panic_choices"`
	Retries map[string]uint64 `json:"retries"`
	// Queue is the domain's origin_queue, when a server has a
	// max_in_flight.
	Queue   *originQueueView   `json:"queue,omitempty"`
	Servers []originServerView `json:"servers"`
}

type originQueueView struct {
	Max            int     `json:"max"`
	TimeoutSeconds float64 `json:"timeout_seconds"`
	Waiting        int64   `json:"waiting"`
}

type originServerView struct {
	Server  string `json:"server"`
	Weight  int    `json:"weight"`
	Healthy bool   `json:"healthy"`
	// Drained: taken out of rotation on this node (drain.go); its
	// requests in flight finish.
	Drained      bool              `json:"drained"`
	InFlight     int64             `json:"in_flight"`
	MaxInFlight  int64             `json:"max_in_flight,omitempty"` // 0: no bound
	EjectedUntil *time.Time        `json:"ejected_until,omitempty"`
	LastCheck    *originCheckView  `json:"last_check"`
	Ejections    map[string]uint64 `json:"ejections"`
	Requests     map[string]uint64 `json:"requests"`
}

// originMatchView is what a route takes: a path prefix ("" any) and
// methods (none: any).
type originMatchView struct {
	PathPrefix string   `json:"path_prefix"`
	Methods    []string `json:"methods"`
}

type originCheckView struct {
	At      time.Time `json:"at"`
	Outcome string    `json:"outcome"`
}

func (p *Proxy) originsView() originsView {
	st := p.state.Load()
	now := p.now()
	v := originsView{Domains: []originDomainView{}}
	for _, d := range st.domains {
		for _, g := range d.groups {
			v.Domains = append(v.Domains, g.view(d.Name, d.drains, d.originQueue, now))
		}
	}
	return v
}

// view is g's entry in GET /v1/origins at now, with the servers drained
// in drains (the domain's) and the domain's origin queue q (nil: none).
func (g *serverGroup) view(domain string, drains *origin.Drains, q *origin.Queue, now time.Time) originDomainView {
	dv := originDomainView{Domain: domain, Route: g.name, Balance: g.up.Balance.String(), Checked: g.up.Health != nil,
		Passive: g.up.Passive != nil, Panics: g.origins.Panics(), Retries: g.origins.RetryCounts()}
	if r := g.route; r != nil {
		dv.Match = &originMatchView{PathPrefix: r.PathPrefix, Methods: append([]string{}, r.Methods...)}
	}
	if q != nil {
		o := q.Options()
		dv.Queue = &originQueueView{Max: o.Max, TimeoutSeconds: o.Timeout.Seconds(), Waiting: q.Waiting()}
	}
	for _, s := range g.origins.Servers() {
		passive, active := s.Ejections()
		sv := originServerView{Server: s.Name, Weight: s.Weight, Healthy: s.Healthy(now), Drained: drains.Drained(s.Name),
			InFlight: s.InFlight(), MaxInFlight: s.MaxInFlight,
			Ejections: map[string]uint64{"passive": passive, "active": active}, Requests: map[string]uint64{}}
		if until := s.EjectedUntil(); until.After(now) {
			sv.EjectedUntil = &until
		}
		if at, outcome := s.LastCheck(); !at.IsZero() {
			sv.LastCheck = &originCheckView{At: at, Outcome: outcome}
		}
		for i, n := range s.Responses() {
			sv.Requests[originClasses[i]] = n
		}
		dv.Servers = append(dv.Servers, sv)
	}
	return dv
}

// grouped is v with only the groups of several servers, active checks,
// a max_in_flight or a server drained, and routes: what the status page
// shows (a domain's lone origin is in its settings already).
func (v originsView) grouped() originsView {
	out := originsView{Domains: []originDomainView{}}
	for _, d := range v.Domains {
		if len(d.Servers) > 1 || d.Checked || d.Route != "" || d.Queue != nil || slices.ContainsFunc(d.Servers, func(s originServerView) bool { return s.Drained }) {
			out.Domains = append(out.Domains, d)
		}
	}
	return out
}

func (p *Proxy) getOrigins(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, p.originsView())
}
