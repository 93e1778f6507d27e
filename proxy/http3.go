package proxy

import (
	"context"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/edgerate/edge/internal/wire"
)

// HTTP/3 to clients (tls.http3): cmd/edge serves QUIC with quic-go's
// HTTP/3 server, and each request is a request like any other, through
// ServeHTTP, as HTTP/2's are (http2.go); its connection's TLS (fingerprint
// and certificate) reaches it through the context (WithTLS), and its
// RemoteAddr is the connection's peer address when the request arrived,
// which a migrating client changes. What HTTP/3 adds is decided here: the
// Alt-Svc line that HTTPS responses announce it with; what becomes of a
// request sent in 0-RTT data (early); whether a new connection is first
// sent a Retry (RetryQUIC) and whether a validated address may open one
// (AdmitQUIC), counted in edge_http3_connections_total (docs/http3.md).

// Results of a QUIC connection attempt, as edge_http3_connections_total's
// result label shows them.
const (
	HTTP3ConnOK             = "ok"              // the handshake was done
	HTTP3ConnRetry          = "retry"           // sent a Retry to validate the client's address
	HTTP3ConnRefused        = "refused"         // a validated address over its connection limits
	HTTP3ConnHandshakeError = "handshake_error" // the handshake failed or timed out
)

// altSvcMaxAge is how long a client may remember that edge serves HTTP/3
// (Alt-Svc's ma, seconds): a day, as Caddy and Cloudflare announce it.
const altSvcMaxAge = 86400

// SetHTTP3Port tells the proxy that HTTP/3 is served on UDP port: HTTPS
// responses then carry Alt-Svc: h3=":port"; ma=86400 (RFC 7838). Call it
// once the QUIC socket is bound, before serving.
func (p *Proxy) SetHTTP3Port(port int) {
	p.altSvc.Store(static(fieldAltSvc, `h3=":`+strconv.Itoa(port)+`"; ma=`+strconv.Itoa(altSvcMaxAge)))
	for _, r := range []string{HTTP3ConnOK, HTTP3ConnRetry, HTTP3ConnRefused, HTTP3ConnHandshakeError} {
		p.metrics.http3Conns.WithLabelValues(r) // shown at 0 from the start
	}
}

// altSvcOn is the Alt-Svc line of a response on a connection whose TLS is
// t: nil without HTTP/3, and on a connection that is not edge's own TLS (a
// balancer's HTTPS names no UDP port of edge's).
func (p *Proxy) altSvcOn(t *wire.TLS) *staticField {
	if t == nil {
		return nil
	}
	return p.altSvc.Load()
}

// HTTP3Connection counts a QUIC connection attempt by result (one of
// HTTP3ConnOK, HTTP3ConnRetry, HTTP3ConnRefused, HTTP3ConnHandshakeError).
func (p *Proxy) HTTP3Connection(result string) {
	p.metrics.http3Conns.WithLabelValues(result).Inc()
}

// RetryQUIC decides whether a new QUIC connection from an address not yet
// validated is sent a Retry first (RFC 9000 §8.1.2): when more than
// http3.retry_above handshakes are in progress. Give it to
// quic.Transport.VerifySourceAddress, with the handshakes in progress.
func (p *Proxy) RetryQUIC(inProgress int) bool {
	if inProgress <= p.Table().HTTP3.RetryAbove {
		return false
	}
	p.HTTP3Connection(HTTP3ConnRetry)
	return true
}

// AdmitQUIC decides on a QUIC connection from peer, a validated address
// (after a Retry, or once its handshake is done: a spoofed source never
// gets this far, so it cannot spend a victim's budget), against the
// connections section's limits as the TCP listener's connections are
// (AdmitConnection). A refusal is counted in edge_http3_connections_total
// too.
func (p *Proxy) AdmitQUIC(peer netip.Addr) wire.Admission {
	st := p.state.Load()
	if st.conns == nil {
		return wire.Admission{}
	}
	adm := p.admitClient(st, peer.Unmap())
	if adm.Refused {
		p.HTTP3Connection(HTTP3ConnRefused)
	}
	return adm
}

// earlyKey carries, in a request's context, whether it arrived before its
// connection's handshake was done: a channel closed once it is.
type earlyKey struct{}

// WithHandshake returns ctx carrying done, closed once the handshake of the
// connection whose requests ctx is for is done; give it to the HTTP/3
// server's ConnContext. A request that arrives before (in 0-RTT data) is
// early: it may be a replay (RFC 8470).
func WithHandshake(ctx context.Context, done <-chan struct{}) context.Context {
	return context.WithValue(ctx, earlyKey{}, done)
}

// isEarly reports whether r arrived in 0-RTT data: its connection's
// handshake is not done. A replay of a client's 0-RTT data on a connection
// of the attacker's never completes its handshake, so a replayed request
// is always early.
func isEarly(r *http.Request) bool {
	done, _ := r.Context().Value(earlyKey{}).(<-chan struct{})
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// early is the step after secure for a request sent in 0-RTT data
// (http3.allow_0rtt): a GET, HEAD or OPTIONS goes on, forwarded with
// Early-Data: 1 so that the origin knows it may be a replay (RFC 8470
// §5.1), and counted against its key like any other (a replay counts
// too); any other method is answered 425 Too Early, in a, and it returns
// false.
func (p *Proxy) early(a *answer, d *domain, r *http.Request) bool {
	if !isEarly(r) {
		return true
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		r.Header["Early-Data"] = earlyData
		return true
	}
	a.tooEarlyAnswer()
	a.altService(p.altSvcOn(requestTLS(r)))
	d.requests.count(a)
	return false
}

// earlyData is the value of Early-Data edge forwards early requests with.
var earlyData = []string{"1"}

// HTTP3Handler is the HTTP/3 server's handler: ServeHTTP, with the fields
// of a connection (Connection, Keep-Alive, Proxy-Connection,
// Transfer-Encoding, Upgrade) left out of every response, as HTTP/3
// forbids them (RFC 9114 §4.2) and quic-go's server sends a handler's
// fields as they are. An answer's "Connection: close" means nothing on a
// stream: the stream ends with the answer, and the connection serves on.
func (p *Proxy) HTTP3Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.ServeHTTP(&http3Writer{ResponseWriter: w}, r)
	})
}

// http3Writer is a response writer of the HTTP/3 server that drops the
// connection's fields as the head is written.
type http3Writer struct {
	http.ResponseWriter
	wrote bool
}

// connectionFields are the fields HTTP/3 forbids in a message.
var connectionFields = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade"}

func (w *http3Writer) WriteHeader(status int) {
	h := w.Header()
	for _, f := range connectionFields {
		delete(h, f)
	}
	if status >= 200 {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *http3Writer) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush sends what was written, as ReverseProxy asks of a streamed body.
func (w *http3Writer) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is for http.ResponseController.
func (w *http3Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
