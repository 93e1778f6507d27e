package proxy

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/edgerate/edge/internal/wire"
)

// HTTP/2 to clients: Go's own HTTP/2 server serves the connections the
// public listener hands it (cmd/edge), and each stream is a request like
// any other, through ServeHTTP: the same screen, routing, identity, rules,
// answers, metrics and logs as over HTTP/1.1 (the fast path is HTTP/1.1's
// alone). What HTTP/2 adds is per connection: the requests one may carry
// (http2.max_requests_per_connection), and the floods of frames the
// listener ends (guard.WatchFrames), which the proxy counts and logs.

// HTTP2Floods are the kinds of flood edge_http2_floods_total counts, as
// the listener names them (guard.FloodRapidReset, FloodContinuation,
// FloodControl).
var HTTP2Floods = []string{"rapid_reset", "continuation", "control"}

// HTTP2Flood counts a connection the listener closed for a flood of kind
// (one of HTTP2Floods), from peer, and logs it at most once a second in
// all; give it to guard.FrameLimits.OnFlood.
func (p *Proxy) HTTP2Flood(kind string, peer net.Addr) {
	p.metrics.http2Floods.WithLabelValues(kind).Inc()
	suppressed, ok := p.floodLog.allow(p.now())
	if !ok {
		return
	}
	addr := ""
	if peer != nil {
		addr = peer.String()
	}
	p.log.Warn("http2 flood: connection closed", "kind", kind, "peer", addr, "suppressed", suppressed)
}

// http2Conn is what the requests of one HTTP/2 connection share.
type http2Conn struct {
	served atomic.Int64
	max    int64 // http2.max_requests_per_connection as the connection started
}

// http2ConnKey carries a connection's http2Conn in its requests' contexts.
type http2ConnKey struct{}

// HTTP2ConnContext is the HTTP/2 server's ConnContext: a connection's
// requests know its TLS (tlsOf returns it, nil without; guard.TLSOf) and
// what its PROXY header said (frontOf, nil without; guard.FrontOf), and
// share its count of requests, against http2.max_requests_per_connection as
// the running configuration has it when the connection starts (a reload
// changes it for the connections after it).
func (p *Proxy) HTTP2ConnContext(tlsOf func(net.Conn) *wire.TLS, frontOf func(net.Conn) *wire.Front) func(context.Context, net.Conn) context.Context {
	return func(ctx context.Context, c net.Conn) context.Context {
		hc := &http2Conn{max: int64(p.Table().HTTP2.MaxRequestsPerConnection)}
		return context.WithValue(WithFront(WithTLS(ctx, tlsOf(c)), frontOf(c)), http2ConnKey{}, hc)
	}
}

// HTTP2Handler is the HTTP/2 server's handler: ServeHTTP, with the last of
// a connection's http2.max_requests_per_connection requests (and any it
// carries concurrently after it) answered with "Connection: close", which
// Go's server sends as GOAWAY, as nginx's keepalive_requests does: the
// client opens a new connection for the next.
func (p *Proxy) HTTP2Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hc, _ := r.Context().Value(http2ConnKey{}).(*http2Conn); hc != nil && hc.served.Add(1) >= hc.max {
			w.Header()[fieldNames[fieldConnection]] = statics[connectionClose].value
		}
		p.ServeHTTP(w, r)
	})
}
