package rules

import (
	"fmt"
	"net/netip"
	"slices"
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
