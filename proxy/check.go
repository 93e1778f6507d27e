package proxy

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"

	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
)

// This file answers the check listener (config section check): every
// request to it is a question from another proxy (nginx auth_request,
// Traefik ForwardAuth, Caddy forward_auth), "may this client's request go
// on?", about the request that proxy describes in forwarded fields. The
// request is rebuilt from them (readQuestion) and then takes the proxied
// request's own steps, screen, route, identify and limit, with their
// code; nothing is forwarded, and nothing waits for a response (rules
// that would are refused by the configuration on such domains).
//
// The answer is 200, with the rate-limit fields of rules with headers
// always, when the request may go on; anything else is check.deny_status,
// with the answer the proxied request would have had (a 429's Retry-After,
// fields and body; a 400's reason) under that status, because nginx's
// auth_request understands only 401 and 403. Every answer says which it
// is in X-Edge-Answer (answerAllowed and the others below), since the
// status cannot: a proxy in front tells a refusal from its own
// misconfiguration by it (nginx: auth_request_set from
// $upstream_http_x_edge_answer).

// Answers of the check listener, the values of edge_check_answers_total's
// answer label.
const (
	answerAllowed      = "allowed"      // 200: the request may go on
	answerRefused      = "refused"      // a rule refused it (or its store could not decide)
	answerUnreadable   = "unreadable"   // forwarded fields missing or malformed, or screened out
	answerMisdirected  = "misdirected"  // no domain that serves check claims its host
	answerUnauthorized = "unauthorized" // check.token missing or wrong
)

// edgeAnswerField is the response field that names the answer.
const edgeAnswerField = "X-Edge-Answer"

// checkAnswered counts answer and names it in w's X-Edge-Answer, before
// the answer is written.
func (p *Proxy) checkAnswered(w http.ResponseWriter, answer string) {
	p.metrics.checkAnswers.WithLabelValues(answer).Inc()
	w.Header()[edgeAnswerField] = []string{answer}
}

// CheckHandler returns the handler of the check listener. It reads the
// running configuration on every question, so a reload that changes the
// check section's deny_status or token, or the domains, applies at once;
// while the configuration has no check section every question is refused
// with 503.
func (p *Proxy) CheckHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := p.state.Load()
		al := st.alog
		if al == nil {
			p.serveCheck(w, r, st, nil)
			return
		}
		// accesslog.go: questions are logged with their answer, as
		// ServeHTTP logs a request.
		lw := startLog(w, r, p.now())
		defer p.endLog(al, lw)
		p.serveCheck(lw, r, st, lw)
		lw.returned = true
	})
}

// serveCheck answers one question under the configuration st, in the
// steps ServeHTTP takes; lw is the access log's writer (w), nil for none.
func (p *Proxy) serveCheck(w http.ResponseWriter, r *http.Request, st *state, lw *loggedWriter) {
	c := st.table.Check
	if c == nil {
		writeText(w, http.StatusServiceUnavailable, "service unavailable: the check listener is not configured\n")
		return
	}
	cw := &denyWriter{ResponseWriter: w, deny: c.DenyStatus}
	if c.Token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(rules.CheckTokenHeader)), []byte(c.Token)) != 1 {
		noteOutcome(w, outcomeCheck)
		p.checkAnswered(w, answerUnauthorized)
		writeText(cw, http.StatusUnauthorized, "unauthorized: missing or wrong "+rules.CheckTokenHeader+"\n")
		return
	}
	q, reason := readQuestion(r)
	if reason == "" {
		reason = screenRequest(q).reason // screen.go
	}
	if reason != "" {
		noteOutcome(w, outcomeCheck)
		p.checkAnswered(w, answerUnreadable)
		writeText(cw, http.StatusBadRequest, "bad request: "+reason+"\n")
		return
	}
	if lw != nil { // the question's request, not the asking one
		e := &lw.line.e
		e.Host, e.Method, e.Target = q.Host, q.Method, q.RequestURI
	}
	now := p.now()
	host, validHost := wire.NormalizeHost(q.Host)
	d := st.lookup(host, true) // route.go
	if d == nil {
		p.checkAnswered(w, answerMisdirected)
		p.misdirected(cw, validHost)
		return
	}
	if lw != nil {
		lw.line.e.Domain, lw.skip = d.Name, d.NoAccessLog
	}
	if d.store != nil {
		ex := &exchange{st: st, d: d, host: host, method: q.Method, now: now, req: q, dec: ruleDecisions{blocker: -1}}
		if lw != nil {
			defer lw.took(ex, st.alog.cfg.Keys)
		}
		ex.src, ex.id = p.identify(q, st, host, now) // identify.go
		if ex.id.XFFMalformed || (st.clientIP.Trusted(ex.id.Peer) && !ex.id.FromXFF) {
			// A trusted asking proxy names the client; without that name
			// every client would share the proxy's key.
			noteOutcome(w, outcomeCheck)
			p.checkAnswered(w, answerUnreadable)
			writeText(cw, http.StatusBadRequest, "bad request: X-Forwarded-For missing or malformed\n")
			return
		}
		if !p.verifyToken(ex) { // token.go: 401, as deny_status
			countToken(ex)
			d.requests.count(&ex.ans)
			p.checkAnswered(w, answerRefused)
			ex.ans.write(cw)
			return
		}
		// limit.go; nothing waits for a response here (rules that would
		// are refused on such domains), so nothing stays held.
		step := p.limit(q.Context(), ex, nil)
		countToken(ex)
		switch step {
		case stepAnswer:
			p.checkAnswered(w, answerRefused)
			ex.ans.write(cw)
			return
		case stepGone: // as ServeHTTP
			panic(http.ErrAbortHandler)
		}
		p.endHeld(ex.after)
		if ex.hasFields { // fields.go
			ex.fields.set(w.Header())
		}
	}
	d.requests.served.Inc()
	p.checkAnswered(w, answerAllowed)
	h := w.Header()
	h["Cache-Control"] = statics[noStore].value
	writeText(w, http.StatusOK, "ok\n")
}

// denyWriter writes every answer that is not 2xx with status deny: the
// answers of the proxied request's steps, under check.deny_status.
type denyWriter struct {
	http.ResponseWriter
	deny int
}

// Unwrap gives noteOutcome (accesslog.go) the writer under it.
func (w *denyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *denyWriter) WriteHeader(code int) {
	if code >= 300 {
		code = w.deny
	}
	w.ResponseWriter.WriteHeader(code)
}

// Forwarded fields a question is read from; the first of each pair is
// Traefik's and Caddy's, the second what an nginx configuration sets.
const (
	fieldMethod         = "X-Forwarded-Method"
	fieldOriginalMethod = "X-Original-Method"
	fieldURI            = "X-Forwarded-Uri"
	fieldOriginalURI    = "X-Original-Uri"
	fieldHost           = "X-Forwarded-Host"
	fieldProto          = "X-Forwarded-Proto"
)

// readQuestion rebuilds the request a question r asks about from its
// forwarded fields, which are hostile input (whoever reaches the check
// listener chooses them):
//
//   - the method: X-Forwarded-Method, else X-Original-Method; required;
//   - the target: X-Forwarded-Uri, else X-Original-URI; required, in
//     origin form ("/path?query");
//   - the host: X-Forwarded-Host, else the question's Host;
//   - the scheme: X-Forwarded-Proto, http or https; optional;
//   - the client: the question's X-Forwarded-For, believed only from a
//     peer in client_ip.trusted_proxies, as for a proxied request.
//
// A question with X-Original-Method or X-Original-URI is nginx's, whose
// auth_request passes the client's own header fields beside the ones it
// sets: an X-Forwarded-Method, -Uri, -Host or -Proto beside them is the
// client's choice of method, target, domain or scheme, so such a question
// is unreadable (see nginxMixed). Each field must appear at most once, as
// one value: a list ("a, b") or a repeated line is malformed, since edge
// cannot tell which element the asking proxy wrote. The rebuilt request
// keeps r's header fields (rules key by them), peer address and context.
// It returns a reason, a constant string, when r cannot be read;
// screenRequest then checks what the fields name as it checks a proxied
// request.
func readQuestion(r *http.Request) (*http.Request, string) {
	if reason := nginxMixed(r.Header); reason != "" {
		return nil, reason
	}
	method, reason := oneField(r.Header, fieldMethod, fieldOriginalMethod, false)
	if reason != "" {
		return nil, reason
	}
	target, reason := oneField(r.Header, fieldURI, fieldOriginalURI, true)
	if reason != "" {
		return nil, reason
	}
	if target[0] != '/' {
		return nil, "forwarded URI must be a path"
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c == 0x7f {
			return nil, "control character or space in forwarded URI"
		}
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, "malformed forwarded URI"
	}
	u.Scheme = "http"
	if r.Header[fieldProto] != nil {
		proto, reason := oneField(r.Header, fieldProto, "", false)
		if reason != "" {
			return nil, reason
		}
		switch strings.ToLower(proto) {
		case "http":
		case "https":
			u.Scheme = "https"
		default:
			return nil, "X-Forwarded-Proto must be http or https"
		}
	}
	host := r.Host
	if r.Header[fieldHost] != nil {
		if host, reason = oneField(r.Header, fieldHost, "", false); reason != "" {
			return nil, reason
		}
	}
	u.Host = host
	q := &http.Request{
		Method:     method,
		URL:        u,
		RequestURI: target,
		Proto:      r.Proto, ProtoMajor: r.ProtoMajor, ProtoMinor: r.ProtoMinor,
		Header:     r.Header,
		Host:       host,
		RemoteAddr: r.RemoteAddr,
		Body:       http.NoBody,
	}
	return q.WithContext(r.Context()), ""
}

// nginxMixed returns a reason when h has an X-Original-* field, which
// only an nginx configuration sets, and beside it an X-Forwarded-* field
// edge reads, which nginx then passed on from the client (docs/beside.md's
// snippet clears them; an older one does not). Without X-Original-* the
// X-Forwarded-* fields are Traefik's or Caddy's, which set every one they
// send, and are read as ever.
func nginxMixed(h http.Header) string {
	if h[fieldOriginalMethod] == nil && h[fieldOriginalURI] == nil {
		return ""
	}
	for _, f := range [...]string{fieldMethod, fieldURI, fieldHost, fieldProto} {
		if h[f] != nil {
			return f + " beside X-Original-Method or X-Original-URI: a field of the client's that nginx passed on"
		}
	}
	return ""
}

// oneField returns the one value of field in h, else of fallback (""
// for none). It returns a reason when neither is present, or the one
// present is repeated or empty, or, unless list is true, a comma-separated
// list (a URI's query may hold commas; a method, host or scheme may not).
func oneField(h http.Header, field, fallback string, list bool) (string, string) {
	vs := h[field]
	name := field
	if vs == nil && fallback != "" {
		name, vs = fallback, h[fallback]
	}
	switch {
	case vs == nil && fallback != "":
		return "", "missing " + field + " (or " + fallback + ")"
	case vs == nil:
		return "", "missing " + field
	case len(vs) > 1:
		return "", "repeated " + name
	}
	v := wire.TrimOWS(vs[0])
	switch {
	case v == "":
		return "", "empty " + name
	case !list && strings.IndexByte(v, ',') >= 0:
		return "", "list in " + name
	case strings.ContainsFunc(v, func(c rune) bool { return c < ' ' && c != '\t' || c == 0x7f }):
		return "", "control character in " + name
	}
	return v, ""
}
