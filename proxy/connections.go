package proxy

import (
	"net/http"
	"net/netip"
	"sync"

	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
)

// The connections section's limits, on each client's connections to the
// public listener (both sockets): checked as the framing guard accepts a
// connection, before anything is read from it and before max_connections
// may close an idle one for it (guard.ListenerOptions.Admit), or, for a
// balancer's connection, right after its PROXY header names the client
// (proxyproto.Options.Admit). A client is the connection's peer, an IPv6
// client by client_ip.ipv6_prefix; connections.allow exempts ranges.
//
// Two limits, each optional: max_per_client counts a client's connections
// open at once (openConns: a map of the clients holding one, bounded by
// the connections open, kept across reloads), rate_per_client its new
// connections over a sliding period, in a window.Store of max_clients keys
// (the store's eviction forgets the least busy clients first, and a flood
// of new addresses is counted as one client once it is full). A refusal is
// counted in edge_connections_refused_total{reason} and observed in the
// top list of GET /v1/top/connections; it changes no count.

// Reasons a connection is refused, as edge_connections_refused_total's
// reason label shows them.
const (
	RefusedPerClient = "per_client" // the client has max_per_client connections open
	RefusedRate      = "rate"       // the client opened rate_per_client connections within its period
)

// connLimits is one configuration's connection limits: what a state holds.
type connLimits struct {
	rules.Connections
	ipv6Prefix int
	// rate counts new connections under rule 0 (rate_per_client); nil
	// without one.
	rate *window.Store
}

// newConnLimits compiles t's connection limits, nil when it has none. The
// rate's counters continue old's when old counts the same way (the same
// period and max_clients), with the new limit.
func newConnLimits(t *rules.Table, old *connLimits) (*connLimits, error) {
	c := t.Connections
	if !c.Limits() {
		return nil, nil
	}
	l := &connLimits{Connections: c, ipv6Prefix: t.IPv6Prefix}
	if c.RateLimit == 0 {
		return l, nil
	}
	if old != nil && old.rate != nil && old.RatePeriod == c.RatePeriod && old.MaxClients == c.MaxClients &&
		old.RateLimit == c.RateLimit {
		l.rate = old.rate // nothing changed: the same counters
		return l, nil
	}
	opts := window.Options{Capacity: c.MaxClients, Limits: []window.Limit{{Limit: int64(c.RateLimit), Period: c.RatePeriod}}}
	if old != nil && old.rate != nil {
		opts.SeedFrom = old.rate
	}
	store, err := window.New(opts)
	if err != nil {
		return nil, err
	}
	l.rate = store
	return l, nil
}

// carryFrom copies old's rate counters into l's new store, when it counts
// over the same period: call it just before the switch (Reload).
func (l *connLimits) carryFrom(old *connLimits) {
	if l == nil || old == nil || l.rate == nil || old.rate == nil || l.rate == old.rate || l.RatePeriod != old.RatePeriod {
		return
	}
	_, _ = old.rate.Carry(l.rate, []int{0}) // the same period and identity: cannot fail
}

// openConns counts each client's connections open at once, for
// max_per_client. It holds only clients with a connection open (at most
// max_connections), under one mutex: a connection's accept and close take
// it once each, far below what a decision of the store costs.
type openConns struct {
	mu sync.Mutex
	n  map[netip.Prefix]int32
}

// acquire counts one more connection of client if it has fewer than max
// open, and reports whether it did.
func (o *openConns) acquire(client netip.Prefix, max int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if int(o.n[client]) >= max {
		return false
	}
	if o.n == nil {
		o.n = make(map[netip.Prefix]int32)
	}
	o.n[client]++
	return true
}

// release counts one connection of client out.
func (o *openConns) release(client netip.Prefix) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch n := o.n[client]; {
	case n > 1:
		o.n[client] = n - 1
	case n == 1:
		delete(o.n, client)
	}
}

// count returns client's connections open.
func (o *openConns) count(client netip.Prefix) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return int(o.n[client])
}

// AdmitConnection decides on a new connection of the public listener from
// peer on the socket named socket (ListenerPublic, ListenerTLS), before
// anything is read from it; give it to guard.ListenerOptions.Admit. A
// balancer's connection on a socket that reads PROXY headers is admitted
// here, to be decided once its header names the client (AdmitClient).
func (p *Proxy) AdmitConnection(peer netip.Addr, socket string) wire.Admission {
	st := p.state.Load()
	if st.conns == nil {
		return wire.Admission{}
	}
	// The sockets read headers as edge started; the balancers are the
	// running configuration's (front.go).
	if p.started.ProxyProtocol.Reads(socket) && st.table.ProxyProtocol.Trusted(peer) {
		return wire.Admission{}
	}
	return p.admitClient(st, peer)
}

// AdmitClient decides on a balancer's connection whose PROXY header named
// client, before anything after the header is read; give it to
// proxyproto.Options.Admit.
func (p *Proxy) AdmitClient(client netip.Addr) wire.Admission {
	st := p.state.Load()
	if st.conns == nil {
		return wire.Admission{}
	}
	return p.admitClient(st, client)
}

// admitClient checks client's connection against st's limits: max_per_client
// first, whose count it takes back if the rate then refuses, so that a
// refused connection counts nowhere.
func (p *Proxy) admitClient(st *state, client netip.Addr) wire.Admission {
	l := st.conns
	if l.Allowed(client) {
		return wire.Admission{}
	}
	key := rules.ClientPrefix(client, l.ipv6Prefix)
	held := false
	if l.MaxPerClient > 0 {
		if !p.open.acquire(key, l.MaxPerClient) {
			return p.refuseConnection(key, RefusedPerClient)
		}
		held = true
	}
	if l.rate != nil {
		b := key.Addr().As16()
		if d := l.rate.Allow(l.rate.Key(0, b[:]), p.now()); !d.Allowed {
			if held {
				p.open.release(key)
			}
			return p.refuseConnection(key, RefusedRate)
		}
	}
	if !held {
		return wire.Admission{}
	}
	return wire.Admission{Release: func() { p.open.release(key) }}
}

// refuseConnection counts and observes a refusal of client's connection.
func (p *Proxy) refuseConnection(client netip.Prefix, reason string) wire.Admission {
	if reason == RefusedRate {
		p.metrics.connsRefusedRate.Inc()
	} else {
		p.metrics.connsRefusedPerClient.Inc()
	}
	p.connTop.observe(client, reason == RefusedRate, func() string { return clientText(client) })
	return wire.Admission{Refused: true}
}

// clientText is a client as the admin API shows it: an address, or an
// IPv6 prefix shorter than 128 bits.
func clientText(c netip.Prefix) string {
	if c.Bits() == c.Addr().BitLen() {
		return c.Addr().String()
	}
	return c.String()
}

// refusedClient is one client of GET /v1/top/connections.
type refusedClient struct {
	// Client is the address, or the IPv6 prefix, its connections count
	// under.
	Client string `json:"client"`
	// Refused are its connections refused while it was tracked, possibly
	// overestimated by RefusedError (Space-Saving, as the top talkers).
	Refused      uint64 `json:"refused"`
	RefusedError uint64 `json:"refused_error"`
	// Rate and PerClient split Refused, less its error, by reason.
	Rate      uint64 `json:"rate"`
	PerClient uint64 `json:"per_client"`
	// Open are its connections open now (counted with max_per_client
	// only).
	Open int `json:"open"`
}

// getTopConnections serves GET /v1/top/connections?n=20: the clients
// whose connections the limits refused most, as this node saw them,
// most refused first.
func (p *Proxy) getTopConnections(w http.ResponseWriter, r *http.Request) {
	n, ok := queryInt(w, r, "n", 20, topSize)
	if !ok {
		return
	}
	out := []refusedClient{}
	for _, t := range p.connTop.top(n) {
		rc := refusedClient{Client: t.text, Refused: t.count, RefusedError: t.err, Rate: t.blocked, Open: p.open.count(t.key)}
		rc.PerClient = t.count - t.err - t.blocked
		out = append(out, rc)
	}
	writeJSON(w, http.StatusOK, out)
}

// proxyProtocolView is the proxy_protocol section as GET /v1/config
// shows it: the balancers as they run, the listeners as edge started.
type proxyProtocolView struct {
	From      []string `json:"from"`
	Listeners []string `json:"listeners"`
}

// connectionsView is the connections section as GET /v1/config shows it.
type connectionsView struct {
	MaxPerClient  int       `json:"max_per_client"`
	RatePerClient *rateView `json:"rate_per_client,omitempty"`
	Allow         []string  `json:"allow"`
	MaxClients    int       `json:"max_clients,omitempty"`
}

type rateView struct {
	Limit  int    `json:"limit"`
	Period string `json:"period"`
}

// connectionViews are t's proxy_protocol (the listeners of run, the
// configuration edge started with) and connections views; nil for a
// section that is off.
func connectionViews(t, run *rules.Table) (*proxyProtocolView, *connectionsView) {
	var pv *proxyProtocolView
	if pp := t.ProxyProtocol; pp.From != nil {
		pv = &proxyProtocolView{From: prefixStrings(pp.From), Listeners: []string{}}
		for _, l := range []string{rules.ListenerPublic, rules.ListenerTLS} {
			if run.ProxyProtocol.Reads(l) {
				pv.Listeners = append(pv.Listeners, l)
			}
		}
	}
	c := t.Connections
	if !c.Limits() {
		return pv, nil
	}
	cv := &connectionsView{MaxPerClient: c.MaxPerClient, Allow: prefixStrings(c.Allow), MaxClients: c.MaxClients}
	if c.RateLimit > 0 {
		cv.RatePerClient = &rateView{Limit: c.RateLimit, Period: c.RatePeriod.String()}
	}
	return pv, cv
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}
