package proxy

import (
	"context"
	"net/http"
	"net/netip"

	"github.com/edgerate/edge/internal/wire"
)

// Behind a load balancer that speaks the PROXY protocol (package
// proxyproto, a stage of the public listener's sockets), a connection's
// RemoteAddr is the client the balancer named, so identify and both
// forwarders see that client as they see a direct one; what else the
// header said (wire.Front) reaches each request as its TLS does: in the
// head on the fast path, through ConnContext on net/http's. A balancer
// that terminated TLS makes the request https, as edge's own TLS does:
// X-Forwarded-Proto https to the origin, no https_redirect, and the
// domain's Strict-Transport-Security (isHTTPS).

// ProxyProtocolTrusted reports whether peer, a connection's TCP peer, is
// in the running configuration's proxy_protocol.from: a balancer whose
// connections must begin with a PROXY header. Give it to
// proxyproto.Options.Trusted.
func (p *Proxy) ProxyProtocolTrusted(peer netip.Addr) bool {
	return p.state.Load().table.ProxyProtocol.Trusted(peer)
}

// ProxyProtocolResult counts what a connection's PROXY protocol stage did
// (proxyproto's Result constants); give it to proxyproto.Options.OnResult.
func (p *Proxy) ProxyProtocolResult(result string) {
	p.metrics.proxyProtocol.WithLabelValues(result).Inc()
}

// frontKey carries a connection's wire.Front in a request's context.
type frontKey struct{}

// WithFront returns ctx carrying f, what a connection's PROXY header said;
// ConnContext gives it to each request of such a connection.
func WithFront(ctx context.Context, f *wire.Front) context.Context {
	if f == nil {
		return ctx
	}
	return context.WithValue(ctx, frontKey{}, f)
}

// frontOf returns the wire.Front a request's context carries, nil for none.
func frontOf(ctx context.Context) *wire.Front {
	f, _ := ctx.Value(frontKey{}).(*wire.Front)
	return f
}

// requestFront is frontOf r's context.
func requestFront(r *http.Request) *wire.Front { return frontOf(r.Context()) }

// isHTTPS reports whether a request's client spoke TLS: to edge (t, the
// connection's TLS) or to the balancer in front of it (f).
func isHTTPS(t *wire.TLS, f *wire.Front) bool {
	return t != nil || f != nil && f.TLS
}
