package proxy

import (
	"net/http"
	"time"

	"github.com/edgerate/edge/rules"
)

// ServeHTTP carries one request through edge. Each step is one function in
// its own file, called here in the order the request passes them; what a
// step finds it leaves in the request's exchange (exchange.go), and a step
// that answers the request itself returns nil (or false, or an answer),
// and the request goes no further.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := p.now()
	st := p.state.Load()
	al := st.alog
	if al == nil {
		p.serve(w, r, st, now, nil)
		return
	}
	// accesslog.go: the line is written when the answer ends, with what
	// the exchange found (lw.took) and what net/http sent (lw); a serve
	// that does not return (http.ErrAbortHandler) is a client gone.
	lw := startLog(w, r, now)
	defer p.endLog(al, lw)
	p.serve(lw, r, st, now, lw)
	lw.returned = true
}

// serve is ServeHTTP's steps, under the configuration st, for a request
// that arrived at now; lw is the access log's writer (w), nil for none.
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, st *state, now time.Time, lw *loggedWriter) {
	if !p.screen(w, r) { // screen.go: refused requests are never forwarded
		return
	}
	d, host := p.route(w, r, st) // route.go: 421, or 400 for an invalid Host
	if d == nil {
		return
	}
	ex := exchanges.Get().(*exchange)
	ex.st, ex.d, ex.host, ex.method, ex.now, ex.req = st, d, host, r.Method, now, r
	carried := false
	defer func() {
		if lw != nil {
			lw.took(ex, st.alog.cfg.Keys)
		}
		if !carried {
			ex.recycle(&exchanges)
		}
	}()
	if target := originForm(r); isChallenge(d, r.Method, target) { // acme.go: before any rule
		p.challenge(&ex.ans, d, host, target)
		ex.ans.write(w)
		return
	}
	if p.via.in(r.Header["Via"]) { // loop.go: 508, before any rule
		p.refuseLoop(ex, isHTTPS(requestTLS(r), requestFront(r)))
		ex.ans.write(w)
		return
	}
	ex.tls = requestTLS(r)
	front := requestFront(r) // what a PROXY header said (front.go)
	// tls.go: 308 to https, 421
	if !p.secure(&ex.ans, d, ex.tls, front, r.Host, host, originForm(r)) {
		ex.ans.write(w)
		return
	}
	if !p.early(&ex.ans, d, r) { // http3.go: 425 for an unsafe request in 0-RTT data
		ex.ans.write(w)
		return
	}
	if isHTTPS(ex.tls, front) && d.hsts != nil {
		w.Header()["Strict-Transport-Security"] = d.hsts.value // on every answer; a forward's: forward.go
	}
	if alt := p.altSvcOn(ex.tls); alt != nil {
		w.Header()["Alt-Svc"] = alt.value // on every answer; a forward's: forward.go
	}
	if d.store != nil || d.Upstream != nil && d.Upstream.Balance == rules.BalanceHash {
		// Rules key requests by it, and so does a hash group (upstream.go).
		ex.src, ex.id = p.identify(r, st, host, now) // identify.go
		if ex.tls != nil {
			ex.src.JA4 = ex.tls.JA4
		}
		if !p.verifyToken(ex) { // token.go: 401 under jwt invalid: refuse
			countToken(ex)
			d.requests.count(&ex.ans)
			ex.ans.write(w)
			return
		}
		if !p.priceGraphQL(w, r, ex) { // graphql.go: 400, 413, 503
			if ex.held != nil {
				ex.held()
			}
			return
		}
		if ex.held != nil {
			defer ex.held()
		}
		step := p.limit(r.Context(), ex, nil)
		countToken(ex)
		switch step { // limit.go decides; answer.go makes a refusal
		case stepAnswer:
			ex.ans.write(w)
			return
		case stepGone:
			// Gone, or only half-closed (net/http cancels the request on
			// either) while it waited for its turn: a handler never ends
			// without an answer, so close the connection rather than let
			// net/http invent a 200.
			panic(http.ErrAbortHandler)
		}
		if ex.after != nil { // charge.go: limit kept the tally open
			defer p.endHeld(ex.after)
		}
		if ex.hasFields && d.Respond != nil { // fields.go: the domain answers itself
			ex.fields.set(w.Header())
		}
	}
	if d.Respond == nil {
		// The forwarder's hooks need the exchange (charge.go, fields.go,
		// body.go), and so does the origin component's transport, which
		// decides by the request's clock and key and reports what it
		// found in ex.up (upstream.go), which the access log reads: it
		// goes in the request's context, and is not reused.
		r, carried = withExchange(r, ex), true
	}
	release := p.readBody(w, r, ex) // body.go: 413, buffering
	if release == nil {
		return
	}
	defer release()
	if d.shed != nil { // shed.go: 503, once the request is ready for the origin
		if !p.admit(r, ex, d.shed, rules.CleanPath(r.URL.Path)) {
			p.giveBack(ex.after) // charge.go
			d.requests.count(&ex.ans)
			ex.ans.write(w)
			return
		}
		defer d.shed.release()
	}
	ex.after.sending(p.now) // charge.go: origin_time counts from here
	p.forward(w, r, d)      // forward.go
}
