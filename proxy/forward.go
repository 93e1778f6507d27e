package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sync"

	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/origin"
	"github.com/edgerate/edge/rules"
	"golang.org/x/time/rate"
)

// forward hands an allowed request to its domain's upstream: the origin,
// through the domain's forwarder (newForwarder), or the domain's static
// response (staticResponder).
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, d *domain) {
	d.requests.served.Inc()
	if d.Respond == nil {
		p.inFlight.Add(1)
		defer p.inFlight.Add(-1)
		if d.hsts != nil {
			// ReverseProxy sends the writer's fields with each 1xx and
			// then clears them, which would lose ServeHTTP's HSTS for the
			// final response: that gets it in ModifyResponse, and edge's
			// own answer to a failed forward in errorLog.handle.
			delete(w.Header(), "Strict-Transport-Security")
		}
		if p.started.TLS.HTTP3 { // Alt-Svc likewise (http3.go)
			delete(w.Header(), "Alt-Svc")
		}
	}
	d.upstream.ServeHTTP(w, r)
}

// originSettings are how edge talks to origins under timeouts t, on both
// paths: the transport (newTransport) and the fast forward's pools
// (Proxy.origins) take them. The fast forward takes t.Upstream with each
// request, as a reload may change it.
func originSettings(t rules.Timeouts) origin.Settings {
	return origin.Settings{Upstream: t.Upstream}
}

// newTransport returns the pooled transport shared by every origin
// (origin.Settings.Transport): it bounds the wait for an origin's response
// headers, and a write the origin stops taking, by the configured upstream
// timeout (exceeded: 504, upstreamFailure).
func newTransport(t rules.Timeouts) *http.Transport {
	return originSettings(t).Transport()
}

// newForwarder returns the handler that sends a domain's allowed requests to
// origin with httputil.ReverseProxy.
//
// The origin sees the client's method, Host, path, query, headers and body;
// hop-by-hop fields are dropped by ReverseProxy; X-Forwarded-For, -Host and
// -Proto are set, and this node's Via entry is added (loop.go). Forwarding
// fields from the client are believed only from a trusted proxy: from
// anyone else X-Forwarded-For is replaced by the peer address, and
// Forwarded and X-Real-IP are removed, so an origin that reads them cannot
// be told a client-chosen address.
//
// mergeFields says whether some rule of the domain sends rate-limit fields
// on allowed responses, which then must be merged into the origin's.
//
// Rules that count after the response see its headers before anything
// else does (onResponse, charge.go).
//
// Each try goes to a server of the group the route step chose for the
// request (exchange.group; upstreamTransport, upstream.go): Rewrite sets
// the group's first server's URL, whose path every server of the group
// shares, and the transport each try's server.
func (p *Proxy) newForwarder(d *domain, cip *ClientIP, transport http.RoundTripper, mergeFields bool) http.Handler {
	domain := d.Name
	errLog := newErrorLog(p.log, domain, &d.requests, func(w http.ResponseWriter, err error) { p.refuseBody(w, d, err) })
	errLog.hsts = d.hsts
	errLog.altSvc = p.altSvcOn
	d.errLog = errLog
	obs := p.metrics.upstreamObservers(domain)
	d.upstreamObs = obs // the status page reads them (recent.go)
	for _, g := range d.groups {
		g.fast = p.fastOriginFor(d, g, obs)
	}
	fingerprint := p.started.TLS.FingerprintHeader // restart-only
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(exchangeOf(pr.In.Context()).group.base)
			pr.Out.Host = pr.In.Host
			trusted := false
			if ap, err := netip.ParseAddrPort(pr.In.RemoteAddr); err == nil {
				trusted = cip.Trusted(ap.Addr().Unmap())
			}
			if trusted {
				if xff := pr.In.Header["X-Forwarded-For"]; len(xff) > 0 {
					pr.Out.Header["X-Forwarded-For"] = append([]string(nil), xff...)
				}
			}
			pr.SetXForwarded()
			if f := requestFront(pr.In); f != nil && f.TLS {
				// TLS ended at the balancer in front (front.go), as the
				// fast path's origin head says too.
				pr.Out.Header["X-Forwarded-Proto"] = []string{"https"}
			}
			if trusted {
				for _, f := range []string{"X-Forwarded-Proto", "X-Forwarded-Host"} {
					if v := pr.In.Header[f]; len(v) > 0 {
						pr.Out.Header[f] = v
					}
				}
			} else {
				delete(pr.Out.Header, "Forwarded")
				delete(pr.Out.Header, "X-Real-Ip")
			}
			// This node's Via entry, on a line after the client's
			// (loop.go).
			pr.Out.Header["Via"] = append(pr.Out.Header["Via"], p.via.entry(pr.In))
			// edge answers "Expect: 100-continue" itself (net/http sends
			// 100 Continue when the allowed request's body is first
			// read). Passed on, it would make the transport wait up to
			// ExpectContinueTimeout for an origin that may never send
			// 100, with a body it already holds.
			delete(pr.Out.Header, "Expect")
			// tls.fingerprint_header is edge's to set, never a client's.
			if fingerprint != "" {
				delete(pr.Out.Header, fingerprint)
				if t, _ := pr.In.Context().Value(tlsKey{}).(*wire.TLS); t != nil && t.JA4 != "" {
					pr.Out.Header[fingerprint] = []string{t.JA4}
				}
			}
			// A body on GET, HEAD or OPTIONS may be read by the origin as
			// a request of its own, whose answer would reach the next
			// client on the connection (the fast forward does the same).
			if ignoresBody(pr.In.Method) && pr.In.ContentLength != 0 {
				pr.Out.Close = true
			}
		},
		Transport: upstreamTransport{d: d, rt: transport},
		// Without a pool ReverseProxy allocates a 32 KiB buffer for every
		// response body it copies (docs/performance.md).
		BufferPool:   copyBuffers{},
		ErrorHandler: errLog.handle,
		ErrorLog:     slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
	if mergeFields || d.countsAfter || d.hsts != nil || p.started.TLS.HTTP3 {
		rp.ModifyResponse = func(resp *http.Response) error {
			if d.countsAfter {
				p.onResponse(d, resp)
			}
			if d.hsts != nil && (resp.Request.TLS != nil || isHTTPS(nil, frontOf(resp.Request.Context()))) {
				resp.Header["Strict-Transport-Security"] = d.hsts.value // the domain's, not the origin's
			}
			if alt := p.altSvcOn(contextTLS(resp.Request.Context())); alt != nil {
				resp.Header["Alt-Svc"] = alt.value // edge's, not the origin's
			}
			if !mergeFields {
				return nil
			}
			if ex := exchangeOf(resp.Request.Context()); ex != nil && ex.hasFields {
				ex.fields.merge(resp.Header)
			}
			return nil
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// net/http cancels a request's context when it reads the end of
		// the connection, and a client that half-closes after a complete
		// request (legal in HTTP/1.1: `nc -N` does it) looks exactly like
		// one that closed for good: both send a FIN, and only a write
		// tells them apart. So the forward does not end on that signal,
		// as HAProxy's default (no "option abortonclose") does not: the
		// origin's response is delivered, and a client that is really
		// gone is found by the first write that fails, which aborts the
		// origin request (ReverseProxy panics with http.ErrAbortHandler).
		// The wait for the origin stays bounded by timeouts.upstream.
		//
		// An HTTP/2 client cancels a request by resetting its stream
		// (RST_STREAM), which is never a half-close: there the cancel
		// ends the forward at once, so that a stream reset as soon as
		// it is opened (Rapid Reset) costs no origin round trip.
		if grpcRequest(r.Header) && !p.grpcForward(w, d, exchangeOf(r.Context()).group.base) { // grpc.go
			return
		}
		ctx := r.Context()
		if r.ProtoMajor < 2 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
			defer cancel()
		}
		if len(d.costFields) > 0 {
			w = interimWriter{ResponseWriter: w, d: d}
		}
		rp.ServeHTTP(w, r.WithContext(ctx))
	})
}

// interimWriter removes the domain's response_cost_header fields from the
// 1xx responses ReverseProxy passes on (onHead removes them from the final
// one), which it writes from the fields the origin sent.
type interimWriter struct {
	http.ResponseWriter
	d *domain
}

func (w interimWriter) WriteHeader(code int) {
	if code >= 100 && code <= 199 {
		w.d.dropCostFields(w.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap gives http.ResponseController (ReverseProxy's flushes and
// upgrades) the server's writer.
func (w interimWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// errorLog answers and logs failed forwards. An origin that is down fails
// every request, so logging is limited to a few lines a second per domain,
// and each line says how many were not logged since the last.
type errorLog struct {
	log        *slog.Logger
	domain     string
	refuseBody func(http.ResponseWriter, error)
	counts     *requestCounters             // the domain's
	hsts       *staticField                 // the domain's Strict-Transport-Security, nil for none
	altSvc     func(*wire.TLS) *staticField // the Alt-Svc line on a connection's TLS (http3.go)
	limiter    *rate.Limiter
	mu         sync.Mutex
	suppressed int // errors not logged since the last line
}

func newErrorLog(log *slog.Logger, domain string, counts *requestCounters, refuseBody func(http.ResponseWriter, error)) *errorLog {
	return &errorLog{log: log, domain: domain, counts: counts, refuseBody: refuseBody, limiter: rate.NewLimiter(5, 10)}
}

// handle writes 504 when the origin was too slow, 502 when it could not be
// reached or answered badly, and 400, 408 or 413 when it was the client's
// body that failed (which would otherwise pass for an origin failure).
//
// It never returns without an answer: net/http would complete an empty
// 200 for a handler that wrote nothing, a success the origin never sent.
// When the forward was cancelled (only edge cancels it; see newForwarder)
// it aborts the connection instead.
func (l *errorLog) handle(w http.ResponseWriter, r *http.Request, err error) {
	if l.hsts != nil && (r.TLS != nil || isHTTPS(nil, requestFront(r))) {
		w.Header()["Strict-Transport-Security"] = l.hsts.value // as ServeHTTP set it before the forward
	}
	if l.altSvc != nil {
		if alt := l.altSvc(requestTLS(r)); alt != nil {
			w.Header()["Alt-Svc"] = alt.value // as ServeHTTP set it before the forward
		}
	}
	if berr := bodyError(r); berr != nil {
		l.refuseBody(w, berr)
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil || errors.As(err, new(errLeftQueue)) {
		panic(http.ErrAbortHandler)
	}
	var g *serverGroup // for when_down
	var d *domain      // for origin_busy's counts
	if ex := exchangeOf(r.Context()); ex != nil {
		g, d = ex.group, ex.d
	}
	var a answer
	upstreamFailure(&a, err, d, g)
	if a.outcome != outcomeOriginBusy { // a refusal for load, not a failure: metrics count it
		l.warn(r.Method, r.URL.Path, a.status, err)
	}
	l.counts.count(&a)
	a.write(w)
}

// upstreamFailure makes a the answer to a forward to g the origin
// failed: when_down's (or 502) when no server could be reached, 504 when
// it was too slow, else 502.
func upstreamFailure(a *answer, err error, d *domain, g *serverGroup) {
	if errors.As(err, new(errOriginDown)) {
		downAnswer(a, g, errors.Is(err, origin.ErrDrained))
		return
	}
	if errors.Is(err, origin.ErrBusy) {
		busyAnswer(a, d, err) // upstream.go
		return
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		a.textAnswer(http.StatusGatewayTimeout, outcomeOriginTimeout, "gateway timeout: the origin did not answer in time\n")
		return
	}
	a.textAnswer(http.StatusBadGateway, outcomeOriginFailed, "bad gateway: the origin could not be reached\n")
}

// warn logs a failed forward, at most as often as the limiter lets it,
// counting the lines it holds back.
func (l *errorLog) warn(method, path string, status int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.limiter.Allow() {
		l.suppressed++
		return
	}
	l.log.Warn("upstream request failed",
		"domain", l.domain, "method", method, "path", path,
		"status", status, "err", err, "suppressed", l.suppressed)
	l.suppressed = 0
}

// copyBuffers recycles ReverseProxy's response copy buffers. It pools
// pointers to arrays, so that neither Get nor Put allocates.
type copyBuffers struct{}

const copyBufferSize = 32 << 10 // ReverseProxy's own size

var copyBufferPool = sync.Pool{New: func() any { return new([copyBufferSize]byte) }}

func (copyBuffers) Get() []byte { return copyBufferPool.Get().(*[copyBufferSize]byte)[:] }

func (copyBuffers) Put(b []byte) {
	if cap(b) >= copyBufferSize {
		copyBufferPool.Put((*[copyBufferSize]byte)(b[:copyBufferSize]))
	}
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
