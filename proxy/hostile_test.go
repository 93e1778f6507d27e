package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
	"go.uber.org/goleak"
)

// The hostile corpus: raw HTTP/1.1 inputs sent over TCP to a real
// http.Server serving the real Proxy through the real Listener, each with
// the statuses it must get. The origin counts what reaches it: a request
// edge refuses, rate-limits or answers itself must never arrive there
// complete. Afterwards the upstream pool must still serve, and every
// goroutine the test started must be gone.
//
// The site under test (hostileConfig):
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

// hostileCase is one raw input and what it must get.
type hostileCase struct {
	class, name string
	raw         string
	// want lists the status of each response, in order; 0 means the
	// connection closes without one.
	want []int
	// halfClose shuts the client's sending side after raw, for inputs
	// that end early.
	halfClose bool
	// partial: the origin may see an aborted request (head and part of a
	// body, then a closed connection), never a complete one. Such inputs
	// target /partial, which the origin tallies apart, since an aborted
	// request may reach it after edge has answered the client.
	partial bool
	// local: a 200 that net/http answers itself; nothing is forwarded.
	local bool
	// head: the request is HEAD, so the response has no body.
	head bool
	// originURI and originHdr, when set, are what the origin must have
	// seen for the (single) forwarded request: its request target, and
	// field values ("" for absent).
	originURI string
	originHdr map[string]string
}

// req builds a request head: the request line and field lines, each
// ended with CRLF, and the empty line.
func req(lines ...string) string {
	return strings.Join(lines, "\r\n") + "\r\n\r\n"
}

// rawGet builds a GET of target on api.example.com with extra field lines.
func rawGet(target string, fields ...string) string {
	return req(append([]string{"GET " + target + " HTTP/1.1", hAPI}, fields...)...)
}

const (
	hAPI = "Host: api.example.com"
	hWWW = "Host: www.example.com"
)

func hostileCorpus() []hostileCase {
	var cs []hostileCase
	add := func(class, name, raw string, want ...int) *hostileCase {
		cs = append(cs, hostileCase{class: class, name: name, raw: raw, want: want})
		return &cs[len(cs)-1]
	}
	get := rawGet
	host := func(h string) string { return req("GET / HTTP/1.1", "Host: "+h) }
	chunked := func(body string, fields ...string) string {
		return req(append([]string{"POST /public HTTP/1.1", hAPI, "Transfer-Encoding: chunked"}, fields...)...) + body
	}

	// Valid requests, to show the corpus does not refuse everything.
	add("valid", "GET", get("/"), 200).originURI = "/"
	add("valid", "GET with query", get("/public?a=1&b=two"), 200).originURI = "/public?a=1&b=two"
	add("valid", "HEAD", req("HEAD / HTTP/1.1", hAPI), 200).head = true
	add("valid", "OPTIONS", req("OPTIONS /public HTTP/1.1", hAPI), 200)
	add("valid", "custom method", req("PURGE /public HTTP/1.1", hAPI), 200)
	add("valid", "POST Content-Length", req("POST /public HTTP/1.1", hAPI, "Content-Length: 5")+"hello", 200)
	add("valid", "POST chunked", chunked("5\r\nhello\r\n0\r\n\r\n"), 200)
	add("valid", "HTTP/1.0 with Host", req("GET / HTTP/1.0", hAPI), 200)
	add("valid", "HTTP/1.2 is HTTP/1.1", req("GET / HTTP/1.2", hAPI), 200)
	add("valid", "pipelined", get("/")+get("/public"), 200, 200)
	add("valid", "TE: trailers", get("/", "TE: trailers"), 200)
	add("valid", "Expect 100-continue", req("POST /public HTTP/1.1", hAPI, "Expect: 100-continue", "Content-Length: 3")+"abc", 200)
	add("valid", "Content-Length with leading zeros", req("POST /public HTTP/1.1", hAPI, "Content-Length: 003")+"abc", 200)
	add("valid", "GET with a body", req("GET /public HTTP/1.1", hAPI, "Content-Length: 3")+"abc", 200)
	add("valid", "many fields", get("/", strings.Repeat("X-A: b\r\n", 300)+"X-B: c"), 200)
	add("valid", "underscore field", get("/", "X_Custom: a"), 200)
	add("valid", "Upgrade without Connection", get("/", "Upgrade: websocket"), 200).originHdr = map[string]string{"Upgrade": ""}

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
	add("identity", "origin sees the peer, not X-Forwarded-For", get("/", "X-Forwarded-For: 6.6.6.6"), 200).originHdr =
		map[string]string{"X-Forwarded-For": "127.0.0.1"}
	add("identity", "X-Real-IP and Forwarded removed", get("/", "X-Real-IP: 6.6.6.6", "Forwarded: for=6.6.6.6"), 200).originHdr =
		map[string]string{"X-Real-Ip": "", "Forwarded": ""}
	add("identity", "Connection cannot drop X-Forwarded-For", get("/", "Connection: close, X-Forwarded-For", "X-Forwarded-For: 6.6.6.6"), 200).originHdr =
		map[string]string{"X-Forwarded-For": "127.0.0.1"}
	add("identity", "Connection cannot drop X-Forwarded-Host", get("/", "Connection: X-Forwarded-Host", "X-Forwarded-Host: evil.example"), 200).originHdr =
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
	add("host", "no Host in HTTP/1.1", req("GET / HTTP/1.1"), 400)
	add("host", "no Host in HTTP/1.0", req("GET / HTTP/1.0"), 400)
	add("host", "two equal Hosts", req("GET / HTTP/1.1", hAPI, hAPI), 400)
	add("host", "two different Hosts", req("GET / HTTP/1.1", hAPI, hWWW), 400)
	add("host", "absolute-form agreeing", req("GET http://api.example.com/public HTTP/1.1", hAPI), 200).originURI = "/public"
	add("host", "absolute-form agreeing after normalisation", req("GET HTTP://API.EXAMPLE.COM:80/ HTTP/1.1", "Host: api.example.com."), 200)
	add("host", "absolute-form https", req("GET https://api.example.com/ HTTP/1.1", hAPI), 200)
	add("host", "absolute-form without path", req("GET http://api.example.com HTTP/1.1", hAPI), 200).originURI = "/"
	add("host", "absolute-form in HTTP/1.0 without Host", req("GET http://api.example.com/ HTTP/1.0"), 200)
	add("host", "absolute-form disagreeing with Host", req("GET http://www.example.com/ HTTP/1.1", hAPI), 400)
	add("host", "Host disagreeing with absolute-form", req("GET http://api.example.com/admin/x HTTP/1.1", hWWW), 400)
	add("host", "absolute-form for an unknown host", req("GET http://evil.example/ HTTP/1.1", "Host: evil.example"), 421)
	add("host", "absolute-form with userinfo", req("GET http://u:p@api.example.com/ HTTP/1.1", hAPI), 400)
	add("host", "absolute-form percent-encoded host", req("GET http://api%2eexample.com/ HTTP/1.1", hAPI), 400)
	add("host", "absolute-form other scheme", req("GET ftp://api.example.com/ HTTP/1.1", hAPI), 400)
	add("host", "absolute-form without authority", req("GET http:api.example.com/ HTTP/1.1", hAPI), 400)

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
	add("path", "asterisk-form OPTIONS", req("OPTIONS * HTTP/1.1", hAPI), 400)
	add("path", "asterisk-form OPTIONS, invalid Host", req("OPTIONS * HTTP/1.1", "Host: a b"), 400)
	add("path", "asterisk-form GET", get("*"), 400)
	add("path", "prefix without its slash", get("/admin"), 200).originURI = "/admin"
	add("path", "case differs (case-sensitive rule)", get("/ADMIN/x"), 200).originURI = "/ADMIN/x"
	add("path", "double slash forwarded as sent", get("//public//x"), 200).originURI = "//public//x"
	add("path", "semicolon forwarded as sent", get("/public;v=1/x"), 200).originURI = "/public;v=1/x"
	add("path", "encoded unreserved forwarded as sent", get("/p%75blic/%7Ex"), 200).originURI = "/p%75blic/%7Ex"
	add("path", "query with a path in it", get("/public?/admin/x"), 200)
	add("path", "unparseable query", get("/public?a=%zz&b=1"), 200)
	add("path", "long path", get("/public/"+strings.Repeat("a", 4000)), 200)

	// Methods: the login rule is POST only.
	add("method", "POST matched", req("POST /login HTTP/1.1", hAPI), 429)
	add("method", "POST, trailing slash", req("POST /login/x HTTP/1.1", hAPI), 429)
	add("method", "POST, double slash", req("POST //login HTTP/1.1", hAPI), 429)
	add("method", "POST, params", req("POST /login;a=b HTTP/1.1", hAPI), 429)
	add("method", "GET not matched", get("/login"), 200)
	add("method", "lower-case post", req("post /login HTTP/1.1", hAPI), 400)
	add("method", "mixed-case Post", req("Post /login HTTP/1.1", hAPI), 400)
	add("method", "CONNECT", req("CONNECT api.example.com:443 HTTP/1.1", "Host: api.example.com:443"), 501)
	add("method", "CONNECT origin-form", req("CONNECT / HTTP/1.1", hAPI), 501)
	add("method", "invalid method", req("G(T / HTTP/1.1", hAPI), 400)
	add("method", "tab separator", req("GET\t/ HTTP/1.1", hAPI), 400)
	add("method", "two spaces", req("GET  / HTTP/1.1", hAPI), 400)
	add("method", "extra token", req("GET / HTTP/1.1 x", hAPI), 400)
	add("method", "lower-case version", req("GET / http/1.1", hAPI), 400)
	add("method", "version without minor", req("GET / HTTP/1", hAPI), 400)
	add("method", "HTTP/0.9 request line", "GET /\r\n\r\n", 400)
	add("method", "HTTP/2.0 request line", req("GET / HTTP/2.0", hAPI), 505)
	add("method", "HTTP/0.9 version", req("GET / HTTP/0.9", hAPI), 505)
	add("method", "HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400)

	// Header syntax.
	add("header", "obs-fold", get("/", "X-A: a", " b"), 400)
	add("header", "obs-fold with tab", get("/", "X-A: a", "\tb"), 400)
	add("header", "leading whitespace on the first field", req("GET / HTTP/1.1", " "+hAPI), 400)
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
	add("header", "garbage without a line end", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 0).halfClose = true
	add("header", "truncated head", "GET / HTTP/1.1\r\nHost: api.exa", 0).halfClose = true
	add("header", "fields just under the limit", get("/", "X-A: "+strings.Repeat("a", 7000)), 200)
	add("header", "fields over the limit", get("/", "X-A: "+strings.Repeat("a", 13000)), 431)
	add("header", "request line over the limit", get("/"+strings.Repeat("a", 13000)), 431)
	add("header", "many fields over the limit", get("/", strings.Repeat("X-A: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\r\n", 400)+"X-B: c"), 431)
	add("header", "unknown Expect", get("/", "Expect: teapot"), 417)

	// Framing and smuggling.
	te, cl := "Transfer-Encoding: chunked", "Content-Length: 3"
	add("framing", "TE then CL", chunked("3\r\nabc\r\n0\r\n\r\n", cl), 400)
	add("framing", "CL then TE", req("POST /public HTTP/1.1", hAPI, cl, te)+"3\r\nabc\r\n0\r\n\r\n", 400)
	add("framing", "TE with CL 0", chunked("0\r\n\r\n", "Content-Length: 0"), 400)
	add("framing", "CL.TE smuggling", req("POST /public HTTP/1.1", hAPI, "Content-Length: 6", te)+"0\r\n\r\nG", 400)
	add("framing", "TE.CL smuggling", req("POST /public HTTP/1.1", hAPI, "Content-Length: 4", te)+"5c\r\nGPOST / HTTP/1.1\r\n\r\n0\r\n\r\n", 400)
	add("framing", "lower-case names, TE and CL", req("POST /public HTTP/1.1", hAPI, "transfer-encoding: chunked", "content-length: 3")+"3\r\nabc\r\n0\r\n\r\n", 400)
	add("framing", "TE with space before colon", req("POST /public HTTP/1.1", hAPI, "Transfer-Encoding : chunked", cl)+"abc", 400)
	add("framing", "duplicate CL, equal", req("POST /public HTTP/1.1", hAPI, cl, cl)+"abc", 400)
	add("framing", "duplicate CL, different", req("POST /public HTTP/1.1", hAPI, cl, "Content-Length: 4")+"abcd", 400)
	add("framing", "duplicate CL, different case", req("POST /public HTTP/1.1", hAPI, cl, "content-length: 3")+"abc", 400)
	for _, v := range []string{"3, 3", "3,3", "+3", "-1", "0x3", "3.0", "", "3 3", "99999999999999999999", "1e3"} {
		add("framing", fmt.Sprintf("Content-Length %q", v), req("POST /public HTTP/1.1", hAPI, "Content-Length: "+v)+"abc", 400)
	}
	for _, v := range []string{"chunked, chunked", "gzip, chunked", "chunked, gzip", "identity", "xchunked", "chunked;q=1", "chunk"} {
		add("framing", fmt.Sprintf("Transfer-Encoding %q", v), req("POST /public HTTP/1.1", hAPI, "Transfer-Encoding: "+v)+"0\r\n\r\n", 501)
	}
	add("framing", "two TE lines", req("POST /public HTTP/1.1", hAPI, te, te)+"0\r\n\r\n", 501)
	add("framing", "TE upper-case", req("POST /public HTTP/1.1", hAPI, "Transfer-Encoding: CHUNKED")+"3\r\nabc\r\n0\r\n\r\n", 200)
	add("framing", "TE with tab", req("POST /public HTTP/1.1", hAPI, "Transfer-Encoding:\tchunked")+"3\r\nabc\r\n0\r\n\r\n", 200)
	add("framing", "TE in HTTP/1.0", req("POST /public HTTP/1.0", hAPI, te)+"3\r\nabc\r\n0\r\n\r\n", 400)
	add("framing", "TE in HTTP/1.0 keep-alive", req("POST /public HTTP/1.0", hAPI, "Connection: keep-alive", te)+"3\r\nabc\r\n0\r\n\r\n", 400)
	add("framing", "bare LF line ends", "GET / HTTP/1.1\n"+hAPI+"\n\n", 400)
	add("framing", "bare LF after the request line", "GET / HTTP/1.1\r\n"+hAPI+"\nAccept: */*\r\n\r\n", 400)
	add("framing", "bare LF ending the head", "GET / HTTP/1.1\r\n"+hAPI+"\r\n\n", 400)
	add("framing", "bare LF request line", "GET / HTTP/1.1\n"+hAPI+"\r\n\r\n", 400)
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
	add("framing", "chunked body never ends", chunked("3\r\nabc\r\n0\r\n"), 400).halfClose = true
	add("framing", "Expect and bad chunk", chunked("3\nabc\n0\n\n", "Expect: 100-continue"), 400)
	add("framing", "CL body cut short", req("POST /partial HTTP/1.1", hAPI, "Content-Length: 10")+"abc", 400).halfClose = true
	cs[len(cs)-1].partial = true
	add("framing", "chunked body over the read-ahead, valid", chunked(bigChunks(80<<10)+"0\r\n\r\n"), 200)
	add("framing", "chunked body over the read-ahead, broken late",
		req("POST /partial HTTP/1.1", hAPI, te)+bigChunks(80<<10)+"3\nabc\n0\n\n", 400).partial = true
	add("framing", "CL shorter than the body", req("POST /public HTTP/1.1", hAPI, "Content-Length: 1")+"abc"+get("/"), 200, 400)
	add("framing", "pipelined after TE+CL", get("/")+chunked("3\r\nabc\r\n0\r\n\r\n", cl)+get("/"), 200, 400)
	add("framing", "pipelined after chunked", chunked("3\r\nabc\r\n0\r\n\r\n")+get("/public"), 200, 200)
	add("framing", "pipelined after trailer", chunked("3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n")+get("/public"), 200, 200)
	add("framing", "pipelined after CL body", req("POST /public HTTP/1.1", hAPI, cl)+"abc"+get("/public"), 200, 200)

	// Upgrades.
	add("upgrade", "h2c", get("/", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"), 400)
	add("upgrade", "H2C upper-case", get("/", "Connection: Upgrade", "Upgrade: H2C"), 400)
	add("upgrade", "h2c in a list", get("/", "Connection: Upgrade", "Upgrade: websocket, h2c"), 400)
	add("upgrade", "HTTP2-Settings alone", get("/", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"), 400)
	add("upgrade", "h2c without Connection", get("/", "Upgrade: h2c"), 400)
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

// hostileOrigin counts the requests that reach it.
type hostileOrigin struct {
	srv *httptest.Server

	active   atomic.Int64 // handlers running
	mu       sync.Mutex
	started  int // requests whose head arrived
	complete int // requests whose body arrived whole
	last     *http.Request
	partial  [2]int // started and complete, for /partial
}

func newHostileOrigin(t *testing.T) *hostileOrigin {
	o := &hostileOrigin{}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.active.Add(1)
		defer o.active.Add(-1)
		partial := r.URL.Path == "/partial"
		o.mu.Lock()
		if partial {
			o.partial[0]++
		} else {
			o.started++
		}
		o.mu.Unlock()
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			// As a sane origin would. For a streamed body that breaks late,
			// this answer can beat edge's own 400 to the client.
			http.Error(w, "origin: broken body", http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		if partial {
			o.partial[1]++
		} else {
			o.complete++
			o.last = r
		}
		o.mu.Unlock()
		io.WriteString(w, "origin")
	}))
	t.Cleanup(o.srv.Close)
	return o
}

// settle waits until no origin handler is running, so that counts are
// final.
func (o *hostileOrigin) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for o.active.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("origin handlers still running after 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func (o *hostileOrigin) counts() (started, complete int, last *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.started, o.complete, o.last
}

// hostileConfig is the site described at the top of this file.
func hostileConfig(origin string) rules.Config {
	hour := time.Hour
	return rules.Config{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1",
		Origin:         origin,
		MaxHeaderBytes: 8 << 10,
		Domains: []rules.DomainConfig{
			{Name: "api", Hosts: []string{"api.example.com", "[2001:db8::1]", "192.0.2.10"}, Rules: []rules.RuleConfig{
				{Name: "admin", Limit: 1, Period: hour, Match: &rules.MatchConfig{PathPrefix: "/admin/"}},
				{Name: "login", Limit: 1, Period: hour, Match: &rules.MatchConfig{PathPrefix: "/login", Methods: []string{"POST"}}},
			}},
			{Name: "www", Hosts: []string{"www.example.com", "*.wild.example.com", "xn--bcher-kva.example"}},
			{Name: "static", Hosts: []string{"static.example.com"}, Respond: &rules.ResponseConfig{Status: 203, Body: "static"}},
		},
	}
}

// hostileServer is a real http.Server, configured as cmd/edge configures
// its public server, serving p through a Listener.
type hostileServer struct {
	srv    *http.Server
	addr   string
	done   chan error
	closed sync.Map // client address → time.Time the server closed its connection
	conns  sync.WaitGroup
}

// closedAt returns when the server closed (or handed off) the connection
// from the client address addr.
func (s *hostileServer) closedAt(addr string) (time.Time, bool) {
	v, ok := s.closed.Load(addr)
	if !ok {
		return time.Time{}, false
	}
	return v.(time.Time), true
}

func startHostileServer(t *testing.T, p *Proxy, table *rules.Table, lo ListenerOptions) *hostileServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &hostileServer{
		srv: &http.Server{
			Handler:           p,
			ReadHeaderTimeout: table.Timeouts.ReadHeader,
			ReadTimeout:       table.Timeouts.Read,
			WriteTimeout:      table.Timeouts.Write,
			IdleTimeout:       table.Timeouts.Idle,
			MaxHeaderBytes:    table.MaxHeaderBytes,
			ErrorLog:          discardLog,
			// As cmd/edge sets it: OPTIONS * goes to the handler (the
			// Listener refuses it before that).
			DisableGeneralOptionsHandler: true,
		},
		addr: ln.Addr().String(),
		done: make(chan error, 1),
	}
	lo.MaxHeaderBytes = table.MaxHeaderBytes
	l := NewListener(ln, lo)
	s.srv.ConnState = func(c net.Conn, st http.ConnState) {
		l.ConnState(c, st) // as cmd/edge installs it
		switch st {
		case http.StateNew:
			s.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.closed.Store(c.RemoteAddr().String(), time.Now())
			s.conns.Done()
		}
	}
	go func() { s.done <- s.srv.Serve(l) }()
	return s
}

// stop closes the server and waits for Serve to return and for every
// connection's goroutine to finish (net/http lingers up to 500 ms after a
// 400 before it closes).
func (s *hostileServer) stop(t *testing.T) {
	t.Helper()
	s.srv.Close()
	if err := <-s.done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	s.conns.Wait()
}

// exchange sends raw on a new connection and reads len(want) responses
// (skipping interim 1xx ones). A status of 0 stands for "closed without a
// response".
func exchange(t *testing.T, addr string, c hostileCase) (got []int, bodies []string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	// Write concurrently: the server may answer (and stop reading) before
	// a long input is written.
	werr := make(chan error, 1)
	go func() {
		_, err := io.WriteString(conn, c.raw)
		if err == nil && c.halfClose {
			err = conn.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	defer func() { <-werr }()
	br := bufio.NewReader(conn)
	method := "GET"
	if c.head {
		method = "HEAD"
	}
	for range c.want {
		var resp *http.Response
		for {
			resp, err = http.ReadResponse(br, &http.Request{Method: method})
			if err != nil || resp.StatusCode >= 200 || resp.StatusCode == 101 {
				break
			}
		}
		if err != nil {
			got = append(got, 0)
			bodies = append(bodies, err.Error())
			break
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got = append(got, resp.StatusCode)
		bodies = append(bodies, string(b))
		if resp.Close && resp.StatusCode >= 400 && len(got) < len(c.want) {
			break
		}
	}
	return got, bodies
}

var discardLog = log.New(io.Discard, "", 0)

func TestHostileCorpus(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	origin := newHostileOrigin(t)
	defer origin.srv.Close()
	cfg := hostileConfig(origin.srv.URL)
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	transport := newTransport(table.Timeouts)
	defer transport.CloseIdleConnections()
	p, err := New(Options{Table: table, Now: clk.Now, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	srv := startHostileServer(t, p, table, ListenerOptions{WriteIdleTimeout: 5 * time.Second})
	defer srv.stop(t)

	// Spend the admin and login quotas.
	for _, raw := range []string{req("GET /admin/ HTTP/1.1", hAPI), req("POST /login HTTP/1.1", hAPI)} {
		if got, _ := exchange(t, srv.addr, hostileCase{raw: raw, want: []int{200}}); got[0] != 200 {
			t.Fatalf("priming %q: got %v, want 200", raw, got)
		}
	}

	corpus := hostileCorpus()
	type tally struct{ n, failed int }
	classes := map[string]*tally{}
	var order []string
	for _, c := range corpus {
		if classes[c.class] == nil {
			classes[c.class] = &tally{}
			order = append(order, c.class)
		}
		classes[c.class].n++
		origin.settle(t)
		s0, c0, _ := origin.counts()
		got, bodies := exchange(t, srv.addr, c)
		origin.settle(t)
		s1, c1, last := origin.counts()

		forwarded := 0
		for _, w := range c.want {
			if w == 200 && !c.local {
				forwarded++
			}
		}
		var problems []string
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			problems = append(problems, fmt.Sprintf("statuses %v, want %v (bodies %q)", got, c.want, bodies))
		}
		if c1-c0 != forwarded {
			problems = append(problems, fmt.Sprintf("origin got %d complete requests, want %d", c1-c0, forwarded))
		}
		if s1-s0 != forwarded {
			problems = append(problems, fmt.Sprintf("origin saw %d request heads, want %d", s1-s0, forwarded))
		}
		if forwarded == 1 && c1-c0 == 1 {
			if c.originURI != "" && last.RequestURI != c.originURI {
				problems = append(problems, fmt.Sprintf("origin saw target %q, want %q", last.RequestURI, c.originURI))
			}
			for k, v := range c.originHdr {
				if g := strings.Join(last.Header.Values(k), ", "); g != v {
					problems = append(problems, fmt.Sprintf("origin saw %s %q, want %q", k, g, v))
				}
			}
		}
		if len(problems) > 0 {
			classes[c.class].failed++
			t.Errorf("%s / %s:\n\t%s", c.class, c.name, strings.Join(problems, "\n\t"))
		}
	}
	if len(corpus) < 150 {
		t.Errorf("corpus has %d inputs, want at least 150", len(corpus))
	}
	var summary []string
	for _, cl := range order {
		summary = append(summary, fmt.Sprintf("%s %d/%d", cl, classes[cl].n-classes[cl].failed, classes[cl].n))
	}
	t.Logf("%d hostile inputs as expected by class: %s", len(corpus), strings.Join(summary, ", "))

	origin.settle(t)
	origin.mu.Lock()
	if origin.partial[1] != 0 {
		t.Errorf("origin got %d complete requests for /partial, want 0 (%d heads)", origin.partial[1], origin.partial[0])
	}
	origin.mu.Unlock()

	// The upstream pool is healthy: keep-alive requests all get through.
	_, c0, _ := origin.counts()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	const followUps = 300
	for i := range followUps {
		r, _ := http.NewRequest("GET", "http://"+srv.addr+fmt.Sprintf("/public/%d", i), nil)
		r.Host = "www.example.com"
		resp, err := client.Do(r)
		if err != nil {
			t.Fatalf("follow-up %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("follow-up %d: got %d, want 200", i, resp.StatusCode)
		}
	}
	origin.settle(t)
	if _, c1, _ := origin.counts(); c1-c0 != followUps {
		t.Errorf("origin got %d follow-ups, want %d", c1-c0, followUps)
	}
}
