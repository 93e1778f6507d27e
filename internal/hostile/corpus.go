// Package hostile holds the hostile corpus, for tests: raw HTTP/1.1 inputs,
// each with the statuses edge must answer it with. proxy's TestHostileCorpus
// sends each over TCP to a real http.Server serving the real Proxy through
// the real guard.Listener, and checks what reaches the origin; guard's
// FuzzFraming starts from the same inputs.
//
// The statuses are those of this site (hostileConfig in
// proxy/hostile_test.go):
//
//	api.example.com, [2001:db8::1], 192.0.2.10  → origin, with rules
//	    admin: path_prefix /admin/, 1 per hour per client IP
//	    login: path_prefix /login, POST only, 1 per hour per client IP
//	www.example.com, *.wild.example.com, xn--bcher-kva.example → origin
//	static.example.com → static 203 response
//
// Before the corpus one request spends the admin and one the login quota,
// so that any input the rules match gets 429 and any they miss gets 200:
// a path or method trick that skipped a rule would show as 200.
package hostile

import (
	"fmt"
	"strings"
)

// Case is one raw input and what it must get.
type Case struct {
	Class, Name string
	Raw         string
	// Want lists the status of each response, in order; 0 means the
	// connection closes without one.
	Want []int
	// HalfClose shuts the client's sending side after Raw, for inputs
	// that end early.
	HalfClose bool
	// Partial: the origin may see an aborted request (head and part of a
	// body, then a closed connection), never a complete one. Such inputs
	// target /partial, which the origin tallies apart, since an aborted
	// request may reach it after edge has answered the client.
	Partial bool
	// Local: a 200 that net/http answers itself; nothing is forwarded.
	Local bool
	// Head: the request is HEAD, so the response has no body.
	Head bool
	// OriginURI and OriginHdr, when set, are what the origin must have
	// seen for the (single) forwarded request: its request target, and
	// field values ("" for absent).
	OriginURI string
	OriginHdr map[string]string
}

// Req builds a request head: the request line and field lines, each
// ended with CRLF, and the empty line.
func Req(lines ...string) string {
	return strings.Join(lines, "\r\n") + "\r\n\r\n"
}

// Get builds a GET of target on api.example.com with extra field lines.
func Get(target string, fields ...string) string {
	return Req(append([]string{"GET " + target + " HTTP/1.1", HostAPI}, fields...)...)
}

// Host field lines of the site's two main domains.
const (
	HostAPI = "Host: api.example.com"
	HostWWW = "Host: www.example.com"
)

// Corpus returns the corpus, in classes (valid, identity, host, path,
// method, header, framing, upgrade).
// It is long because it is a table: one literal per case, no logic.
func Corpus() []Case {
	var cs []Case
	add := func(class, name, raw string, want ...int) *Case {
		cs = append(cs, Case{Class: class, Name: name, Raw: raw, Want: want})
		return &cs[len(cs)-1]
	}
	get := Get
	host := func(h string) string { return Req("GET / HTTP/1.1", "Host: "+h) }
	chunked := func(body string, fields ...string) string {
		return Req(append([]string{"POST /public HTTP/1.1", HostAPI, "Transfer-Encoding: chunked"}, fields...)...) + body
	}

	// Valid requests, to show the corpus does not refuse everything.
	add("valid", "GET", get("/"), 200).OriginURI = "/"
	add("valid", "GET with query", get("/public?a=1&b=two"), 200).OriginURI = "/public?a=1&b=two"
	add("valid", "HEAD", Req("HEAD / HTTP/1.1", HostAPI), 200).Head = true
	add("valid", "OPTIONS", Req("OPTIONS /public HTTP/1.1", HostAPI), 200)
	add("valid", "custom method", Req("PURGE /public HTTP/1.1", HostAPI), 200)
	add("valid", "POST Content-Length", Req("POST /public HTTP/1.1", HostAPI, "Content-Length: 5")+"hello", 200)
	add("valid", "POST chunked", chunked("5\r\nhello\r\n0\r\n\r\n"), 200)
	add("valid", "HTTP/1.0 with Host", Req("GET / HTTP/1.0", HostAPI), 200)
	add("valid", "HTTP/1.2 is HTTP/1.1", Req("GET / HTTP/1.2", HostAPI), 200)
	add("valid", "pipelined", get("/")+get("/public"), 200, 200)
	add("valid", "TE: trailers", get("/", "TE: trailers"), 200)
	add("valid", "Expect 100-continue", Req("POST /public HTTP/1.1", HostAPI, "Expect: 100-continue", "Content-Length: 3")+"abc", 200)
	add("valid", "Content-Length with leading zeros", Req("POST /public HTTP/1.1", HostAPI, "Content-Length: 003")+"abc", 200)
	add("valid", "GET with a body", Req("GET /public HTTP/1.1", HostAPI, "Content-Length: 3")+"abc", 200)
	add("valid", "many fields", get("/", strings.Repeat("X-A: b\r\n", 300)+"X-B: c"), 200)
	add("valid", "underscore field", get("/", "X_Custom: a"), 200)
	add("valid", "Upgrade without Connection", get("/", "Upgrade: websocket"), 200).OriginHdr = map[string]string{"Upgrade": ""}

	// Client identity: forwarding fields from an untrusted peer change
	// nothing. The admin quota is spent, so every one of these is 429.
	for _, f := range []string{
		"X-Forwarded-For: 203.0.113.7",
		"X-Forwarded-For: 203.0.113.7, 198.51.100.1",
		"X-Forwarded-For: 2001:db8::7",
		"X-Forwarded-For: ::ffff:203.0.113.7",
		"X-Forwarded-For: unknown",
		"X-Forwarded-For: " + strings.Repeat(",", 4000),
		"X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-For: 203.0.113.8",
		"X-Real-IP: 203.0.113.7",
		"Forwarded: for=203.0.113.7",
		"True-Client-IP: 203.0.113.7",
		"CF-Connecting-IP: 203.0.113.7",
	} {
		add("identity", "spoofed "+strings.SplitN(f, ":", 2)[0], get("/admin/x", f), 429)
	}
	add("identity", "origin sees the peer, not X-Forwarded-For", get("/", "X-Forwarded-For: 6.6.6.6"), 200).OriginHdr =
		map[string]string{"X-Forwarded-For": "127.0.0.1"}
	add("identity", "X-Real-IP and Forwarded removed", get("/", "X-Real-IP: 6.6.6.6", "Forwarded: for=6.6.6.6"), 200).OriginHdr =
		map[string]string{"X-Real-Ip": "", "Forwarded": ""}
	add("identity", "Connection cannot drop X-Forwarded-For", get("/", "Connection: close, X-Forwarded-For", "X-Forwarded-For: 6.6.6.6"), 200).OriginHdr =
		map[string]string{"X-Forwarded-For": "127.0.0.1"}
	add("identity", "Connection cannot drop X-Forwarded-Host", get("/", "Connection: X-Forwarded-Host", "X-Forwarded-Host: evil.example"), 200).OriginHdr =
		map[string]string{"X-Forwarded-Host": "api.example.com"}
	for _, f := range []string{"X_Forwarded_For: 6.6.6.6", "X-Forwarded_For: 6.6.6.6", "x_real_ip: 6.6.6.6", "X_Forwarded_Host: evil.example", "X_FORWARDED_PROTO: https"} {
		add("identity", "underscore alias "+strings.SplitN(f, ":", 2)[0], get("/", f), 400)
	}

	// Hosts (nginx http_host.t, HAProxy h1_host_normalization.vtc).
	for _, h := range []string{
		"api.example.com", "API.EXAMPLE.COM", "Api.Example.Com", "api.example.com.", "api.example.com:80",
		"api.example.com:8080", "api.example.com:", "api.example.com.:80", "api.example.com:65535",
		"api.example.com \t", "[2001:db8::1]", "[2001:DB8:0::1]:443", "[2001:db8:0:0:0:0:0:1]", "192.0.2.10", "192.0.2.10:80",
	} {
		add("host", "api as "+h, host(h), 200)
	}
	for _, h := range []string{"www.example.com", "WWW.example.com.", "a.wild.example.com", "A.B.WILD.EXAMPLE.COM.", "xn--bcher-kva.example", "XN--BCHER-KVA.EXAMPLE:80"} {
		add("host", "www as "+h, host(h), 200)
	}
	add("host", "static", host("static.example.com"), 203)
	add("host", "static, trailing dot and port", host("STATIC.example.com.:443"), 203)
	for _, h := range []string{"unknown.example.com", "wild.example.com", "example.com", "192.000.002.010", "0xc0.0.2.10", "3221225994", "[2001:db8::2]", "api.example.com.evil.example"} {
		add("host", "unknown "+h, host(h), 421)
	}
	for _, h := range []string{
		"", "api.example.com:65536", "api.example.com:80:80", "api.example.com:abc", "api.example.com:-1",
		"api.example.com..", ".api.example.com", "api..example.com", "api%2eexample.com", "api.example.com%00",
		"[2001:db8::1", "[2001:db8::1%eth0]", "[v1.x]", "2001:db8::1", "[::ffff:192.0.2.10]x",
		strings.Repeat("a", 64) + ".example.com", strings.Repeat("abcdefghi.", 30) + "com",
	} {
		add("host", fmt.Sprintf("invalid %q", h), host(h), 400)
	}
	for _, h := range []string{"api.example.com/x", "api.example.com\\x", "user@api.example.com", "a b", "bücher.example", "api.example.com\x00"} {
		add("host", fmt.Sprintf("malformed %q", h), host(h), 400)
	}
	add("host", "no Host in HTTP/1.1", Req("GET / HTTP/1.1"), 400)
	add("host", "no Host in HTTP/1.0", Req("GET / HTTP/1.0"), 400)
	add("host", "two equal Hosts", Req("GET / HTTP/1.1", HostAPI, HostAPI), 400)
	add("host", "two different Hosts", Req("GET / HTTP/1.1", HostAPI, HostWWW), 400)
	add("host", "absolute-form agreeing", Req("GET http://api.example.com/public HTTP/1.1", HostAPI), 200).OriginURI = "/public"
	add("host", "absolute-form agreeing after normalisation", Req("GET HTTP://API.EXAMPLE.COM:80/ HTTP/1.1", "Host: api.example.com."), 200)
	add("host", "absolute-form https", Req("GET https://api.example.com/ HTTP/1.1", HostAPI), 200)
	add("host", "absolute-form without path", Req("GET http://api.example.com HTTP/1.1", HostAPI), 200).OriginURI = "/"
	add("host", "absolute-form in HTTP/1.0 without Host", Req("GET http://api.example.com/ HTTP/1.0"), 200)
	add("host", "absolute-form disagreeing with Host", Req("GET http://www.example.com/ HTTP/1.1", HostAPI), 400)
	add("host", "Host disagreeing with absolute-form", Req("GET http://api.example.com/admin/x HTTP/1.1", HostWWW), 400)
	add("host", "absolute-form for an unknown host", Req("GET http://evil.example/ HTTP/1.1", "Host: evil.example"), 421)
	add("host", "absolute-form with userinfo", Req("GET http://u:p@api.example.com/ HTTP/1.1", HostAPI), 400)
	add("host", "absolute-form percent-encoded host", Req("GET http://api%2eexample.com/ HTTP/1.1", HostAPI), 400)
	add("host", "absolute-form other scheme", Req("GET ftp://api.example.com/ HTTP/1.1", HostAPI), 400)
	add("host", "absolute-form without authority", Req("GET http:api.example.com/ HTTP/1.1", HostAPI), 400)

	// Paths: rules match on the normalised path, or the request is refused.
	for _, p := range []string{
		"/admin/x", "/admin/", "//admin/x", "/admin//x", "///admin/x", "/%61dmin/x", "/admin/x?q=1",
		"/admin;jsessionid=1/x", "/admin;/x", "/admin%3Bx/y", "/admin/caf\xc3\xa9", "/admin/%7e",
	} {
		add("path", "rule matches "+p, get(p), 429)
	}
	for _, p := range []string{
		"/./admin/x", "/admin/./x", "/public/../admin/x", "/public/%2e%2e/admin/x", "/public/%2E%2E/admin/x",
		"/public/.%2e/admin/x", "/%2e/admin/x", "/admin/x/..", "/public/..;/admin/x", "/public/.;x/admin",
		"/admin/../admin/x", "/a/b/c/../../../admin/x", "/admin%2Fx", "/admin%2fx", "/public%2F..%2Fadmin/x",
		"/admin%5Cx", "/admin\\x", "/public\\..\\admin\\x", "/admin/x%00", "/admin/x%0a", "/admin/x%7F",
		"/admin/x#frag", "/public#/../admin/", "/public?q=#x",
	} {
		add("path", fmt.Sprintf("refused %q", p), get(p), 400)
	}
	for _, p := range []string{"/admin/x%", "/admin/x%zz", "/admin/x%2", "admin/x", "\\admin\\x", "/admin/x y", "/admin/\x01"} {
		add("path", fmt.Sprintf("malformed %q", p), get(p), 400)
	}
	add("path", "asterisk-form OPTIONS", Req("OPTIONS * HTTP/1.1", HostAPI), 400)
	add("path", "asterisk-form OPTIONS, invalid Host", Req("OPTIONS * HTTP/1.1", "Host: a b"), 400)
	add("path", "asterisk-form GET", get("*"), 400)
	add("path", "prefix without its slash", get("/admin"), 200).OriginURI = "/admin"
	add("path", "case differs (case-sensitive rule)", get("/ADMIN/x"), 200).OriginURI = "/ADMIN/x"
	add("path", "double slash forwarded as sent", get("//public//x"), 200).OriginURI = "//public//x"
	add("path", "semicolon forwarded as sent", get("/public;v=1/x"), 200).OriginURI = "/public;v=1/x"
	add("path", "encoded unreserved forwarded as sent", get("/p%75blic/%7Ex"), 200).OriginURI = "/p%75blic/%7Ex"
	add("path", "query with a path in it", get("/public?/admin/x"), 200)
	add("path", "unparseable query", get("/public?a=%zz&b=1"), 200)
	add("path", "long path", get("/public/"+strings.Repeat("a", 4000)), 200)

	// Methods: the login rule is POST only.
	add("method", "POST matched", Req("POST /login HTTP/1.1", HostAPI), 429)
	add("method", "POST, trailing slash", Req("POST /login/x HTTP/1.1", HostAPI), 429)
	add("method", "POST, double slash", Req("POST //login HTTP/1.1", HostAPI), 429)
	add("method", "POST, params", Req("POST /login;a=b HTTP/1.1", HostAPI), 429)
	add("method", "GET not matched", get("/login"), 200)
	add("method", "lower-case post", Req("post /login HTTP/1.1", HostAPI), 400)
	add("method", "mixed-case Post", Req("Post /login HTTP/1.1", HostAPI), 400)
	add("method", "CONNECT", Req("CONNECT api.example.com:443 HTTP/1.1", "Host: api.example.com:443"), 501)
	add("method", "CONNECT origin-form", Req("CONNECT / HTTP/1.1", HostAPI), 501)
	add("method", "invalid method", Req("G(T / HTTP/1.1", HostAPI), 400)
	add("method", "tab separator", Req("GET\t/ HTTP/1.1", HostAPI), 400)
	add("method", "two spaces", Req("GET  / HTTP/1.1", HostAPI), 400)
	add("method", "extra token", Req("GET / HTTP/1.1 x", HostAPI), 400)
	add("method", "lower-case version", Req("GET / http/1.1", HostAPI), 400)
	add("method", "version without minor", Req("GET / HTTP/1", HostAPI), 400)
	add("method", "HTTP/0.9 request line", "GET /\r\n\r\n", 400)
	add("method", "HTTP/2.0 request line", Req("GET / HTTP/2.0", HostAPI), 505)
	add("method", "HTTP/0.9 version", Req("GET / HTTP/0.9", HostAPI), 505)
	add("method", "HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400)

	// Header syntax.
	add("header", "obs-fold", get("/", "X-A: a", " b"), 400)
	add("header", "obs-fold with tab", get("/", "X-A: a", "\tb"), 400)
	add("header", "leading whitespace on the first field", Req("GET / HTTP/1.1", " "+HostAPI), 400)
	add("header", "no colon", get("/", "X-A"), 400)
	add("header", "space in name", get("/", "X A: b"), 400)
	add("header", "space before colon", get("/", "X-A : b"), 400)
	add("header", "non-token name", get("/", "X(A): b"), 400)
	add("header", "empty name", get("/", ": b"), 400)
	add("header", "NUL in value", get("/", "X-A: a\x00b"), 400)
	add("header", "CR in value", get("/", "X-A: a\rb"), 400)
	add("header", "empty request", "\r\n\r\n", 400)
	add("header", "leading CRLF", "\r\n"+get("/"), 400)
	add("header", "binary garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n", 400)
	add("header", "garbage without a line end", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 0).HalfClose = true
	add("header", "truncated head", "GET / HTTP/1.1\r\nHost: api.exa", 0).HalfClose = true
	add("header", "fields just under the limit", get("/", "X-A: "+strings.Repeat("a", 7000)), 200)
	add("header", "fields over the limit", get("/", "X-A: "+strings.Repeat("a", 13000)), 431)
	add("header", "request line over the limit", get("/"+strings.Repeat("a", 13000)), 431)
	add("header", "many fields over the limit", get("/", strings.Repeat("X-A: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\r\n", 400)+"X-B: c"), 431)
	add("header", "unknown Expect", get("/", "Expect: teapot"), 417)
	// Via: other nodes' entries are no loop, and reading them stays cheap.
	add("header", "Via of other proxies", get("/", "Via: 1.0 fred, 1.1 p.example.net (Apache/1.1)"), 200)
	add("header", "Via with an unclosed comment", get("/", "Via: 1.1 p.example.net (x, 1.1 y"), 200)
	add("header", "long Via", get("/", "Via: "+strings.Repeat("1.1 p.example.net, ", 350)+"1.1 q"), 200)
	add("header", "many Via lines", get("/", strings.Repeat("Via: 1.1 p.example.net\r\n", 250)+"Via: 1.1 q"), 200)

	// Framing and smuggling.
	te, cl := "Transfer-Encoding: chunked", "Content-Length: 3"
	add("framing", "TE then CL", chunked("3\r\nabc\r\n0\r\n\r\n", cl), 400)
	add("framing", "CL then TE", Req("POST /public HTTP/1.1", HostAPI, cl, te)+"3\r\nabc\r\n0\r\n\r\n", 400)
	add("framing", "TE with CL 0", chunked("0\r\n\r\n", "Content-Length: 0"), 400)
	add("framing", "CL.TE smuggling", Req("POST /public HTTP/1.1", HostAPI, "Content-Length: 6", te)+"0\r\n\r\nG", 400)
	add("framing", "TE.CL smuggling", Req("POST /public HTTP/1.1", HostAPI, "Content-Length: 4", te)+"5c\r\nGPOST / HTTP/1.1\r\n\r\n0\r\n\r\n", 400)
	add("framing", "lower-case names, TE and CL", Req("POST /public HTTP/1.1", HostAPI, "transfer-encoding: chunked", "content-length: 3")+"3\r\nabc\r\n0\r\n\r\n", 400)
	add("framing", "TE with space before colon", Req("POST /public HTTP/1.1", HostAPI, "Transfer-Encoding : chunked", cl)+"abc", 400)
	add("framing", "duplicate CL, equal", Req("POST /public HTTP/1.1", HostAPI, cl, cl)+"abc", 400)
	add("framing", "duplicate CL, different", Req("POST /public HTTP/1.1", HostAPI, cl, "Content-Length: 4")+"abcd", 400)
	add("framing", "duplicate CL, different case", Req("POST /public HTTP/1.1", HostAPI, cl, "content-length: 3")+"abc", 400)
	for _, v := range []string{"3, 3", "3,3", "+3", "-1", "0x3", "3.0", "", "3 3", "99999999999999999999", "1e3"} {
		add("framing", fmt.Sprintf("Content-Length %q", v), Req("POST /public HTTP/1.1", HostAPI, "Content-Length: "+v)+"abc", 400)
	}
	for _, v := range []string{"chunked, chunked", "gzip, chunked", "chunked, gzip", "identity", "xchunked", "chunked;q=1", "chunk"} {
		add("framing", fmt.Sprintf("Transfer-Encoding %q", v), Req("POST /public HTTP/1.1", HostAPI, "Transfer-Encoding: "+v)+"0\r\n\r\n", 501)
	}
	add("framing", "two TE lines", Req("POST /public HTTP/1.1", HostAPI, te, te)+"0\r\n\r\n", 501)
	add("framing", "TE upper-case", Req("POST /public HTTP/1.1", HostAPI, "Transfer-Encoding: CHUNKED")+"3\r\nabc\r\n0\r\n\r\n", 200)
	add("framing", "TE with tab", Req("POST /public HTTP/1.1", HostAPI, "Transfer-Encoding:\tchunked")+"3\r\nabc\r\n0\r\n\r\n", 200)
	add("framing", "TE in HTTP/1.0", Req("POST /public HTTP/1.0", HostAPI, te)+"3\r\nabc\r\n0\r\n\r\n", 400)
	add("framing", "TE in HTTP/1.0 keep-alive", Req("POST /public HTTP/1.0", HostAPI, "Connection: keep-alive", te)+"3\r\nabc\r\n0\r\n\r\n", 400)
	add("framing", "bare LF line ends", "GET / HTTP/1.1\n"+HostAPI+"\n\n", 400)
	add("framing", "bare LF after the request line", "GET / HTTP/1.1\r\n"+HostAPI+"\nAccept: */*\r\n\r\n", 400)
	add("framing", "bare LF ending the head", "GET / HTTP/1.1\r\n"+HostAPI+"\r\n\n", 400)
	add("framing", "bare LF request line", "GET / HTTP/1.1\n"+HostAPI+"\r\n\r\n", 400)
	add("framing", "chunk lines with bare LF", chunked("3\nabc\n0\n\n"), 400)
	add("framing", "chunk size negative", chunked("-3\r\nabc\r\n0\r\n\r\n"), 400)
	add("framing", "chunk size with 0x", chunked("0x3\r\nabc\r\n0\r\n\r\n"), 400)
	add("framing", "chunk size over 2^63", chunked("ffffffffffffffffff\r\nabc\r\n0\r\n\r\n"), 400)
	add("framing", "chunk size trailing space", chunked("3 \r\nabc\r\n0\r\n\r\n"), 400)
	add("framing", "chunk size leading space", chunked(" 3\r\nabc\r\n0\r\n\r\n"), 400)
	add("framing", "chunk size empty", chunked("\r\nabc\r\n0\r\n\r\n"), 400)
	add("framing", "chunk longer than its size", chunked("3\r\nabcd\r\n0\r\n\r\n"), 400)
	add("framing", "chunk shorter than its size", chunked("5\r\nabc\r\n0\r\n\r\n"), 400)
	add("framing", "chunk extension with CR", chunked("3;a\rb\r\nabc\r\n0\r\n\r\n"), 400)
	add("framing", "chunk extension", chunked("3;name=value\r\nabc\r\n0;x\r\n\r\n"), 200)
	add("framing", "one-byte chunks", chunked(strings.Repeat("1\r\nx\r\n", 200)+"0\r\n\r\n"), 200)
	add("framing", "trailer", chunked("3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n"), 200)
	add("framing", "trailer with bare LF", chunked("3\r\nabc\r\n0\r\nX-T: 1\n\n"), 400)
	add("framing", "trailer obs-fold", chunked("3\r\nabc\r\n0\r\nX-T: 1\r\n 2\r\n\r\n"), 400)
	add("framing", "trailer without colon", chunked("3\r\nabc\r\n0\r\nX-T\r\n\r\n"), 400)
	add("framing", "trailer too large", chunked("3\r\nabc\r\n0\r\nX-T: "+strings.Repeat("t", 5000)+"\r\n\r\n"), 400)
	add("framing", "chunked body never ends", chunked("3\r\nabc\r\n0\r\n"), 400).HalfClose = true
	add("framing", "Expect and bad chunk", chunked("3\nabc\n0\n\n", "Expect: 100-continue"), 400)
	add("framing", "CL body cut short", Req("POST /partial HTTP/1.1", HostAPI, "Content-Length: 10")+"abc", 400).HalfClose = true
	cs[len(cs)-1].Partial = true
	add("framing", "chunked body over the read-ahead, valid", chunked(bigChunks(80<<10)+"0\r\n\r\n"), 200)
	add("framing", "chunked body over the read-ahead, broken late",
		Req("POST /partial HTTP/1.1", HostAPI, te)+bigChunks(80<<10)+"3\nabc\n0\n\n", 400).Partial = true
	add("framing", "CL shorter than the body", Req("POST /public HTTP/1.1", HostAPI, "Content-Length: 1")+"abc"+get("/"), 200, 400)
	add("framing", "pipelined after TE+CL", get("/")+chunked("3\r\nabc\r\n0\r\n\r\n", cl)+get("/"), 200, 400)
	add("framing", "pipelined after chunked", chunked("3\r\nabc\r\n0\r\n\r\n")+get("/public"), 200, 200)
	add("framing", "pipelined after trailer", chunked("3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n")+get("/public"), 200, 200)
	add("framing", "pipelined after CL body", Req("POST /public HTTP/1.1", HostAPI, cl)+"abc"+get("/public"), 200, 200)

	// Upgrades.
	// An h2c upgrade is answered over HTTP/1.1, the upgrade ignored, and
	// never reaches the origin (h2c smuggling).
	noH2C := map[string]string{"Upgrade": "", "Http2-Settings": "", "Connection": ""}
	add("upgrade", "h2c", get("/", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"), 200).OriginHdr = noH2C
	add("upgrade", "H2C upper-case", get("/", "Connection: Upgrade", "Upgrade: H2C"), 200).OriginHdr = noH2C
	add("upgrade", "h2c in a list", get("/", "Connection: Upgrade", "Upgrade: websocket, h2c"), 200).OriginHdr =
		map[string]string{"Upgrade": "websocket", "Http2-Settings": ""}
	add("upgrade", "HTTP2-Settings alone", get("/", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"), 200).OriginHdr = noH2C
	add("upgrade", "h2c without Connection", get("/", "Upgrade: h2c"), 200).OriginHdr = noH2C
	add("upgrade", "h2c, then a request", get("/", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA")+get("/public"), 200, 200)
	add("upgrade", "refused upgrade, then TE+CL", get("/", "Connection: Upgrade", "Upgrade: foo")+chunked("3\r\nabc\r\n0\r\n\r\n", cl), 200, 400)
	add("upgrade", "refused upgrade, then a request", get("/", "Connection: Upgrade", "Upgrade: foo")+get("/public"), 200, 200)
	return cs
}

// bigChunks returns valid chunks holding n bytes of data.
func bigChunks(n int) string {
	var b strings.Builder
	for n > 0 {
		k := min(n, 8<<10)
		fmt.Fprintf(&b, "%x\r\n%s\r\n", k, strings.Repeat("d", k))
		n -= k
	}
	return b.String()
}
