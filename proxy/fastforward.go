package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/origin"
	"github.com/edgerate/edge/rules"
)

// The fast forward: a request the fast path (fast.go) finds allowed is
// sent to the origin from the guard's parsed head, on a pool of origin
// connections (package origin: Pool.RoundTrip), without an http.Request,
// a ResponseWriter or the transport's goroutines.
//
// Its contract: what the client and the origin see means what the slow
// path (forward.go: httputil.ReverseProxy behind net/http's server) makes
// them see, not byte for byte: the same request at the origin (originhead.go,
// fastbody.go), and at the client the same responses in the same order
// with the same status, end-to-end fields, body and trailers, on a
// connection closed where the slow path closes it; only how an answer is
// framed and cut into writes may differ (fastframe.go). Failures are the
// same answers (502, 504; the client's body failing: 400, 408, 413).
// What the rules do with the response happens where ReverseProxy's
// ModifyResponse does it (relay.onHead, with charge.go and fields.go),
// and the request's tally ends when the answer is complete or has failed.
// It applies only where that is all the slow path does (fastOriginFor).
// How each part is done, where the paths may differ, and what the
// differential tests check: docs/performance.md, "Forwarding without
// net/http".

// fastFlushAt: the answer is written to the client when this much of it is
// held, or the origin's next read would wait.
const fastFlushAt = 32 << 10

// fastOrigin is a group of a domain's servers for the fast forward: a
// pool of connections per server.
type fastOrigin struct {
	group   *origin.Upstream
	servers []*origin.Server
	pools   []*origin.Pool // parallel to servers
	obs     *upstreamObservers
}

// pool returns the pool of s.
func (fo *fastOrigin) pool(s *origin.Server) *origin.Pool {
	for i, o := range fo.servers {
		if o == s {
			return fo.pools[i]
		}
	}
	return nil
}

// fastOriginFor returns d's group g for the fast forward, or nil where
// the fast forward does not apply (see above).
func (p *Proxy) fastOriginFor(d *domain, g *serverGroup, obs *upstreamObservers) *fastOrigin {
	if !p.ownTransport || d.queue != nil || d.shed != nil {
		return nil
	}
	if d.originQueue != nil && d.originQueue.Options().Timeout > 0 {
		// A wait for a server below its max_in_flight ends when the
		// client leaves: net/http's request context says so, and the
		// fast path has no such signal.
		return nil
	}
	if p.cluster != nil && d.store != nil && (p.cluster.Config().Sync == rules.SyncExact || d.countsAfter || d.slots) {
		// With Redis in exact mode every decision, and in any mode a
		// charge after the response or a slot, is a round trip, and its
		// failures are ServeHTTP's.
		return nil
	}
	fo := &fastOrigin{group: g.origins, servers: g.origins.Servers(), obs: obs}
	for _, s := range fo.servers {
		u := s.URL
		if u.Scheme != "http" && u.Scheme != "https" || u.User != nil || u.Opaque != "" || u.RawQuery != "" ||
			u.ForceQuery || u.RawPath != "" || u.Path != "" && u.Path != "/" || u.Host == "" {
			return nil
		}
		var t *origin.TLS // in the clear
		if u.Scheme == "https" {
			t = g.tls.tls // origintls.go
		}
		fo.pools = append(fo.pools, p.origins.Pool(s.Addr(), t))
	}
	return fo
}

// forwardFast forwards head, the request of ex that limit allowed, to its
// domain's origin and appends the rest of the answer to out, having
// written what came before through head.Client. What the request's rules
// still do with the response is ex.after and ex.fields.
func (p *Proxy) forwardFast(ex *exchange, head *Head, out []byte) []byte {
	d, method := ex.d, ex.method
	trusted := ex.st.clientIP.Trusted(head.Peer)
	upstream := ex.st.table.Timeouts.Upstream
	var fields *fields // the rate-limit fields of rules with headers: always (fields.go)
	if ex.hasFields {
		fields = &ex.fields
	}
	// A copy: the forward keeps its Head where escape analysis loses track
	// of it, and the copy, made only for a request forwarded, leaves the
	// caller's on its stack, so that a refusal allocates nothing.
	hc := *head
	h := &hc
	h.Client.Forwarding()
	fb, err := p.readFastBody(ex.st, d, h) // fastbody.go: buffering, or 400/408/413
	if err != nil {
		return p.refuseFastBody(d, h, method, err, out, &ex.done)
	}
	defer fb.release()
	ex.after.sending(p.now) // charge.go: origin_time counts from here
	d.requests.served.Inc()
	p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	s := forwardScratches.Get().(*forwardScratch)
	defer func() {
		if cap(s.keys) <= 64<<10 && cap(s.head) <= 64<<10 {
			forwardScratches.Put(s)
		}
	}()
	// An origin may not expect a body on GET, HEAD or OPTIONS, and read
	// it as a request of its own, whose answer could reach the next
	// client on this connection: it is closed after this answer, and the
	// origin told so, as the transport tells it for Request.Close.
	once := fb.r != nil && ignoresBody(method)
	s.frame = s.frame[:0]
	if once {
		s.frame = append(s.frame, "Connection: close\r\n"...)
	}
	var ferr error
	s.frame, ferr = fb.appendFraming(s.frame, method)
	s.head = s.appendOriginHead(s.head[:0], h, trusted, s.frame, p.via.field, p.started.TLS.FingerprintHeader)
	fo := ex.group.fast
	r := relay{p: p, d: d, g: ex.group, h: h, client: h.Client, out: out, isHEAD: method == http.MethodHead,
		charges: ex.after, fields: fields, rep: &ex.done}
	req := origin.Request{Replayable: replayable(h, method, &fb), Once: once, HEAD: r.isHEAD, Timeout: upstream}
	fb.merge(&s.head) // a small body buffered whole goes in the head's write
	req.Head, req.Merged = s.head, fb.merged
	var body origin.SendBody
	if fb.r != nil {
		body = fb.Send
	}
	var oc *origin.Conn
	var resp *http.Response
	if err = ferr; err == nil {
		oc, resp, err = p.fastTrips(ex, fo, &r, &req, body, &fb, s.buf[:])
		if ex.logged() {
			ex.noteLeft(h.Client)
		}
	}
	if err != nil {
		if ce := (errClientBody{}); errors.As(err, &ce) {
			ex.up = upstreamReport{}
			return p.refuseFastBody(d, h, method, ce.err, r.out, &ex.done)
		}
		if h.Body != nil {
			_ = h.Body.Close() // as the transport closes it
		}
		return r.fail(err)
	}
	r.br, r.origin = oc.Reader(), oc.NetConn()
	reuse := r.respond(resp, s.buf[:])
	if ex.done.status == 0 { // the answer broke off (accesslog.go)
		ex.done = answerReport{status: resp.StatusCode, outcome: outcomeServed}
	}
	if reuse {
		r.pool.Put(oc, time.Now()) // kept only if nothing outside this answer is left read
	} else {
		oc.Close()
	}
	return r.out
}

// fastTrips sends req to servers of fo's group until one answers or the
// group allows no more tries (the fast forward's upstreamTransport): each
// try observed, counted and reported in ex.up, as on the net/http path.
// r.pool is set to the pool of the connection returned.
func (p *Proxy) fastTrips(ex *exchange, fo *fastOrigin, r *relay, req *origin.Request, body origin.SendBody,
	fb *fastBody, buf []byte) (*origin.Conn, *http.Response, error) {
	var kb [128]byte
	trip := fo.group.Start(ex.now, groupKey(kb[:0], ex))
	idempotent := origin.Idempotent(ex.method)
	bodyless := fb.r == nil && !fb.merged
	_, prefix := fb.r.(*prefixReader)
	whole := fb.merged || prefix && int64(len(fb.r.(*prefixReader).buf)) == fb.size
	now := ex.now // the group decides by the request's clock; tries are timed by the wall clock
	var lastErr error
	for {
		// Only a group whose requests never wait comes here
		// (fastOriginFor): no context is needed to end a wait.
		srv, err := trip.Next(context.Background(), now)
		if err != nil {
			return nil, nil, err
		}
		if srv == nil {
			return nil, nil, noServer(&trip, lastErr) // upstream.go
		}
		pool := fo.pool(srv)
		tryStart := time.Now()
		oc, resp, err := pool.RoundTrip(req, body, r.interim, tryStart, buf)
		end := time.Now()
		if err != nil && errors.As(err, new(errClientBody)) {
			trip.End(srv, 0, 0, end.Sub(tryStart), now) // the client's failure, not the server's
			return nil, nil, err
		}
		status, f := tryResult(resp, err)
		endTry(&trip, fo.obs, ex, srv, status, f, end.Sub(tryStart), now)
		safe := !r.sentInterim && (idempotent || f == origin.FailConnect) &&
			(bodyless || whole && f == origin.FailConnect)
		if trip.MayRetry(f, safe, now) {
			if resp != nil {
				resp.Body.Close()
				oc.Close()
			}
			lastErr = err
			continue
		}
		if err != nil {
			if f == origin.FailConnect {
				err = errOriginDown{err}
			}
			return nil, nil, err
		}
		r.pool = pool
		return oc, resp, nil
	}
}

// ignoresBody reports whether an origin may ignore a request body sent
// with method, which has no defined meaning for it (RFC 9110, 9.3.1,
// 9.3.2, 9.3.7).
func ignoresBody(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}

// relay is one fast forward's answer to its client.
type relay struct {
	p      *Proxy
	d      *domain
	g      *serverGroup // the group forwarded to
	h      *Head
	client wire.ClientWriter
	out    []byte
	br     *bufio.Reader // the origin connection's
	origin net.Conn      // closed first when the answer fails
	isHEAD bool
	failed bool // a write to the client failed
	// sentInterim: a 1xx response went to the client (no retry after
	// it); pool is the pool of the answering server's connection.
	sentInterim bool
	pool        *origin.Pool
	// charges are what the request's rules count once the origin answers
	// (charge.go), nil for nothing; fields the rate-limit fields merged
	// into the origin's head (fields.go), nil for none.
	charges *afterResponse
	fields  *fields
	// rep is what the answer sent, for the access log; sent says some
	// write to the client succeeded.
	rep  *answerReport
	sent bool
}

// flush writes what the answer holds to the client.
func (r *relay) flush() {
	if len(r.out) > 0 && !r.failed {
		if _, err := r.client.Write(r.out); err != nil {
			r.failed = true
		} else {
			r.sent = true
		}
	}
	r.out = r.out[:0]
}

// interim passes resp, a 1xx response, on to the client, as
// ReverseProxy's Got1xxResponse hook and net/http's server do.
func (r *relay) interim(resp *http.Response) {
	r.d.dropCostFields(resp.Header)
	r.out = appendStatusLine(r.out, resp.StatusCode)
	r.out = appendHeader(r.out, resp.Header, excludedNoBody)
	r.out = append(r.out, "\r\n"...)
	r.sentInterim = true
	r.flush()
}

// fail answers a forward that got no response, as errorLog.handle does.
func (r *relay) fail(err error) []byte {
	l := r.d.errLog
	var a answer
	upstreamFailure(&a, err, r.d, r.g) // forward.go
	a.strictTransport(r.d, isHTTPS(r.h.TLS, r.h.Front))
	a.altService(r.p.altSvcOn(r.h.TLS))
	if a.outcome != outcomeOriginBusy { // as errorLog.handle
		l.logFast(string(r.h.Method), r.h.Target, a.status, err)
	}
	r.d.requests.count(&a)
	endBody(r.h, &a)
	if r.rep != nil {
		r.rep.sentAnswer(&a, r.isHEAD)
	}
	return a.appendTo(r.out, time.Now(), r.isHEAD)
}

// logFast logs a failed fast forward as handle logs a failed forward.
func (l *errorLog) logFast(method string, target []byte, status int, err error) {
	l.warn(method, fastLogPath(target), status, err)
}

// bodyFailed logs an origin's response body that broke off, which ends
// the answer and its client's connection. The slow path's line for it is
// ReverseProxy's own (its ErrorLog, forward.go); this one is limited and
// counted as warn's lines are.
func (l *errorLog) bodyFailed(method string, target []byte, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.limiter.Allow() {
		l.suppressed++
		return
	}
	l.log.Warn("upstream response body failed",
		"domain", l.domain, "method", method, "path", fastLogPath(target), "err", err, "suppressed", l.suppressed)
	l.suppressed = 0
}

// fastLogPath is the path of target as net/http's URL.Path gives it.
func fastLogPath(target []byte) string {
	raw, _, _ := strings.Cut(string(target), "?")
	path, err := url.PathUnescape(raw)
	if err != nil {
		return raw
	}
	return path
}

// relay writes resp, the origin's final response, to the client as
// ReverseProxy and net/http's server would, and reports whether the origin
// connection may be used again. buf is the copy buffer.
func (r *relay) respond(resp *http.Response, buf []byte) bool {
	status := resp.StatusCode
	if status == http.StatusSwitchingProtocols {
		r.onHead(resp) // ReverseProxy's ModifyResponse sees a 101 as it came
		resp.Body.Close()
		err := fmt.Errorf("backend tried to switch protocol %q when %q was requested", upgradeOf(resp.Header), "")
		r.out = r.fail(err)
		return false
	}
	hdr := resp.Header
	removeHopByHop(hdr)
	r.onHead(resp)
	if status < 100 || status > 999 {
		// net/http's WriteHeader panics; the server closes the connection.
		r.abandon()
		resp.Body.Close()
		r.client.CloseAfter()
		return false
	}
	announced := len(resp.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		hdr.Add("Trailer", strings.Join(keys, ", "))
	}
	w := responseWriter{r: r, hdr: hdr, status: status, contentLength: -1}
	if cl := first(hdr, "Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.contentLength = v
		} else {
			delete(hdr, "Content-Length")
		}
	}
	for _, v := range hdr["Trailer"] {
		forEachElement(v, func(k string) {
			k = http.CanonicalHeaderKey(k)
			if validTrailer(k) {
				w.trailers = append(w.trailers, k)
			}
		})
	}
	if !w.copyBody(resp.Body, buf) {
		// ReverseProxy aborts the handler, and net/http closes the
		// connection after what it had written.
		r.served(status, w.written)
		r.abandon()
		resp.Body.Close()
		r.client.CloseAfter()
		return false
	}
	resp.Body.Close() // reads the trailers
	if !w.wroteHeader {
		w.writeHeader(nil) // no body: the head, before the trailers join hdr
	}
	if len(resp.Trailer) == announced {
		for k, vv := range resp.Trailer {
			for _, v := range vv {
				hdr.Add(k, v)
			}
		}
	} else {
		for k, vv := range resp.Trailer {
			for _, v := range vv {
				hdr.Add(http.TrailerPrefix+k, v)
			}
		}
	}
	w.finish()
	r.served(status, w.written)
	if r.failed {
		r.client.CloseAfter()
		return false
	}
	return !resp.Close
}

// onHead is ModifyResponse for the response head resp: what the request's
// rules do with it, as ReverseProxy's ModifyResponse does it (forward.go).
func (r *relay) onHead(resp *http.Response) {
	if r.d.countsAfter { // charges may be nil: the cost fields go all the same
		r.p.onHead(r.d, r.charges, resp, true)
	}
	if r.fields != nil {
		r.fields.merge(resp.Header)
	}
	if isHTTPS(r.h.TLS, r.h.Front) && r.d.hsts != nil {
		resp.Header["Strict-Transport-Security"] = r.d.hsts.value // the domain's, not the origin's
	}
	if alt := r.p.altSvcOn(r.h.TLS); alt != nil {
		resp.Header["Alt-Svc"] = alt.value // edge's, not the origin's
	}
}

// served reports the origin's response relayed, with status and body
// bytes, as sent (accesslog.go): 499 when no write reached the client.
func (r *relay) served(status int, bytes int64) {
	if r.rep == nil {
		return
	}
	*r.rep = answerReport{status: status, bytes: bytes, outcome: outcomeServed}
	if r.failed && !r.sent {
		r.rep.status = statusClientGone
	}
}

// abandon closes the origin connection of an answer that failed, before
// its body is closed: http.ReadResponse's body, closed, reads on to its
// end (which an endless stream never reaches), where the transport's
// drops the connection.
func (r *relay) abandon() {
	if r.origin != nil {
		r.origin.Close()
	}
}
