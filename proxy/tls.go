package proxy

import (
	"context"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/certs"
	"github.com/edgerate/edge/internal/wire"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TLS on the public listener: the handshake is the listener's (package
// certs, a stage of the framing guard), and each request over it carries
// the connection's wire.TLS. What a request's TLS changes is decided here,
// once for both paths: a plain request to a domain with https_redirect is
// sent to https (308); a request whose Host the connection's certificate is
// not for is misdirected (421); the origin is told the scheme
// (X-Forwarded-Proto) and, with tls.fingerprint_header, the client's JA4;
// a domain with hsts_max_age adds Strict-Transport-Security to its HTTPS
// responses; a rule keyed by ja4 keys by the fingerprint.

// tlsKey carries a connection's TLS in a request's context.
type tlsKey struct{}

// WithTLS returns ctx carrying t, a connection's TLS; give it to the
// http.Server's ConnContext for each connection over TLS, so that
// ServeHTTP knows it (net/http sets Request.TLS only for a *tls.Conn,
// which a connection of the framing guard never is).
func WithTLS(ctx context.Context, t *wire.TLS) context.Context {
	if t == nil {
		return ctx
	}
	return context.WithValue(ctx, tlsKey{}, t)
}

// contextTLS returns the TLS WithTLS put in ctx, nil without.
func contextTLS(ctx context.Context) *wire.TLS {
	t, _ := ctx.Value(tlsKey{}).(*wire.TLS)
	return t
}

// requestTLS returns the TLS of r's connection, nil without, and sets
// r.TLS from it, as net/http does for its own TLS connections (the
// forwarder's X-Forwarded-Proto is read from it).
func requestTLS(r *http.Request) *wire.TLS {
	t, _ := r.Context().Value(tlsKey{}).(*wire.TLS)
	if t != nil && r.TLS == nil {
		r.TLS = &t.State
	}
	return t
}

// acmeChallenge is the path prefix an ACME server fetches HTTP-01
// challenges from, over plain HTTP: never redirected.
const acmeChallenge = "/.well-known/acme-challenge/"

// secure is the step after route for what the connection's TLS (t, nil
// without) and the balancer in front of it (f, nil for none; front.go) say
// of a request of d to host, whose Host and target are as sent: it
// returns false, with the answer in a, when the request goes no further.
// A plain request to a domain with https_redirect, but for an ACME
// challenge, is redirected; a request over TLS whose host the connection's
// certificate is not for is misdirected.
func (p *Proxy) secure(a *answer, d *domain, t *wire.TLS, f *wire.Front, rawHost, host, target string) bool {
	switch insecure(d, t, f, host, target) {
	case redirected:
		a.redirectAnswer(p.httpsURL(a.vals[:0], rawHost, target))
		d.requests.count(a)
		return false
	case uncovered:
		p.metrics.misdirected.Inc()
		a.uncoveredAnswer()
		a.strictTransport(d, true)
		a.altService(p.altSvcOn(t))
		return false
	}
	return true
}

// What secure answers.
const (
	secured    = iota // nothing: the request goes on
	redirected        // 308 to https
	uncovered         // 421: the certificate is not for the host
)

// insecure says what secure answers, without answering: the fast path
// declines a HEAD that it would answer, as net/http frames HEAD answers.
func insecure(d *domain, t *wire.TLS, f *wire.Front, host, target string) int {
	switch {
	case !isHTTPS(t, f) && d.HTTPSRedirect && !strings.HasPrefix(target, acmeChallenge):
		return redirected
	case t != nil && t.Cert != nil && !t.Cert.Covers(host):
		return uncovered
	}
	return secured
}

// originForm is r's target as sent in origin form ("/path?query"), as the
// fast path sees it; an absolute-form target as its URL writes it.
func originForm(r *http.Request) string {
	if strings.HasPrefix(r.RequestURI, "/") {
		return r.RequestURI
	}
	return r.URL.RequestURI()
}

// httpsURL appends to b the https URL of a request to rawHost (the Host as
// sent) for target: the host without its port, the HTTPS listener's port
// unless it is 443, and the target as sent. It is appended into the
// answer's own values (redirectAnswer moves it within them).
func (p *Proxy) httpsURL(b []byte, rawHost, target string) []byte {
	b = append(b, "https://"...)
	b = append(b, hostWithoutPort(rawHost)...)
	if port := p.httpsPort.Load(); port != 0 && port != 443 {
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(port), 10)
	}
	return append(b, target...)
}

// hostWithoutPort cuts the port off a Host value, "[v6]:port" included.
func hostWithoutPort(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		return h[:i]
	}
	return h
}

// SetHTTPSPort tells the proxy the port its HTTPS listener is bound to,
// which https_redirect sends clients to; call it once the listener is
// bound (tls.listen may ask for port 0).
func (p *Proxy) SetHTTPSPort(port int) { p.httpsPort.Store(int64(port)) }

// TLSHandshake counts and times a handshake of the HTTPS listener, and
// logs a failed one at most once a second in all (a flood of garbage would
// otherwise log a line per connection); give it to certs.Options.OnHandshake.
func (p *Proxy) TLSHandshake(h certs.Handshake) {
	p.metrics.tlsHandshakes.WithLabelValues(h.Result).Inc()
	p.metrics.tlsHandshakeSeconds.Observe(h.Duration.Seconds())
	if h.Err == nil {
		return
	}
	suppressed, ok := p.tlsLog.allow(p.now())
	if !ok {
		return
	}
	peer := ""
	if h.Peer != nil {
		peer = h.Peer.String()
	}
	p.log.Info("tls handshake failed", "result", h.Result, "peer", peer, "err", h.Err.Error(), "suppressed", suppressed)
}

// SetCertificates tells the proxy the certificates its HTTPS listener
// serves, at start and after each reload: the expiry metric shows one
// series per certificate, and the status page lists them.
func (p *Proxy) SetCertificates(in []certs.Info) {
	list := append([]certs.Info(nil), in...)
	p.certificates.Store(&list)
}

// Certificates returns what SetCertificates last said, nil before.
func (p *Proxy) Certificates() []certs.Info {
	if l := p.certificates.Load(); l != nil {
		return *l
	}
	return nil
}

// certificateSoon is how close to its expiry the status page highlights a
// certificate: 14 days, when the alert EdgeCertificateExpiringSoon
// (docs/alerts.yaml) fires.
const certificateSoon = 14 * 24 * time.Hour

// handshakeResults are the results edge_tls_handshakes_total counts, in
// the order the status page lists them.
var handshakeResults = []string{certs.ResultOK, certs.ResultUnknownSNI, certs.ResultRejected, certs.ResultPlainHTTP, certs.ResultError}

// tlsStatusView is GET /v1/status's tls, the status page's Certificates
// section: the certificates the HTTPS listener serves, in config order,
// and its handshakes since start by result (every result, 0 when none),
// as edge_tls_handshakes_total counts them.
type tlsStatusView struct {
	Certificates []certificateView  `json:"certificates"`
	Handshakes   map[string]float64 `json:"handshakes"`
}

// certificateView is one certificate as the status page shows it.
// DaysLeft is the whole days until NotAfter, rounded down (negative once
// expired); ExpiresSoon is less than certificateSoon left, expired
// included.
type certificateView struct {
	File        string    `json:"file"`
	Names       []string  `json:"names"`
	Issuer      string    `json:"issuer"`
	NotAfter    time.Time `json:"not_after"`
	DaysLeft    int       `json:"days_left"`
	ExpiresSoon bool      `json:"expires_soon"`
	Expired     bool      `json:"expired"`
}

// tlsStatus is the HTTPS listener's status at now; nil when edge serves
// no TLS (SetCertificates was never called).
func (p *Proxy) tlsStatus(now time.Time) *tlsStatusView {
	l := p.certificates.Load()
	if l == nil {
		return nil
	}
	v := &tlsStatusView{Certificates: make([]certificateView, 0, len(*l)), Handshakes: make(map[string]float64, len(handshakeResults))}
	for _, c := range *l {
		left := c.NotAfter.Sub(now)
		v.Certificates = append(v.Certificates, certificateView{
			File: c.File, Names: append([]string{}, c.Names...), Issuer: c.Issuer, NotAfter: c.NotAfter.UTC(),
			DaysLeft:    int(math.Floor(left.Hours() / 24)),
			ExpiresSoon: left < certificateSoon,
			Expired:     !now.Before(c.NotAfter),
		})
	}
	counts := labelledCounts(p.metrics.tlsHandshakes)
	for _, r := range handshakeResults {
		v.Handshakes[r] = counts[r]
	}
	return v
}

// labelledCounts reads the counters of v, a vector of one label, by that
// label's value, as /metrics would export them. Unlike WithLabelValues it
// makes no series: a result never seen stays out of /metrics.
func labelledCounts(v *prometheus.CounterVec) map[string]float64 {
	ch := make(chan prometheus.Metric)
	go func() { // ends when Collect has sent every series
		v.Collect(ch)
		close(ch)
	}()
	out := make(map[string]float64)
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err == nil && len(d.GetLabel()) == 1 {
			out[d.GetLabel()[0].GetValue()] = d.GetCounter().GetValue()
		}
	}
	return out
}

// tlsState is what the proxy keeps of its HTTPS listener.
type tlsState struct {
	httpsPort    atomic.Int64
	certificates atomic.Pointer[[]certs.Info]
	tlsLog       onceASecond
	// altSvc is the Alt-Svc line of HTTPS responses, nil without HTTP/3
	// (http3.go).
	altSvc atomic.Pointer[staticField]
}

// ConnContext is the public server's ConnContext: a connection over TLS
// gives its requests its TLS (WithTLS), one that began with a PROXY header
// what the header said (WithFront). tlsOf returns a connection's TLS, nil
// without (guard.TLSOf); frontOf its wire.Front, nil without
// (guard.FrontOf).
func ConnContext(tlsOf func(net.Conn) *wire.TLS, frontOf func(net.Conn) *wire.Front) func(context.Context, net.Conn) context.Context {
	return func(ctx context.Context, c net.Conn) context.Context {
		ctx = WithFront(WithTLS(ctx, tlsOf(c)), frontOf(c))
		if l, ok := c.(leaver); ok { // accesslog.go: connLeaver
			ctx = context.WithValue(ctx, leftKey{}, l)
		}
		return ctx
	}
}
