// Package proxy carries one request through edge: it finds the request's
// domain, derives the client's identity, checks every matching rule against
// the domain's sliding-window counters, and either answers 429 with
// rate-limit fields or forwards the request to the domain's origin.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/cluster"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure a Proxy.
type Options struct {
	// Table is the compiled configuration; required.
	Table *rules.Table
	// Registerer receives the proxy's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger receives upstream errors and lifecycle messages; nil discards.
	Logger *slog.Logger
	// Now is the clock, read once per request; nil means time.Now. Tests
	// inject their own so that no test sleeps to wait for a window.
	Now func() time.Time
	// Version is reported by the edge_build_info metric.
	Version string
	// Transport carries requests to origins; nil builds a pooled transport
	// with the table's upstream timeout.
	Transport http.RoundTripper
	// ConfigHash identifies the configuration Table was compiled from; it is
	// reported by the admin API.
	ConfigHash string
	// ConfigPath says where the configuration is read from on a reload,
	// as GET /v1/config shows it: a file path, or a description such as
	// "(embedded default)".
	ConfigPath string
	// Node names this instance among the nodes of its PoP when counters are
	// shared through Redis; "" makes a name from the host name, the
	// process id and random bytes.
	Node string
}

// Proxy is the edge request handler. It is safe for concurrent use; make it
// with New.
type Proxy struct {
	now     func() time.Time
	log     *slog.Logger
	metrics *metrics
	state   atomic.Pointer[state]
	// started is the configuration New was given: settings that take
	// effect only at a restart keep its values (reload.go).
	started *rules.Table

	configPath string                // Options.ConfigPath
	lastErr    atomic.Pointer[error] // why the last reload failed

	reloadMu     sync.Mutex // serialises reloads
	transport    http.RoundTripper
	ownTransport bool // built by edge: rebuilt when the upstream timeout changes

	capLog onceASecond // logs of the connection cap

	// cluster shares counters through Redis; nil in local mode. Made by
	// New, kept across reloads, closed by Close (shared.go).
	cluster *cluster.Client

	buffered bufferBudget // request body bytes held in memory (body.go)
	inFlight atomic.Int64 // requests sent to an origin and not yet done
}

// state is everything a request needs from one configuration, swapped as a
// whole so that no request sees half of two configurations.
type state struct {
	table    *rules.Table
	clientIP *ClientIP
	domains  []*domain // parallel to table.Domains
	result   ReloadResult
}

// domain is a rules.Domain with its counters, upstream and metric handles.
type domain struct {
	*rules.Domain
	store    *window.Store  // nil when the domain has no rules
	counter  window.Counter // store's, or Redis-shared counting (shared.go); nil without rules
	carry    []int          // for a reload: carry[i] is this store's rule continuing the old store's rule i
	upstream http.Handler
	rules    []ruleState // parallel to Domain.Rules
	requests requestCounters
}

// New returns a Proxy serving opts.Table.
func New(opts Options) (*Proxy, error) {
	if opts.Table == nil {
		return nil, errors.New("proxy: a rules table is required")
	}
	p := &Proxy{now: opts.Now, log: opts.Logger, started: opts.Table, configPath: opts.ConfigPath}
	if p.now == nil {
		p.now = time.Now
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.metrics = newMetrics(p, opts.Version)
	if opts.Registerer != nil {
		if err := p.metrics.register(opts.Registerer); err != nil {
			return nil, fmt.Errorf("proxy: registering metrics: %w", err)
		}
	}
	p.transport, p.ownTransport = opts.Transport, opts.Transport == nil
	if p.ownTransport {
		p.transport = newTransport(opts.Table.Timeouts)
	}
	var err error
	if p.cluster, err = p.newCluster(opts.Table, opts.Node); err != nil {
		return nil, err
	}
	st, err := p.build(opts.Table, nil, p.transport)
	if err != nil {
		if p.cluster != nil {
			p.cluster.Close()
		}
		return nil, err
	}
	st.result = ReloadResult{Time: p.now(), Hash: opts.ConfigHash}
	p.state.Store(st)
	p.metrics.lastReload.Set(float64(st.result.Time.UnixNano()) / 1e9)
	p.metrics.reloadOK.Set(1)
	return p, nil
}

// A compiled rule is handed to the counters as it is: rules' bounds must
// stay within what window can count. Each constant below fails to compile
// (a negative constant converted to an unsigned type) if they do not.
const (
	_ = uint(window.MaxRules - rules.MaxRulesPerDomain)
	_ = uint64(window.MaxLimit - rules.MaxLimit)
	_ = uint64(window.MaxSpan - rules.MaxPeriod - rules.MaxMitigation)
)

// build makes the per-configuration state: a counter store and an upstream
// per domain, metric handles per rule.
//
// With old set, each domain's store shares the old store's hash seed and
// notes which old rules its rules continue (domain.carry), so that Reload
// can carry their counters over.
func (p *Proxy) build(t *rules.Table, old *state, transport http.RoundTripper) (st *state, err error) {
	cip, err := NewClientIP(t.TrustedProxies, t.IPv6Prefix)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	st = &state{table: t, clientIP: cip, domains: make([]*domain, len(t.Domains))}
	defer func() {
		if err != nil {
			st.closeShared() // the domains made so far
		}
	}()
	for i, rd := range t.Domains {
		d := &domain{Domain: rd, requests: p.metrics.requestCounters(rd.Name)}
		var prev *domain
		if old != nil {
			prev = old.domain(rd.Name)
		}
		if len(rd.Rules) > 0 {
			limits := make([]window.Limit, len(rd.Rules))
			for j, r := range rd.Rules {
				limits[j] = window.Limit{
					Limit:        r.Limit,
					Period:       r.Period,
					Mitigation:   r.MitigationTimeout,
					CountBlocked: r.CountBlocked,
					Identity:     ruleIdentity(rd.Name, r),
				}
			}
			opts := window.Options{Capacity: rd.MaxKeys, Limits: limits}
			if prev != nil && prev.store != nil {
				opts.SeedFrom = prev.store
			}
			d.store, err = window.New(opts)
			if err != nil {
				return nil, fmt.Errorf("proxy: domain %q: %w", rd.Name, err)
			}
			d.rules = make([]ruleState, len(rd.Rules))
			for j, r := range rd.Rules {
				d.rules[j] = newRuleState(r, p.metrics.ruleCounters(rd.Name, r))
				d.rules[j].identity = limits[j].Identity
			}
			d.counter = d.store.Counter()
			if p.cluster != nil {
				if err := p.sharedDomain(d); err != nil {
					return nil, err
				}
			}
			if prev != nil && prev.store != nil {
				d.carry = make([]int, len(prev.rules))
				for i, pr := range prev.rules {
					d.carry[i] = -1
					for j := range d.rules {
						if d.rules[j].identity == pr.identity {
							d.carry[i] = j
							d.rules[j].top = pr.top // top talkers continue too
						}
					}
				}
			}
		}
		if rd.Respond != nil {
			d.upstream = staticResponder(rd.Respond)
		} else {
			origin := rd.Origin
			if origin == nil {
				origin = t.Origin
			}
			always := slices.ContainsFunc(rd.Rules, func(r *rules.Rule) bool { return r.Headers == rules.HeadersAlways })
			d.upstream = p.newForwarder(rd.Name, origin, cip, transport, always)
		}
		st.domains[i] = d
	}
	return st, nil
}

// FramingRefused counts a request the framing guard (guard.Listener)
// refused for its framing; give it to guard.ListenerOptions.OnReject.
func (p *Proxy) FramingRefused() { p.metrics.framing.Inc() }

// ConnectionsOpen follows the connections open on the framing guard; give
// it to guard.ListenerOptions.OnConnections.
func (p *Proxy) ConnectionsOpen(delta int) { p.metrics.connsOpen.Add(float64(delta)) }

// ConnectionsCapped counts a connection that arrived at the framing guard's
// connection cap of maxConns, and logs it at most once a second (a flood at
// the cap would otherwise log a line per connection). closedIdle tells
// whether an idle keep-alive connection was closed to admit it. Call it
// from guard.ListenerOptions.OnCapped with the fields of the CapEvent.
func (p *Proxy) ConnectionsCapped(maxConns int, closedIdle bool) {
	p.metrics.capped.Inc()
	suppressed, ok := p.capLog.allow(p.now())
	if !ok {
		return
	}
	p.log.Warn("connection cap reached: closing idle keep-alive connections, then accepting none until one closes",
		"max_connections", maxConns, "closed_idle", closedIdle, "suppressed", suppressed)
}

// onceASecond lets an event through at most once a second and counts the
// others. It is safe for concurrent use; the zero value is ready.
type onceASecond struct {
	mu         sync.Mutex
	last       time.Time // when an event last went through; zero for never
	suppressed int       // events held back since then
}

// allow reports whether the event at now goes through and, if it does, how
// many were held back since the last one that did.
func (o *onceASecond) allow(now time.Time) (suppressed int, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	// A clock that went back lets the event through rather than hold
	// every event back until it catches up.
	if !o.last.IsZero() && !now.Before(o.last) && now.Before(o.last.Add(time.Second)) {
		o.suppressed++
		return 0, false
	}
	o.last, suppressed, o.suppressed = now, o.suppressed, 0
	return suppressed, true
}

// domain returns the domain named name, or nil.
func (st *state) domain(name string) *domain {
	if rd, ok := st.table.Domain(name); ok {
		return st.domains[rd.Index]
	}
	return nil
}

// ServeHTTP decides and serves one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r = p.screen(w, r); r == nil { // screen.go: refused requests are never forwarded
		return
	}
	now := p.now()
	st := p.state.Load()
	// The host is normalised once: the domain is looked up by it and
	// rules keyed by host count it.
	host, validHost := rules.NormalizeHost(r.Host)
	rd, ok := st.table.LookupHost(host)
	if !ok {
		p.misdirected(w, validHost)
		return
	}
	d := st.domains[rd.Index]
	if d.store != nil {
		f, ok := p.limit(w, r, st, d, host, now)
		if !ok {
			return
		}
		if f != nil {
			if d.Respond != nil {
				f.set(w.Header())
			} else {
				// The origin's response may carry fields of its own: the
				// forwarder merges ours into it (see fields.merge).
				r = r.WithContext(context.WithValue(r.Context(), fieldsKey{}, f))
			}
		}
	}
	r, release := p.readBody(w, r, st, d) // body.go: 413, buffering
	if r == nil {
		return
	}
	defer release()
	d.requests.served.Inc()
	if d.Respond == nil {
		p.inFlight.Add(1)
		defer p.inFlight.Add(-1)
	}
	d.upstream.ServeHTTP(w, r)
}

// misdirected answers a request whose Host no domain claims: 421, or 400 if
// the Host is not a valid host at all (validHost false). It is never forwarded.
func (p *Proxy) misdirected(w http.ResponseWriter, validHost bool) {
	p.metrics.misdirected.Inc()
	if !validHost {
		writeText(w, http.StatusBadRequest, "bad request: invalid host\n")
		return
	}
	writeText(w, http.StatusMisdirectedRequest, "misdirected request: no site is configured for this host\n")
}

// fieldsKey carries a request's rate-limit fields to the forwarder.
type fieldsKey struct{}

// writeText writes a short plain-text response.
func writeText(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// staticResponder serves a domain's fixed response.
func staticResponder(resp *rules.Response) http.Handler {
	body := []byte(resp.Body)
	// One shared value slice: net/http never modifies it, and Add on it
	// reallocates (its capacity is 1), so sharing is safe and saves an
	// allocation per response.
	contentType := []string{resp.ContentType}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = contentType
		w.WriteHeader(resp.Status)
		if r.Method != http.MethodHead {
			_, _ = w.Write(body)
		}
	})
}
