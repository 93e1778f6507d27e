package rules

import (
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// ProxyProtocolConfig is the proxy_protocol section: the load balancers in
// front of edge that begin each connection with a PROXY protocol header
// (HAProxy's, v1 text or v2 binary) naming the client, and the listeners
// that read one. The listeners take effect at a restart, From at a reload.
type ProxyProtocolConfig struct {
	// From are the balancers' addresses, CIDR prefixes or bare IPs written
	// as client_ip.trusted_proxies are. A connection from one of them must
	// begin with a PROXY header, whose source address is then the
	// connection's client; one from any other address must not send one.
	// Empty (default) reads no header.
	From []string `mapstructure:"from"`
	// Listeners are the listeners that read the header: "public" (listen)
	// and "tls" (tls.listen). Default both (tls only with tls.listen); the
	// check, admin and rls listeners never do.
	Listeners []string `mapstructure:"listeners"`
}

// ProxyProtocol is a compiled [ProxyProtocolConfig]. From nil means off,
// and then neither listener reads a header.
type ProxyProtocol struct {
	// From are masked prefixes, IPv4-mapped ones unmapped, in config order.
	From []netip.Prefix
	// Public and TLS: the listener reads the header.
	Public, TLS bool
}

// Names of the listeners that proxy_protocol.listeners may name.
const (
	ListenerPublic = "public"
	ListenerTLS    = "tls"
)

// compileProxyProtocol validates the proxy_protocol section of a table
// whose tls section is compiled.
func compileProxyProtocol(p *problems, c ProxyProtocolConfig, t *Table) ProxyProtocol {
	const path = "proxy_protocol"
	out := ProxyProtocol{From: compilePrefixes(p, path+".from", c.From)}
	if len(c.From) == 0 {
		if len(c.Listeners) > 0 {
			p.add(path+".listeners", "needs proxy_protocol.from: without it no listener reads a PROXY header")
		}
		return ProxyProtocol{}
	}
	if c.Listeners == nil && !p.given[path+".listeners"] {
		out.Public, out.TLS = true, t.TLS.Listen != ""
		return out
	}
	if len(c.Listeners) == 0 {
		p.add(path+".listeners", "must name public, tls or both, got none")
	}
	for i, l := range c.Listeners {
		lp := fmt.Sprintf("%s.listeners[%d]", path, i)
		switch {
		case slices.Index(c.Listeners, l) < i:
			p.add(lp, "is named twice, got %q", l)
		case l == ListenerPublic:
			out.Public = true
		case l == ListenerTLS && t.TLS.Listen == "":
			p.add(lp, "needs tls.listen: there is no HTTPS listener, got %q", l)
		case l == ListenerTLS:
			out.TLS = true
		default:
			p.add(lp, "must be public or tls (the check, admin and rls listeners never read a PROXY header), got %q", l)
		}
	}
	return out
}

// Reads reports whether the listener named name ("public", "tls") reads a
// PROXY header.
func (pp ProxyProtocol) Reads(name string) bool {
	switch name {
	case ListenerPublic:
		return pp.Public
	case ListenerTLS:
		return pp.TLS
	}
	return false
}

// Trusted reports whether addr (unmapped, without zone) is in From.
func (pp ProxyProtocol) Trusted(addr netip.Addr) bool {
	for _, pfx := range pp.From {
		if pfx.Contains(addr) {
			return true
		}
	}
	return false
}

// ConnectionsConfig is the connections section: limits on each client's
// connections to the public and TLS listeners, checked before anything is
// read from a new connection (after its PROXY header, where one is
// required). A client is the connection's peer (the PROXY header's
// source), an IPv6 client by client_ip.ipv6_prefix. The limits are per
// node, never shared through Redis; a reload changes them for new
// connections.
type ConnectionsConfig struct {
	// MaxPerClient bounds a client's connections open at once; 0
	// (default) means none; valid 0..1048576.
	MaxPerClient int `mapstructure:"max_per_client"`
	// RatePerClient bounds a client's new connections per sliding period;
	// nil means none.
	RatePerClient *ConnectionRateConfig `mapstructure:"rate_per_client"`
	// Allow lists the clients neither limit applies to (monitoring, a
	// balancer that sends no PROXY header): compared with the PROXY
	// header's source where there is one.
	Allow *AllowConfig `mapstructure:"allow"`
	// MaxClients bounds the clients whose rate is tracked at once (about
	// 30 bytes each, reserved at start); past it, the least busy are
	// forgotten first. Default 100,000; valid 1..10,000,000; only with
	// RatePerClient.
	MaxClients int `mapstructure:"max_clients"`
}

// ConnectionRateConfig is connections.rate_per_client: at most Limit new
// connections of a client per sliding Period.
type ConnectionRateConfig struct {
	// Limit is 1..1_000_000_000.
	Limit int `mapstructure:"limit"`
	// Period is a whole number of seconds, 1s..24h.
	Period time.Duration `mapstructure:"period"`
}

// Connections is a compiled [ConnectionsConfig]; the zero value limits
// nothing.
type Connections struct {
	MaxPerClient int // 0: none
	// RateLimit new connections per RatePeriod; RateLimit 0: none.
	RateLimit  int
	RatePeriod time.Duration
	// Allow are masked prefixes, IPv4-mapped ones unmapped, compared with
	// the full client address.
	Allow      []netip.Prefix
	MaxClients int // the rate's tracked clients; 0 without a rate
}

// Limits reports whether c limits anything.
func (c Connections) Limits() bool { return c.MaxPerClient > 0 || c.RateLimit > 0 }

// Allowed reports whether addr (unmapped, without zone) is in Allow.
func (c Connections) Allowed(addr netip.Addr) bool {
	for _, pfx := range c.Allow {
		if pfx.Contains(addr) {
			return true
		}
	}
	return false
}

// Bounds of the connections section.
const (
	DefaultMaxClients   = 100_000
	maxMaxClients       = 10_000_000
	maxConnectionPeriod = 24 * time.Hour
)

func compileConnections(p *problems, c ConnectionsConfig) Connections {
	const path = "connections"
	out := Connections{MaxPerClient: c.MaxPerClient}
	if c.MaxPerClient < 0 || c.MaxPerClient > maxConnections {
		p.add(path+".max_per_client", "must be between 0 (none) and %d, got %d", maxConnections, c.MaxPerClient)
	}
	if r := c.RatePerClient; r != nil {
		rp := path + ".rate_per_client"
		out.RateLimit, out.RatePeriod = r.Limit, r.Period
		switch {
		case r.Limit == 0:
			p.missing(rp+".limit", "", "must be between 1 and %d, got %d", MaxLimit, r.Limit)
		case r.Limit < 1 || r.Limit > MaxLimit:
			p.add(rp+".limit", "must be between 1 and %d, got %d", MaxLimit, r.Limit)
		}
		switch {
		case r.Period == 0:
			p.missing(rp+".period", "", "must be between 1s and %v, got %v", maxConnectionPeriod, r.Period)
		case r.Period < time.Second || r.Period > maxConnectionPeriod:
			p.add(rp+".period", "must be between 1s and %v, got %v", maxConnectionPeriod, r.Period)
		case r.Period%time.Second != 0:
			p.add(rp+".period", "must be a whole number of seconds, got %v", r.Period)
		}
		out.MaxClients = c.MaxClients
		if out.MaxClients == 0 {
			out.MaxClients = DefaultMaxClients
		}
		if out.MaxClients < 1 || out.MaxClients > maxMaxClients {
			p.add(path+".max_clients", "must be between 1 and %d, got %d", maxMaxClients, c.MaxClients)
		}
	} else if c.MaxClients != 0 {
		p.add(path+".max_clients", "needs connections.rate_per_client: it bounds the clients whose rate is tracked, got %d", c.MaxClients)
	}
	if c.Allow != nil {
		if len(c.Allow.CIDRs) == 0 {
			p.missing(path+".allow.cidrs", "with connections.allow", "must list at least one CIDR prefix or IP")
		}
		out.Allow = compilePrefixes(p, path+".allow.cidrs", c.Allow.CIDRs)
		if !out.Limits() {
			p.add(path+".allow", "needs connections.max_per_client or connections.rate_per_client: there is no limit to exempt from")
		}
	}
	return out
}
