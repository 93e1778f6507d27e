package proxy

import (
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/edgerate/edge/rules"
)

// This file screens requests for what net/http accepts but a gateway must
// not pass on: requests whose meaning depends on how the origin resolves an
// ambiguity that edge resolved one way for its rules. Framing (smuggling)
// is the job of package guard, because net/http hides it from handlers;
// this is the part a handler can see.
//
// What reaches the origin: the request target exactly as the client sent
// it (net/http re-escapes only bytes that may not appear raw), while rules
// match the percent-decoded path with "//" runs merged and ";params" cut
// (rules.CleanPath); merging and cutting only ever make more rules match.
// A target is refused rather than normalised whenever the two forms could
// differ in meaning for some origin:
//
//   - a dot segment (".", ".."), literal or percent-encoded, or followed
//     by ";params" ("..;", which Tomcat-style servers resolve): edge and
//     the origin might resolve it differently (Envoy CVE-2019-9901);
//   - an encoded separator (%2F, %5C) or a backslash: some origins split
//     on them, others do not (Envoy CVE-2021-29492);
//   - a control byte after decoding (%00, %0A, ...), and a fragment ('#');
//   - the asterisk-form target ("*", which guard.Listener refuses first), and
//     an absolute-form target that is
//     not an http(s) URL with an authority, or has userinfo or a
//     percent-encoded host (net/http decodes it; guard.Listener compares it
//     with Host).
//
// Also refused: CONNECT (501: edge is not a forward proxy), the HTTP/2
// preface as a request (the listener hands a connection that opens with
// it to the HTTP/2 server, with h2c on, and refuses it first otherwise),
// methods that are not upper-case (rules match methods exactly, and an origin that folds case
// would see "post" as POST), and a field name with '_' that an origin using
// CGI-style names (HTTP_X_FORWARDED_FOR) would read as one of the
// forwarding fields edge controls.
//
// An h2c upgrade (Upgrade: h2c, HTTP2-Settings) is not refused but
// ignored, as Go's server and nginx ignore it: the request is answered over
// HTTP/1.1, and the upgrade is never passed on (dropH2C), since an origin
// that switched would carry every request of the client's HTTP/2 past
// edge's rules (h2c smuggling). HTTP/2 itself is served over TLS, and in
// the clear with prior knowledge (h2c: true).
//
// Path case is not folded: path_prefix matches case-sensitively, as paths
// are (RFC 3986 §6.2.2.1).

// screen checks r's head before anything else looks at it. It reports
// whether r may go on; if not, it has answered with 400 (501 for CONNECT)
// and "Connection: close", and r is never forwarded.
func (p *Proxy) screen(w http.ResponseWriter, r *http.Request) bool {
	no := screenRequest(r)
	if no.status == 0 {
		dropH2C(r.Header)
		return true
	}
	p.metrics.refused.WithLabelValues(strconv.Itoa(no.status)).Inc()
	var a answer
	a.refusalAnswer(no, outcomeScreened)
	a.write(w)
	return false
}

// A refusal is why edge will not serve a request; the zero value is none.
// Reasons are constant strings: nothing the client sent is echoed.
type refusal struct {
	status int
	reason string
}

func badRequest(reason string) refusal { return refusal{http.StatusBadRequest, reason} }

// screenRequest returns why r is refused, if it is.
func screenRequest(r *http.Request) refusal {
	switch r.Method {
	case http.MethodConnect:
		return refusal{http.StatusNotImplemented, "CONNECT is not supported"}
	case "PRI":
		return badRequest("the HTTP/2 preface is not a request")
	}
	if !upperToken(r.Method) {
		return badRequest("method must be upper-case")
	}
	if reason := screenTarget(r); reason != "" {
		return badRequest(reason)
	}
	for name := range r.Header {
		if strings.IndexByte(name, '_') >= 0 && forwardingAlias(name) {
			return badRequest("field name with '_' aliases a forwarding field")
		}
	}
	return refusal{}
}

// screenTarget returns why r's request target is refused, or "".
func screenTarget(r *http.Request) string {
	raw := r.RequestURI
	if raw == "" { // a client-side request handed to ServeHTTP directly
		raw = r.URL.RequestURI()
	}
	if raw == "*" {
		return "asterisk-form target"
	}
	if raw[0] != '/' {
		scheme, rest, ok := strings.Cut(raw, "://")
		if !ok || !(strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https")) {
			return "target must be a path or an http(s) URL"
		}
		authority := rest
		raw = ""
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			authority, raw = rest[:i], rest[i:]
		}
		if strings.ContainsAny(authority, "@%") {
			return "userinfo or percent-encoding in the target's host"
		}
	}
	if strings.IndexByte(raw, '#') >= 0 {
		return "fragment in target"
	}
	rawPath, _, _ := strings.Cut(raw, "?")
	if reason := rules.ScreenRawPath(rawPath); reason != "" {
		return reason
	}
	return rules.ScreenPath(r.URL.Path)
}

// upperToken reports whether a method consists of A-Z, '-' and '_', as
// nginx requires.
func upperToken(m string) bool {
	for i := 0; i < len(m); i++ {
		if c := m[i]; !('A' <= c && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return m != ""
}

// hasToken reports whether a comma-separated field lists token, ignoring
// case and any "/version".
func hasToken(vals []string, token string) bool {
	for _, v := range vals {
		for t := range strings.SplitSeq(v, ",") {
			t, _, _ = strings.Cut(strings.TrimSpace(t), "/")
			if strings.EqualFold(t, token) {
				return true
			}
		}
	}
	return false
}

// dropH2C removes an h2c upgrade from the fields h of a request the screen
// let through: the token h2c from Upgrade (the field itself when nothing
// else is left in it) and HTTP2-Settings. An upgrade to another protocol
// offered beside it (a WebSocket) stays.
func dropH2C(h http.Header) {
	delete(h, "Http2-Settings")
	up := h["Upgrade"]
	if !hasToken(up, "h2c") {
		return
	}
	var keep []string
	for _, v := range up {
		for t := range strings.SplitSeq(v, ",") {
			t = strings.TrimSpace(t)
			if name, _, _ := strings.Cut(t, "/"); t != "" && !strings.EqualFold(name, "h2c") {
				keep = append(keep, t)
			}
		}
	}
	if len(keep) == 0 {
		delete(h, "Upgrade")
		return
	}
	h["Upgrade"] = []string{strings.Join(keep, ", ")}
}

// forwardingAlias reports whether a field name containing '_' names, with
// '_' read as '-', a field that edge sets or removes for the origin.
func forwardingAlias(name string) bool {
	switch textproto.CanonicalMIMEHeaderKey(strings.ReplaceAll(name, "_", "-")) {
	case "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip", "Forwarded":
		return true
	}
	return false
}
