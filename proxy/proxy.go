// Package proxy carries one request through edge: it finds the request's
// domain, derives the client's identity, checks every matching rule against
// the domain's sliding-window counters, and either answers 429 with
// rate-limit fields or forwards the request to the domain's origin.
//
// The files follow a request in the order it passes them, one step each:
//
//   - serve.go: ServeHTTP, which calls the steps below in order (for
//     HTTP/2, after http2.go's count of the connection's requests);
//   - screen.go: refuse what net/http accepts but a gateway must not pass on;
//   - route.go: the domain that serves the request's Host;
//   - loop.go: 508 for a request that came back to this node;
//   - identify.go: the client's address and the parts of the request its
//     rules may key it by;
//   - cost.go: what the request costs under each rule (400 when a cost
//     header cannot be used);
//   - limit.go: every matching rule decided by the domain's window.Counter;
//   - fields.go: the rate-limit fields of the response;
//   - refuse.go: the answer to a blocked request (429), or to one the
//     counters could not decide (503);
//   - body.go: an allowed request's body, checked and buffered;
//   - forward.go: the request sent to the origin (through package origin,
//     which the fast forward, fastforward.go, takes too), or the domain's
//     static response.
//
// The check listener (check.go) takes a question about a request another
// proxy holds through screen, route, identify and limit, and answers with
// the decision instead of forwarding.
//
// Off the request's path: proxy.go (New and the state a configuration
// builds), shared.go (counters shared through Redis), reload.go, metrics.go,
// listener.go (hooks for the framing guard's listener), admin.go (the admin
// API), top.go (top talkers), recent.go (the per-second figures of the
// status page) and status.go (the status page).
package proxy

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/accesslog"
	"github.com/edgerate/edge/cluster"
	"github.com/edgerate/edge/headers"
	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/origin"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/token"
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
	// Node names this instance: in its Via entry (loop.go), and among the
	// nodes of its PoP when counters are shared through Redis. "" names
	// it by the host name in Via, and makes a registry name from the host
	// name, the process id and random bytes.
	Node string
	// AccessLogStdout is where an access_log path of "-" writes; nil is
	// os.Stdout.
	AccessLogStdout io.Writer
}

// Proxy is the edge request handler. It is safe for concurrent use; make it
// with New.
type Proxy struct {
	now       func() time.Time
	wallClock bool // now is time.Now: the fast path may use the guard's reading
	log       *slog.Logger
	metrics   *metrics
	state     atomic.Pointer[state]
	// started is the configuration New was given: settings that take
	// effect only at a restart keep its values (reload.go).
	started *rules.Table

	configPath string                // Options.ConfigPath
	lastErr    atomic.Pointer[error] // why the last reload failed

	reloadMu     sync.Mutex               // serialises reloads
	jwks         map[string]*token.Remote // token.go: JWKS fetchers by URL, under reloadMu
	transport    http.RoundTripper
	ownTransport bool // built by edge: rebuilt when the upstream timeout changes

	capLog   onceASecond // logs of the connection cap
	costLog  onceASecond // logs of invalid costs reported by origins (charge.go)
	floodLog onceASecond // logs of HTTP/2 floods (http2.go)

	forwarders   forwarders  // untrusted peers that forward for others (forwarders.go)
	forwarderLog onceASecond // logs of those, for all peers together

	// cluster shares counters through Redis; nil in local mode. Made by
	// New, kept across reloads, closed by Close (shared.go).
	cluster *cluster.Client

	buffered bufferBudget // request body bytes held in memory (body.go)
	inFlight atomic.Int64 // requests sent to an origin and not yet done

	// origins are the fast forward's origin connections, made by New,
	// kept across reloads (Reload retires those to origins it removed),
	// closed by Close.
	origins *origin.Pools
	// checks run the groups' active health checks, made by New, set by
	// each configuration, stopped by Close.
	checks    *origin.Checks
	originLog onceASecond // logs of ejections and panic mode (upstream.go)

	// via is this node's Via entry, made by New (loop.go).
	via via

	version   string    // Options.Version
	startedAt time.Time // when New made the Proxy, by its clock
	recent    recent    // per-second figures for the status page (recent.go)

	tlsState  // the HTTPS listener's port, certificates and log (tls.go)
	acmeState // the hook that answers ACME's HTTP-01 validations (acme.go)

	// The connection limits' open connections by client and the clients
	// refused most, kept across reloads (connections.go).
	open    openConns
	connTop *topTalkers[netip.Prefix]

	// The access log's counts, kept across the writers reloads open, and
	// where "-" writes (accesslog.go).
	alogCounts  accesslog.Counters
	alogSkipped atomic.Uint64
	alogStdout  io.Writer
}

// state is everything a request needs from one configuration, swapped as a
// whole so that no request sees half of two configurations.
type state struct {
	table    *rules.Table
	clientIP *ClientIP
	domains  []*domain // parallel to table.Domains
	result   ReloadResult
	// conns are the connections section's limits; nil for none
	// (connections.go).
	conns *connLimits
	// alog is the access log; nil for none (accesslog.go).
	alog *accessLog
	// tls is the live state of the groups' origin_tls, by ID
	// (origintls.go).
	tls map[string]*groupTLS
}

// domain is a rules.Domain with its counters, upstream and metric handles.
type domain struct {
	*rules.Domain
	store    *window.Store  // nil when the domain has no rules
	counter  window.Counter // store's, or Redis-shared counting (shared.go); nil without rules
	carry    []int          // for a reload: carry[i] is this store's rule continuing the old store's rule i
	upstream http.Handler
	// upstreamObs are the origin latency histograms; nil for a domain
	// with a static response (read by the status figures, status.go).
	upstreamObs *upstreamObservers
	rules       []ruleState // parallel to Domain.Rules: all[:len(Domain.Rules)]
	// all are the rules, then their plans (plans.go): a rule's plan is
	// decided as a rule of its own, with the plan's values and counters,
	// and a verdict's rule indexes all.
	all      []ruleState
	requests requestCounters
	jwt      *domainJWT // token.go; nil without a jwt section
	// costHeaders says whether a block rule takes its cost from a request
	// header, which limit checks before any rule counts (cost.go).
	costHeaders bool
	// countsAfter: some rule counts after the origin's response (charge.go).
	countsAfter bool
	// slots: some rule is a concurrency rule, whose slots the request
	// holds until it ends (charge.go).
	slots bool
	// costFields are the rules' response_cost_header fields, removed from
	// every response of the domain.
	costFields []string
	// queue counts the requests waiting for a leaky bucket queue's turn
	// (queue.go); nil when no rule is a queue.
	queue *queue
	// shed is the domain's load shedding (shed.go); nil when it has none.
	shed *shedState
	// sample is the accuracy sample of the domain's sliding-window rules
	// (accuracy.go); nil when accuracy_sample is 0 or no rule is judged.
	sample *window.Sample
	// fast: the fast path may decide the domain's requests (fast.go).
	fast bool
	// local decides the fast path's requests where the counter is shared
	// (cluster.Domain.BeginLocal); nil for a counter of this node's own.
	local localCounter
	// errLog answers and logs the domain's failed forwards, on both
	// paths (forward.go); nil for a domain not forwarded.
	errLog *errorLog
	// groups are the domain's groups of origin servers (upstream.go):
	// its routes', in order, then its own; nil for a domain not
	// forwarded. The last takes every request the others do not
	// (groupFor).
	groups []*serverGroup
	// drains are the servers an operator took out of rotation on this
	// node (drain.go), consulted by every group of the domain; nil for a
	// domain not forwarded.
	drains *origin.Drains
	// originQueue is where the domain's requests wait for a server below
	// its max_in_flight, in any of its groups (upstream.go); nil when no
	// server has one. busy counts the requests refused origin_busy:
	// full, then timeout.
	originQueue *origin.Queue
	busy        [2]prometheus.Counter
	// hsts is the Strict-Transport-Security line of the domain's HTTPS
	// responses (tls.go); nil without hsts_max_age.
	hsts *staticField
	// graphql prices the requests to the domain's GraphQL API
	// (graphql.go); nil when no rule has cost_from: graphql.
	graphql *graphqlAPI
	// invalidKey counts the requests refused for their API key
	// (plans.go); nil without api_keys.
	invalidKey prometheus.Counter
}

// ruleState is a compiled rule with what limit and its answers need
// ready-made.
type ruleState struct {
	*rules.Rule
	identity uint64 // see ruleIdentity
	share    int64  // the limit this node's counters hold (Proxy.nodeShare)
	// live, with cluster.sync share and store redis, decides with the
	// node's share of the rule's limit at the last heartbeat; nil
	// otherwise.
	live   *cluster.Share
	policy headers.Policy
	// policyText is policy as a RateLimit-Policy member, formatted once:
	// a response reporting only this rule sends it without formatting.
	policyText string
	// blockContentType is the Content-Type of the rule's own block
	// response body, shared by its answers (nil without one).
	blockContentType *staticField
	// limitName is the rule's name as a RateLimit member names it,
	// formatted once.
	limitName string
	// restoreRate is a bucket's refill rate in units per second, as a
	// JSON number, for its 429 body; "" for a window.
	restoreRate string
	// graphqlRestore is the restoreRate of the rule's THROTTLED body, as a
	// JSON number; "" for a rule without cost_from: graphql (graphql.go).
	graphqlRestore string
	outcomes       ruleCounters
	top            *topTalkers[window.Key]
	// invalidCost counts the invalid costs the origin reported in the
	// rule's response_cost_header; nil for a rule without one.
	invalidCost prometheus.Counter
	// judged: the domain's accuracy sample judges the rule's decisions
	// (accuracy.go), counting its verdicts in accuracy.
	judged   bool
	accuracy accuracyCounters
	// planAt[i] is the index in domain.all of the rule's plan named
	// Domain.PlanNames[i], or -1 where the rule uses its own values for it
	// (plans.go); nil for a domain without plans. planOutcomes count its
	// decisions by plan, the last one for plans the config does not name.
	planAt       []int
	planOutcomes []ruleCounters
}

func newRuleState(r *rules.Rule, c ruleCounters) ruleState {
	p := policyOf(r)
	rs := ruleState{
		Rule:       r,
		policy:     p,
		policyText: string(headers.AppendPolicy(nil, p)),
		limitName:  string(headers.AppendName(nil, r.Name)),
		outcomes:   c,
		top:        newTopTalkers[window.Key](),
	}
	if br := r.BlockResponse; br != nil && br.Body != "" {
		rs.blockContentType = static(fieldContentType, br.ContentType)
	}
	if r.Algorithm.Bucket() {
		rs.restoreRate = strconv.FormatFloat(float64(r.Limit)/r.Period.Seconds(), 'f', -1, 64)
	}
	if r.CostFrom == rules.CostFromGraphQL {
		rs.graphqlRestore = graphqlRestore(r)
	}
	return rs
}

// policyOf is r as a RateLimit-Policy item. A window's quota q is its
// limit and w its period. A bucket's q is its capacity (burst), what a
// full bucket lets through at once, and w the time an empty bucket takes
// to fill again, capacity × period / limit: so q is what may be sent in
// one burst and q/w the rate it refills at, as draft-ietf-httpapi-
// ratelimit-headers-10 has a policy allow q units per w seconds. w is in
// whole seconds (the draft allows no fraction) and rounded up, so q/w
// never states a faster rate than the bucket's. A quota's q is its limit
// and w is left out, as the draft allows: its calendar period has no fixed
// length (a month is 28 to 31 days, a day 23 to 25 hours), and the
// RateLimit field's t says when it resets. A concurrency rule's q is its
// limit of requests in flight, with no w and qu="concurrent-requests", the
// draft's unit for it.
func policyOf(r *rules.Rule) headers.Policy {
	p := headers.Policy{Name: r.Name, Quota: r.Capacity(), Window: r.Period}
	if r.Algorithm == algorithm.Concurrency {
		p.Window, p.Unit = 0, "concurrent-requests"
	}
	if r.Algorithm.Bucket() && r.Limit > 0 {
		// capacity ≤ 10⁹ and period ≤ 2592000 s: the product fits.
		secs := int64(r.Period / time.Second)
		fill := (r.Capacity()*secs + r.Limit - 1) / r.Limit
		p.Window = time.Duration(min(max(fill, 1), headers.MaxSeconds)) * time.Second
	}
	return p
}

// New returns a Proxy serving opts.Table.
func New(opts Options) (*Proxy, error) {
	if opts.Table == nil {
		return nil, errors.New("proxy: a rules table is required")
	}
	p := &Proxy{now: opts.Now, log: opts.Logger, started: opts.Table, configPath: opts.ConfigPath, version: opts.Version,
		via: newVia(opts.Table.Pop, opts.Node), connTop: newTopTalkers[netip.Prefix](), alogStdout: opts.AccessLogStdout}
	if p.now == nil {
		p.now, p.wallClock = time.Now, true
	}
	p.startedAt = p.now()
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
	p.origins = origin.NewPools(originSettings(opts.Table.Timeouts))
	if p.ownTransport {
		p.transport = newTransport(opts.Table.Timeouts)
	}
	p.checks = origin.NewChecks(originSettings(opts.Table.Timeouts).Transport(), p.now)
	var err error
	if p.cluster, err = p.newCluster(opts.Table, opts.Node); err != nil {
		return nil, err
	}
	st, err := p.build(opts.Table, nil, p.transport)
	if err != nil {
		if p.cluster != nil {
			p.cluster.Close()
		}
		p.retainJWKS(&state{}) // stops the JWKS fetchers started
		return nil, err
	}
	st.result = ReloadResult{Time: p.now(), Hash: opts.ConfigHash}
	if st.alog, err = p.openAccessLog(opts.Table, nil); err != nil {
		st.closeShared()
		if p.cluster != nil {
			p.cluster.Close()
		}
		return nil, err
	}
	p.state.Store(st)
	p.checks.Set(st.checks())
	p.metrics.lastReload.Set(float64(st.result.Time.UnixNano()) / 1e9)
	p.metrics.reloadOK.Set(1)
	return p, nil
}

// A compiled rule is handed to the counters as it is: rules' bounds must
// stay within what window can count. Each constant below fails to compile
// (a negative constant converted to an unsigned type) if they do not.
const (
	_ = uint(window.MaxRules - rules.MaxRulesPerDomain)
	_ = uint64(window.MaxLimit - rules.MaxLimit) // a burst is bounded as a limit too
	_ = uint64(window.MaxSpan - rules.MaxPeriod - rules.MaxMitigation)
	_ = uint64(window.MaxCost - rules.MaxCost)
	_ = uint64(window.MaxSpan - rules.MaxFill) // a bucket's burst × period / limit
	_ = uint64(window.MaxQueueDelay - rules.MaxQueueDelay)
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
	var oldConns *connLimits
	if old != nil {
		oldConns = old.conns
	}
	if st.conns, err = newConnLimits(t, oldConns); err != nil {
		return nil, fmt.Errorf("proxy: connections: %w", err)
	}
	made := st // a failing return sets st to nil
	defer func() {
		if err != nil {
			made.closeShared() // the domains made so far
		}
	}()
	for i, rd := range t.Domains {
		d := &domain{Domain: rd, requests: p.metrics.requestCounters(rd.Name, rd.HTTPSRedirect, rd.ACME, p.started.TLS.HTTP3 && p.started.HTTP3.AllowZeroRTT,
			rd.JWT != nil && rd.JWT.Refuse)}
		if rd.HSTSMaxAge > 0 {
			d.hsts = static(fieldStrictTransportSecurity, "max-age="+strconv.FormatInt(int64(rd.HSTSMaxAge/time.Second), 10))
		}
		var prev *domain
		if old != nil {
			prev = old.domain(rd.Name)
		}
		d.shed = p.metrics.newShedState(rd, prev)
		d.graphql = newGraphQLAPI(rd.GraphQL) // graphql.go
		if rd.APIKeys != nil {
			d.invalidKey = p.metrics.requests.WithLabelValues(rd.Name, outcomeInvalidKey)
		}
		if rd.JWT != nil {
			if d.jwt, err = p.newDomainJWT(rd); err != nil { // token.go
				return nil, fmt.Errorf("proxy: domain %q: %w", rd.Name, err)
			}
		}
		if len(rd.Rules) > 0 {
			all := withPlans(rd) // plans.go: the rules, then their plans
			limits := make([]window.Limit, len(all))
			for j, r := range all {
				limits[j] = window.Limit{
					Limit:        p.nodeShare(r.Rule),
					Period:       r.Period,
					Mitigation:   r.MitigationTimeout,
					CountBlocked: r.CountBlocked,
					Soft:         r.Soft,
					Precision:    r.Precision,
					Identity:     ruleIdentity(rd.Name, r.Rule, r.plan),
					Algorithm:    r.Algorithm,
					Burst:        r.Burst,
					MaxDelay:     r.MaxDelay,
					Reset:        algorithm.Reset(r.Reset),
					Location:     r.Location,
				}
				d.costHeaders = d.costHeaders || (r.CostHeader != "" && r.Action == rules.ActionBlock)
			}
			opts := window.Options{Capacity: rd.MaxKeys, Limits: limits}
			if prev != nil && prev.store != nil {
				opts.SeedFrom = prev.store
			}
			d.store, err = window.New(opts)
			if err != nil {
				return nil, fmt.Errorf("proxy: domain %q: %w", rd.Name, err)
			}
			d.all = make([]ruleState, len(all))
			for j, pr := range all {
				r := pr.Rule
				d.all[j] = newRuleState(r, p.metrics.ruleCounters(rd.Name, r))
				d.all[j].identity = limits[j].Identity
				d.all[j].share = limits[j].Limit
				if r.ResponseCostHeader != "" {
					d.all[j].invalidCost = p.metrics.responseCostInvalid.WithLabelValues(rd.Name, r.Name)
				}
			}
			d.rules = d.all[:len(rd.Rules)]
			p.linkPlans(d, all) // plans.go
			d.counter = d.store.Counter()
			if d.sample, err = p.newSample(t, d, limits, prev != nil && prev.store != nil); err != nil {
				return nil, err
			}
			if slices.ContainsFunc(rd.Rules, func(r *rules.Rule) bool { return r.MaxDelay > 0 }) {
				d.queue = p.metrics.queue(rd.Name)
				if prev != nil && prev.queue != nil {
					d.queue = prev.queue
				}
			}
			if p.cluster != nil {
				if err := p.sharedDomain(d); err != nil {
					return nil, err
				}
			}
			if prev != nil && prev.store != nil {
				d.carry = make([]int, len(prev.all))
				for i, pr := range prev.all {
					d.carry[i] = -1
					for j := range d.all {
						if d.all[j].identity == pr.identity {
							d.carry[i] = j
							d.all[j].top = pr.top // top talkers continue too
						}
					}
				}
			}
		}
		d.slots = slices.ContainsFunc(rd.Rules, func(r *rules.Rule) bool { return r.Algorithm == algorithm.Concurrency })
		switch {
		case !rd.Proxied: // answered only by the check listener (check.go)
		case rd.Respond != nil:
			d.upstream = staticResponder(rd.Respond)
		default:
			d.drains = carryDrains(rd, prev) // drain.go
			if err = p.newGroups(d, prev, st, old); err != nil {
				return nil, err
			}
			always := slices.ContainsFunc(rd.Rules, func(r *rules.Rule) bool { return r.Headers == rules.HeadersAlways })
			d.costFields = costFields(rd.Rules)
			d.countsAfter = slices.ContainsFunc(rd.Rules, (*rules.Rule).CountsAfter)
			d.upstream = p.newForwarder(d, cip, transport, always)
		}
		d.fast = fastDomain(d, p.cluster != nil)
		d.local, _ = d.counter.(localCounter)
		st.domains[i] = d
	}
	return st, nil
}

// domain returns the domain named name, or nil.
func (st *state) domain(name string) *domain {
	if rd, ok := st.table.Domain(name); ok {
		return st.domains[rd.Index]
	}
	return nil
}
