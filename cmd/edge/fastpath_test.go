package main

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/proxy"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// The differential test of the fast path: the same request sequences go
// to two edges with the same configuration and clock, one with fastpath
// true and one with fastpath false, and everything the clients receive,
// and every metric, must be the same byte for byte (but Date).

// diffConfig serves api.example.com and www.example.com with rules that
// exercise the refusal's parts: JSON and text bodies, every field,
// mitigation, count_blocked, a log rule, a header key, a path rule, a
// custom block response, a quota, a token bucket, a trusted proxy; and a
// domain only the check listener answers for, whose hosts the public
// listener misdirects; and a GraphQL API priced by its queries (whose
// requests the fast path declines) with a rule charging origin time. Its
// stores are small: the test runs hundreds of
// edges at once, and at the default max_keys (a million keys each) they
// took 24 GB under the race detector, and the kernel killed the test.
const diffConfig = `
origin: ORIGIN
max_keys: 1000
client_ip: {trusted_proxies: ["127.0.0.0/8"]}
domains:
  - name: api
    hosts: [api.example.com]
    rules:
      - {name: per-ip, limit: LIMIT, period: 1m, key: [ip]}
      - {name: watch, limit: 1, period: 1m, key: [ip], action: log}
      - {name: per-token, limit: 3, period: 1m, key: ["header:X-Api-Key"], count_blocked: true}
      - {name: items, limit: 2, period: 1m, key: [ip, path], match: {path_prefix: /items/}, mitigation_timeout: 5m}
      - {name: hidden, limit: 100, period: 1m, key: [host], headers: none}
      - {name: per-session, limit: 3, period: 1m, key: ["cookie:session"], when_missing: skip}
      - {name: per-query-key, limit: 3, period: 1m, key: ["query:api key", ip], when_missing: skip}
      - {name: mobile, limit: 2, period: 1m, key: [ip], match: {headers: {X-Client: mobile, X-App: ""}}}
  - name: www
    hosts: [www.example.com]
    rules:
      - {name: bucket, algorithm: token_bucket, limit: 2, period: 1m, key: [ip]}
      - {name: monthly, algorithm: quota, limit: 3, reset: monthly, key: [ip], headers: always}
      - name: custom
        limit: 1
        period: 1m
        key: [ip]
        match: {path_prefix: /custom}
        block_response: {status: 420, body: "slow down\n", content_type: text/plain}
  - name: gql
    hosts: [gql.example.com]
    serve: proxy
    graphql: {max_query_cost: 100}
    rules:
      - {name: points, algorithm: token_bucket, limit: 1, period: 1m, burst: 100, key: [ip], cost_from: graphql}
      - {name: origin-time, limit: 60000, period: 1m, key: [ip], cost_from: origin_time, cost: 0, headers: none}
  - name: plans
    hosts: [plans.example.com]
    serve: proxy
    api_keys: {from: "header:X-Api-Key", plan_from: "header:X-Plan", required: true}
    rules:
      - {name: per-key, limit: 1, period: 1m, key: ["header:X-Api-Key"], plans: {gold: {limit: 3}}}
  - name: tok
    hosts: [tok.example.com]
    jwt: {keys_file: testdata/diff-jwks.json, invalid: refuse, issuer: "https://id.example"}
    rules:
      - {name: per-user, limit: 2, period: 1m, key: ["jwt:sub"]}
      - {name: per-org, limit: 1, period: 1m, key: ["jwt:org.id", ip], when_missing: skip}
  - name: anon
    hosts: [anon.example.com]
    jwt: {keys_file: testdata/diff-jwks.json, from: "cookie:at"}
    rules:
      - {name: per-user, limit: 2, period: 1m, key: ["jwt:sub"]}
  - name: asked
    hosts: [asked.example.com]
    serve: check
    rules:
      - {name: per-ip, limit: 1, period: 1m, key: [ip]}
check: {listen: "127.0.0.1:0"}
`

// sentinel is answered 421 with Connection: close, so that the server
// closes the connection after everything before it.
const sentinel = "GET /end HTTP/1.1\r\nHost: nobody.example.com\r\nConnection: close\r\n\r\n"

type diffServer struct {
	addr     string
	reg      *prometheus.Registry
	answered atomic.Int64 // requests the fast path answered
	// idle receives when net/http reports a connection idle after serving
	// a request: only then does the guard offer the next one to the fast
	// path.
	idle chan struct{}
	logs *lockedBuffer // the proxy's log, debug lines included, without times
	via  string        // the edge's Via pseudonym (proxy.Proxy.Via)
	// tls is the address of the edge's HTTPS listener, "" without one;
	// clientTLS, set with it, is how exchange's client connects there
	// (difftls_test.go). Then exchange speaks TLS; plainExchange does not.
	tls       string
	clientTLS *tls.Config
	// access receives the access log's lines (access_log path "-"), and
	// proxy is the edge, whose access log accessLines writes out.
	access *lockedBuffer
	proxy  *proxy.Proxy
}

// variableFields are the access log's fields that differ between two
// edges serving the same requests: the origin's time and its URL (each
// edge of a forward test has an origin of its own).
var variableFields = regexp.MustCompile(`"origin_ms":[0-9.]+|"origin":"[^"]*"`)

// accessLines returns the access log's lines so far, but for
// variableFields.
func (ds *diffServer) accessLines(t *testing.T) string {
	t.Helper()
	ds.proxy.FlushAccessLog()
	return variableFields.ReplaceAllString(ds.access.String(), "")
}

// dial opens a client's connection to ds: over TLS to its HTTPS listener
// when it has one, else to its plain listener.
func (ds *diffServer) dial(t *testing.T) net.Conn {
	t.Helper()
	if ds.tls == "" {
		return dialPlain(t, ds.addr)
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ds.tls, ds.clientTLS)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func dialPlain(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startDiff starts an edge with diffConfig (limit per-ip's limit) and
// fastpath set as fast.
func startDiff(t testing.TB, origin string, limit int, fast bool, extra string) *diffServer {
	t.Helper()
	return startDiffOver(t, origin, limit, fast, extra, nil)
}

// startDiffOver is startDiff serving TLS with fix's certificate, as
// diffTLS.diffConfig has it, or plain HTTP only for a nil fix.
func startDiffOver(t testing.TB, origin string, limit int, fast bool, extra string, fix *diffTLS) *diffServer {
	t.Helper()
	cfg := diffConfig
	if fix != nil {
		cfg = fix.diffConfig(t)
	}
	cfg = strings.NewReplacer("ORIGIN", origin, "LIMIT", fmt.Sprint(limit)).Replace(cfg) + extra
	return startConfigOver(t, cfg, fast, fix)
}

var dateLine = regexp.MustCompile(`(?m)^Date: [^\r\n]*\r\n`)

// exchange sends steps on one connection: each step is written, and when
// wait is set its response is read before the next is written (so that
// the connection is idle in between); at the end the client half-closes
// (or sends the sentinel) and reads until the server closes.
func exchange(t *testing.T, ds *diffServer, steps []string, wait bool, halfClose bool) string {
	t.Helper()
	return exchangeOn(t, ds, ds.dial(t), steps, wait, halfClose)
}

// plainExchange is exchange on ds's plain listener, whether or not ds
// serves TLS.
func plainExchange(t *testing.T, ds *diffServer, steps []string, wait bool, halfClose bool) string {
	t.Helper()
	return exchangeOn(t, ds, dialPlain(t, ds.addr), steps, wait, halfClose)
}

// exchangeOn is exchange on c, a connection to ds. It never ends the
// test, so that it may run in a goroutine of its own.
func exchangeOn(t *testing.T, ds *diffServer, c net.Conn, steps []string, wait bool, halfClose bool) string {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var got bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &got))
	for i, s := range steps {
		if _, err := io.WriteString(c, s); err != nil {
			break
		}
		// With halfClose the last step's answer may need the end of the
		// stream (a body cut short): it is read after the half-close.
		if wait && !(halfClose && i == len(steps)-1) {
			answered := ds.answered.Load()
			method, _, _ := strings.Cut(s, " ")
			resp, err := http.ReadResponse(br, &http.Request{Method: method})
			if err != nil {
				break
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if ds.answered.Load() == answered && !resp.Close {
				// net/http served it: the next request goes to the fast
				// path only once net/http has said the connection is
				// idle, which it does after the response is sent. Wait
				// for that, briefly: a connection net/http is about to
				// close, or whose response it has not finished, never
				// says so, and then the next request is net/http's on
				// both paths.
				awaitIdle(ds, time.Second)
			}
		}
	}
	if halfClose {
		// TCP's FIN, or over TLS the close_notify alert, which the
		// server reads as the end of the stream.
		c.(interface{ CloseWrite() error }).CloseWrite()
	} else {
		io.WriteString(c, sentinel)
	}
	// What the reader buffered is in got already; read the rest.
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	io.Copy(io.Discard, br)
	return dateLine.ReplaceAllString(got.String(), "")
}

// awaitIdle waits, at most for wait, until net/http reports a connection
// of ds idle.
func awaitIdle(ds *diffServer, wait time.Duration) {
	select {
	case <-ds.idle:
	case <-time.After(wait):
	}
}

// metricsText is the registry's metrics but those that time things (and
// the connections open, which the two paths close at their own pace).
func metricsText(t *testing.T, reg *prometheus.Registry) string {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Each side has origins of its own: a server is named by its rank
	// among the servers' URLs (rawOrigin.group lists them sorted).
	var servers []string
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "server" && !slices.Contains(servers, l.GetValue()) {
					servers = append(servers, l.GetValue())
				}
			}
		}
	}
	slices.Sort(servers)
	var b bytes.Buffer
	for _, mf := range mfs {
		switch mf.GetName() {
		case "edge_upstream_request_duration_seconds", "edge_origin_response_seconds", "edge_connections_open", "edge_tls_handshake_seconds":
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "server" {
					rank := fmt.Sprintf("server-%d", slices.Index(servers, l.GetValue()))
					l.Value = &rank
				}
			}
		}
		expfmt.MetricFamilyToText(&b, mf)
	}
	return b.String()
}

func get(host, target string, fields ...string) string {
	return hostile.Req(append([]string{"GET " + target + " HTTP/1.1", "Host: " + host}, fields...)...)
}

// gqlPost is a POST of query to gql.example.com's GraphQL API.
func gqlPost(query string) string {
	body, _ := json.Marshal(map[string]string{"query": query})
	return hostile.Req("POST /graphql HTTP/1.1", "Host: gql.example.com", "Content-Type: application/json",
		"Content-Length: "+strconv.Itoa(len(body))) + string(body)
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// diffCase is one request sequence.
type diffCase struct {
	name      string
	steps     []string
	wait      bool // one request at a time
	halfClose bool
	limit     int    // per-ip's limit; 0 for 2
	extra     string // more configuration
	fast      bool   // the fast path must have answered some
	has       string // the answers must hold it
	plain     bool   // sent to the plain listener of an edge that serves TLS
}

func TestFastPathDifferential(t *testing.T) {
	origin := diffOrigin(t)
	for _, tc := range fastPathCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runFastPathCase(t, origin, tc, nil)
		})
	}
}

// diffOrigin is the origin of the fast path's differential tests: it
// answers each request with its method and path.
func diffOrigin(t *testing.T) string {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "origin "+r.Method+" "+r.URL.Path+"\n")
	}))
	t.Cleanup(origin.Close) // after the parallel subtests
	return origin.URL
}

// fastPathCases are the request sequences of the fast path's
// differential tests, over plain HTTP and over TLS.
func fastPathCases() []diffCase {
	api := "api.example.com"
	cases := []diffCase{
		{name: "flood, one at a time", steps: repeat(get(api, "/a"), 8), wait: true, fast: true},
		{name: "flood, JSON", steps: repeat(get(api, "/a", "Accept: text/html, application/json;q=0.5"), 8), wait: true, fast: true},
		{name: "flood, JSON refused by q=0", steps: repeat(get(api, "/a", "Accept: application/json;q=0"), 6), wait: true, fast: true},
		{name: "flood, pipelined", steps: []string{strings.Repeat(get(api, "/a"), 10)}},
		{name: "flood, pipelined in pieces", steps: repeat(get(api, "/a")+get(api, "/b"), 6)},
		{name: "mixed case host with port", steps: repeat(get("API.Example.com:80", "/a"), 6), wait: true, fast: true},
		{name: "keep-alive field", steps: repeat(get(api, "/a", "Connection: keep-alive"), 6), wait: true, fast: true},
		{name: "connection close midway", steps: append(repeat(get(api, "/a"), 4), get(api, "/a", "Connection: close"), get(api, "/a")), wait: true, fast: true},
		{name: "HEAD", steps: append(repeat(get(api, "/a"), 4), hostile.Req("HEAD /a HTTP/1.1", "Host: "+api)), wait: true},
		{name: "POST with a body", steps: append(repeat(get(api, "/a"), 4), hostile.Req("POST /a HTTP/1.1", "Host: "+api, "Content-Length: 5")+"hello", get(api, "/a")), wait: true},
		{name: "HTTP/1.0", steps: append(repeat(get(api, "/a"), 4), hostile.Req("GET /a HTTP/1.0", "Host: "+api)), wait: true},
		{name: "path rule and mitigation", steps: repeat(get(api, "/items/1"), 6), wait: true, limit: 100, fast: true},
		{name: "encoded path", steps: repeat(get(api, "/items/%31"), 6), wait: true, limit: 100, fast: true},
		{name: "encoded slash", steps: append(repeat(get(api, "/items/1"), 4), get(api, "/items%2f1"), get(api, "/items/1")), wait: true, limit: 100, fast: true},
		{name: "dot segment", steps: append(repeat(get(api, "/a"), 4), get(api, "/x/../a")), wait: true},
		{name: "bad escape", steps: append(repeat(get(api, "/a"), 4), get(api, "/a%zz")), wait: true},
		{name: "params in path", steps: repeat(get(api, "/items;x=1/2"), 6), wait: true, limit: 100, fast: true},
		{name: "header key", steps: repeat(get(api, "/a", "X-Api-Key: k1", "x-api-key: k2"), 6), wait: true, limit: 100, fast: true},
		{name: "cookie key", steps: repeat(get(api, "/a", "Cookie: a=1; session=s1", "Cookie: session=s2"), 6), wait: true, limit: 100, fast: true},
		{name: "cookie key, two clients", steps: append(repeat(get(api, "/a", "Cookie: session=s1"), 4), get(api, "/a", "Cookie: session=\"s2\""), get(api, "/a", "Cookie: session=")), wait: true, limit: 100, fast: true},
		{name: "query key", steps: repeat(get(api, "/a?x=1&api+key=k%7C1&api%20key=2"), 6), wait: true, limit: 100, fast: true},
		{name: "query key, ;", steps: repeat(get(api, "/a?api+key=a;b&api+key=ok&api+key="), 6), wait: true, limit: 100, fast: true},
		// The guard leaves a target with a bad escape to net/http.
		{name: "query key, bad escape", steps: repeat(get(api, "/a?api+key=%zz&api+key=ok"), 6), wait: true, limit: 100},
		{name: "match headers", steps: append(repeat(get(api, "/a", "X-Client: mobile", "X-App: 1"), 4), get(api, "/a", "X-Client: Mobile", "X-App: 1")), wait: true, limit: 100, fast: true},
		{name: "jwt key", steps: repeat(get("tok.example.com", "/a", "Authorization: Bearer "+diffToken("alice", "")), 5), wait: true, limit: 100, fast: true},
		{name: "jwt key, two users", steps: append(repeat(get("tok.example.com", "/a", "Authorization: Bearer "+diffToken("alice", "")), 3),
			get("tok.example.com", "/a", "Authorization: bearer "+diffToken("bob", ""))), wait: true, limit: 100, fast: true},
		{name: "jwt nested claim", steps: repeat(get("tok.example.com", "/a", "Authorization: Bearer "+diffToken("carol", "o1")), 4), wait: true, limit: 100, fast: true},
		{name: "jwt claim not scalar", steps: repeat(get("tok.example.com", "/a", "Authorization: Bearer "+diffToken("dave", "[1]")), 4), wait: true, limit: 100, fast: true},
		{name: "jwt refused: none, bad, two", steps: []string{get("tok.example.com", "/a"), get("tok.example.com", "/a", "Authorization: Bearer x.y.z"),
			get("tok.example.com", "/a", "Authorization: Bearer "+diffToken("alice", ""), "Authorization: Bearer "+diffToken("bob", ""))}, wait: true, limit: 100, fast: true, has: "Www-Authenticate: Bearer error=\"invalid_token\"\r\n"},
		{name: "jwt refused, HEAD", steps: []string{hostile.Req("HEAD /a HTTP/1.1", "Host: tok.example.com"), get("tok.example.com", "/a")}, wait: true, limit: 100},
		{name: "jwt in a cookie, anonymous", steps: append(repeat(get("anon.example.com", "/a", "Cookie: at="+diffToken("alice", "")), 3),
			get("anon.example.com", "/a"), get("anon.example.com", "/a", "Cookie: at=bad")), wait: true, limit: 100, fast: true},
		{name: "header key blank", steps: repeat(get(api, "/a", "X-Api-Key:  "), 6), wait: true, limit: 100, fast: true},
		{name: "trusted proxy", steps: repeat(get(api, "/a", "X-Forwarded-For: 203.0.113.7"), 6), wait: true, fast: true},
		{name: "trusted proxy, two lines", steps: repeat(get(api, "/a", "X-Forwarded-For: 198.51.100.1, 203.0.113.7", "X-Forwarded-For: 127.0.0.2"), 6), wait: true, fast: true},
		{name: "trusted proxy, malformed", steps: repeat(get(api, "/a", "X-Forwarded-For: 203.0.113.7:80"), 6), wait: true, fast: true},
		{name: "underscore field", steps: append(repeat(get(api, "/a"), 4), get(api, "/a", "X_Forwarded_For: 1.2.3.4")), wait: true},
		{name: "h2c upgrade", steps: append(repeat(get(api, "/a"), 4), get(api, "/a", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAA")), wait: true},
		{name: "lower-case method", steps: append(repeat(get(api, "/a"), 4), hostile.Req("get /a HTTP/1.1", "Host: "+api)), wait: true},
		{name: "unknown host", steps: append(repeat(get(api, "/a"), 4), get("nobody.example.com", "/a"), get(api, "/a")), wait: true},
		{name: "bad host", steps: append(repeat(get(api, "/a"), 4), get("a_b.example.com", "/a"), get(api, "/a")), wait: true},
		{name: "expect", steps: append(repeat(get(api, "/a"), 4), get(api, "/a", "Expect: 100-continue")), wait: true},
		{name: "token bucket JSON", steps: repeat(get("www.example.com", "/a", "Accept: application/json"), 6), wait: true, fast: true},
		{name: "quota", steps: repeat(get("www.example.com", "/q"), 6), wait: true, fast: true},
		{name: "custom block response", steps: repeat(get("www.example.com", "/custom"), 5), wait: true, fast: true},
		{name: "PUT DELETE PATCH OPTIONS", steps: append(repeat(get(api, "/a"), 3), hostile.Req("PUT /a HTTP/1.1", "Host: "+api),
			hostile.Req("DELETE /a HTTP/1.1", "Host: "+api), hostile.Req("PATCH /a HTTP/1.1", "Host: "+api),
			hostile.Req("OPTIONS /a HTTP/1.1", "Host: "+api)), wait: true, fast: true},
		{name: "no read timeout: first request too", steps: repeat(get(api, "/a"), 6), wait: true, extra: "timeouts: {read: 0s}\n", fast: true},
		{name: "half-close", steps: repeat(get(api, "/a"), 5), wait: true, halfClose: true, fast: true},
		{name: "every key in the accuracy sample", steps: repeat(get(api, "/a"), 8), wait: true, extra: "accuracy_sample: 1\n", fast: true},
		{name: "a domain served only by the check listener", steps: append(repeat(get("asked.example.com", "/a"), 3), get(api, "/a")), wait: true},
		// SELF is the edge's own Via pseudonym (the same on both edges):
		// a loop, answered 508 before any rule, is the same bytes on both
		// paths; another node's entry is no loop.
		{name: "loop", steps: repeat(get(api, "/a", "Via: 1.1 SELF"), 6), wait: true, limit: 1, fast: true, has: "HTTP/1.1 508 Loop Detected\r\n"},
		{name: "loop among other entries", steps: repeat(get(api, "/a", "Via: 1.0 fred", "via: 1.1 p.example.net (x, y), 1.1 SELF (edge)"), 6), wait: true, limit: 1, fast: true, has: "HTTP/1.1 508 Loop Detected\r\n"},
		{name: "loop, HEAD", steps: append(repeat(get(api, "/a"), 2), hostile.Req("HEAD /a HTTP/1.1", "Host: "+api, "Via: 1.1 SELF"), get(api, "/a")), wait: true, limit: 100, fast: true, has: "HTTP/1.1 508 Loop Detected\r\n"},
		{name: "loop, POST with a body", steps: append(repeat(get(api, "/a"), 2), hostile.Req("POST /a HTTP/1.1", "Host: "+api, "Via: 1.1 SELF", "Content-Length: 5")+"hello", get(api, "/a")), wait: true, fast: true, has: "HTTP/1.1 508 Loop Detected\r\n"},
		{name: "loop, unknown host", steps: append(repeat(get(api, "/a"), 2), get("nobody.example.com", "/a", "Via: 1.1 SELF"), get(api, "/a")), wait: true},
		{name: "graphql priced, THROTTLED", steps: append(repeat(gqlPost(`{ products(first: 10) { edges { node { title } } } }`), 9), get("gql.example.com", "/other")),
			wait: true, has: `"requestedQueryCost":12,"throttleStatus":{"maximumAvailable":100,"currentlyAvailable":4,"restoreRate":0.016666666666666666}`},
		{name: "graphql GET, 400s, off the API's path", steps: []string{
			get("gql.example.com", "/graphql?query=%7B+a+%7B+id+%7D+%7D"),
			gqlPost(`{ a { ...F } } fragment F on T { ...F }`),
			gqlPost(`{ a(first: 200) { nodes { id } } }`),
			hostile.Req("POST /graphql HTTP/1.1", "Host: gql.example.com", "Content-Length: 3") + "{ a",
			get("gql.example.com", "/graphql", "Accept: application/json"),
		}, wait: true, has: `"code":"MAX_COST_EXCEEDED","cost":202,"maxCost":100`},
		{name: "graphql, off the API's path on the fast path", steps: repeat(get("gql.example.com", "/other"), 102), wait: true, fast: true},
		{name: "plans: a plan's limit, another plan, no key", steps: append(append(repeat(get("plans.example.com", "/a", "X-Api-Key: k1", "X-Plan: gold"), 4),
			repeat(get("plans.example.com", "/a", "X-Api-Key: k1", "X-Plan: silver"), 2)...), get("plans.example.com", "/a"), get("plans.example.com", "/a", "X-Api-Key: k2")),
			wait: true, has: `{"error":"invalid_api_key"}`},
		{name: "another node's Via", steps: repeat(get(api, "/a", "Via: 1.1 SELFx", "Via: 1.1 x-SELF"), 6), wait: true, fast: true},
	}
	// Every hostile input, after requests that put the connection on the
	// fast path, under a limit that refuses and one that allows.
	prime := repeat(get(api, "/a"), 3)
	for _, hc := range hostile.Corpus() {
		for _, limit := range []int{1, 1_000_000} {
			cases = append(cases, diffCase{name: fmt.Sprintf("hostile %s/%s, limit %d", hc.Class, hc.Name, limit),
				steps: append(append([]string(nil), prime...), hc.Raw), wait: false, halfClose: hc.HalfClose, limit: limit})
		}
	}
	// The guard's own framing streams, likewise.
	for i, s := range []string{
		hostile.Get("/") + hostile.Req("POST /b HTTP/1.1", hostile.HostAPI, "Content-Length: 5") + "hello" + hostile.Get("/d"),
		hostile.Req("POST /c HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked") + "5;x=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n" + hostile.Get("/d"),
		hostile.Get("/") + hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked", "Content-Length: 3") + "abc",
		hostile.Get("/") + "\x16\x03\x01\n",
		// Over what net/http reads of a head at all (max_header_bytes and
		// 4 KiB, and the 4 KiB it peeks at between requests): a head
		// within that last 4 KiB is served after a request net/http
		// served, and answered 431 by a first read, which the fast path
		// makes of what follows the requests it answered.
		hostile.Get("/", "X: "+strings.Repeat("a", 80_000)),
		hostile.Get("/ws", "Connection: Upgrade", "Upgrade: websocket") + hostile.Get("/"),
	} {
		for _, limit := range []int{1, 1_000_000} {
			cases = append(cases, diffCase{name: fmt.Sprintf("framing stream %d, limit %d", i, limit),
				steps: append(append([]string(nil), prime...), s), limit: limit})
		}
	}

	return cases
}

// runFastPathCase sends tc's requests to an edge with fastpath true and
// one with fastpath false, serving TLS with fix's certificate (over which
// the requests go, unless tc.plain) or, for a nil fix, plain HTTP only,
// and compares what the clients received, the metrics and the logs.
func runFastPathCase(t *testing.T, origin string, tc diffCase, fix *diffTLS) {
	limit := tc.limit
	if limit == 0 {
		limit = 2
	}
	fast := startDiffOver(t, origin, limit, true, tc.extra, fix)
	slow := startDiffOver(t, origin, limit, false, tc.extra, fix)
	if fast.via != slow.via {
		t.Fatalf("Via pseudonyms %q and %q, want one", fast.via, slow.via)
	}
	steps := slices.Clone(tc.steps)
	for i := range steps {
		steps[i] = strings.ReplaceAll(steps[i], "SELF", fast.via)
	}
	send := exchange
	if tc.plain {
		send = plainExchange
	}
	got := send(t, fast, steps, tc.wait, tc.halfClose)
	want := send(t, slow, steps, tc.wait, tc.halfClose)
	if got != want {
		t.Errorf("fast path answered\n%s\nslow path\n%s", got, want)
	}
	if !strings.Contains(got, tc.has) {
		t.Errorf("the answers\n%s\nhold no %q", got, tc.has)
	}
	if slow.answered.Load() != 0 {
		t.Errorf("fastpath false: %d requests answered by the fast path", slow.answered.Load())
	}
	if tc.fast && fast.answered.Load() == 0 {
		t.Errorf("the fast path answered nothing")
	}
	g, w := metricsText(t, fast.reg), metricsText(t, slow.reg)
	if g != w {
		t.Errorf("metrics differ:\nfast path\n%s\nslow path\n%s", g, w)
	}
	if overTLS := fix != nil && !tc.plain; overTLS != strings.Contains(g, `edge_tls_handshakes_total{result="ok"} 1`) {
		t.Errorf("over TLS %v, but the handshakes counted are:\n%s", overTLS, grepLines(g, "edge_tls_handshakes_total"))
	}
	if g, w := fast.logs.String(), slow.logs.String(); g != w {
		t.Errorf("logs differ:\nfast path\n%s\nslow path\n%s", g, w)
	}
	if g, w := fast.accessLines(t), slow.accessLines(t); g != w {
		t.Errorf("access log lines differ:\nfast path\n%s\nslow path\n%s", g, w)
	}
}

// TestFastPathFirstRequest: with the default timeouts.read, a refused
// request that is the first on its connection, as a client that opens a
// connection per request sends it, is refused at the wire; and a slow head
// on a new connection is still cut at timeouts.read.
func TestFastPathFirstRequest(t *testing.T) {
	origin := httptest.NewServer(http.NotFoundHandler())
	defer origin.Close()
	t.Run("refused", func(t *testing.T) {
		ds := startDiff(t, origin.URL, 1, true, "")
		for i := range 4 {
			c, err := net.Dial("tcp", ds.addr)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			answered := ds.answered.Load()
			io.WriteString(c, get("api.example.com", "/a"))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			c.Close()
			if i == 0 {
				continue // allowed
			}
			if resp.StatusCode != 429 || ds.answered.Load() != answered+1 {
				t.Errorf("connection %d: status %d, %d answered by the fast path; want 429 from it",
					i, resp.StatusCode, ds.answered.Load()-answered)
			}
		}
	})
	t.Run("slow head", func(t *testing.T) {
		const read = 300 * time.Millisecond
		ds := startDiff(t, origin.URL, 1, true, fmt.Sprintf("timeouts: {read: %v}\n", read))
		start := time.Now() // the first request is dated from the connection's start
		c, err := net.Dial("tcp", ds.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET /a HTTP/1.1\r\nHost: api.example.com\r\n")
		io.Copy(io.Discard, c)
		if d := time.Since(start); d < read || d > 3*time.Second {
			t.Errorf("closed after %v, want it closed at timeouts.read (%v), before read_header (10s)", d.Round(time.Millisecond), read)
		}
	})
}

// BenchmarkFastRefuse measures the fast path's refusal loop as edge runs
// it: the framing guard reading pipelined heads from a loopback TCP
// connection, the proxy deciding each (one rule, every request over its
// limit) and the guard writing the 429, with local counting. allocs/op
// counts the whole process, the client included (which allocates nothing
// per request); it must be 0.
//
//	go test -run='^$' -bench=FastRefuse -benchmem ./cmd/edge/
func BenchmarkFastRefuse(b *testing.B) {
	for _, tc := range []struct {
		fast bool
		log  string // an access_log format, "" for none
	}{{true, ""}, {true, "json"}, {true, "combined"}, {false, ""}, {false, "json"}} {
		name := fmt.Sprintf("fastpath=%v", tc.fast)
		if tc.log != "" {
			name += ",access_log=" + tc.log
		}
		b.Run(name, func(b *testing.B) {
			fast := tc.fast
			origin := httptest.NewServer(http.NotFoundHandler())
			defer origin.Close()
			extra := ""
			if tc.log != "" {
				extra = fmt.Sprintf("access_log: {path: %q, format: %s}\n", filepath.Join(b.TempDir(), "access.log"), tc.log)
			}
			ds := startDiff(b, origin.URL, 2, fast, extra)
			c, err := net.Dial("tcp", ds.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			req := get("api.example.com", "/a")
			// Use up the limit, and learn the length of a 429.
			br := bufio.NewReader(c)
			var last []byte
			for range 4 {
				io.WriteString(c, req)
				var got bytes.Buffer
				resp, err := http.ReadResponse(bufio.NewReader(io.TeeReader(br, &got)), nil)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				last = got.Bytes()
				if resp.StatusCode != http.StatusTooManyRequests {
					continue
				}
			}
			if !bytes.HasPrefix(last, []byte("HTTP/1.1 429")) {
				b.Fatalf("not refused: %q", last)
			}
			size := len(last)
			const batch = 64
			reqs := []byte(strings.Repeat(req, batch))
			done := make(chan error, 1)
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				buf := make([]byte, 64<<10)
				want := b.N * size
				for want > 0 {
					n, err := br.Read(buf[:min(len(buf), want)])
					want -= n
					if err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for sent := 0; sent < b.N; sent += batch {
				if _, err := c.Write(reqs[:min(batch, b.N-sent)*len(req)]); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkFastRefuseLoop measures the guard's decision loop alone: one
// connection, in memory, whose reads give pipelined requests of one client
// over its limit and whose writes are counted, read by the guard's Read
// (framing, the offer, proxy.Answer, the 429) with no network, no client
// and no net/http in the loop. Its allocs/op are the refusal path's own,
// and under callgrind its instruction count per request is repeatable.
func BenchmarkFastRefuseLoop(b *testing.B) {
	b.Run("access_log=none", func(b *testing.B) { benchmarkFastRefuseLoop(b, "") })
	b.Run("access_log=json", func(b *testing.B) { benchmarkFastRefuseLoop(b, "json") })
	b.Run("access_log=combined", func(b *testing.B) { benchmarkFastRefuseLoop(b, "combined") })
}

// benchmarkFastRefuseLoop is BenchmarkFastRefuseLoop with an access log
// to a file in format, or none for "".
func benchmarkFastRefuseLoop(b *testing.B, format string) {
	config := `
origin: http://127.0.0.1:9
max_keys: 1000
fastpath: true
domains:
  - name: bench
    hosts: ["*"]
    rules:
      - {name: per-ip, limit: 1, period: 1h, key: [ip]}
`
	if format != "" {
		config += fmt.Sprintf("access_log: {path: %q, format: %s}\n", filepath.Join(b.TempDir(), "access.log"), format)
	}
	table, err := parseConfig([]byte(config))
	if err != nil {
		b.Fatal(err)
	}
	p, err := proxy.New(proxy.Options{Table: table, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close() // the access log's writer
	srv := publicServer(table, p, log.New(io.Discard, "", 0))
	const req = "GET /api/v1/items HTTP/1.1\r\nHost: bench.example\r\n\r\n"
	// The connection opens with a request the fast path declines, so that
	// the listener's first stage hands it to net/http (Accept), which then
	// reads it; from there the guard's Read answers each request.
	const declined = "PROPFIND / HTTP/1.1\r\nHost: bench.example\r\n\r\n"
	mc := &memConn{req: []byte(req), first: []byte(declined)}
	gl := guard.NewListener(newMemListener(mc), guardOptions(srv, table.Timeouts.Read, p, connectionCap(table, slog.New(slog.DiscardHandler))))
	defer gl.Close()
	c, err := gl.Accept()
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 4096)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != declined {
		b.Fatalf("net/http was handed %q (%v), want the declined request", buf[:n], err)
	}
	gl.ConnState(c, http.StateIdle) // net/http answered it, and waits for a request
	run := func(n int) {
		mc.left, mc.written, mc.refused = n, 0, 0
		if got, err := c.Read(buf); got != 0 || err != io.EOF {
			b.Fatalf("the guard's Read gave %d bytes (%v) to net/http; want every request answered", got, err)
		}
	}
	run(1)  // the first is allowed: forwarded, to an origin that is not there (502)
	run(10) // over the limit from here on
	if mc.refused != 10 {
		b.Fatalf("%d of 10 requests refused", mc.refused)
	}
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	if mc.refused != b.N {
		b.Fatalf("%d of %d requests refused", mc.refused, b.N)
	}
}

// memListener hands out one connection.
// memListener accepts c, then waits for Close.
type memListener struct {
	c    net.Conn
	done chan struct{}
	once sync.Once
}

func newMemListener(c net.Conn) *memListener { return &memListener{c: c, done: make(chan struct{})} }

func (l *memListener) Accept() (net.Conn, error) {
	if c := l.c; c != nil {
		l.c = nil
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}
func (l *memListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *memListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

// memConn reads as left more requests req, one after the other, then
// io.EOF; it counts what is written to it and the 429s among it.
type memConn struct {
	first            []byte // read once, before the requests
	req              []byte
	left, off        int
	written, refused int
}

func (c *memConn) Read(p []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(p, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	n := 0
	for n < len(p) && c.left > 0 {
		k := copy(p[n:], c.req[c.off:])
		n, c.off = n+k, c.off+k
		if c.off == len(c.req) {
			c.off, c.left = 0, c.left-1
		}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (c *memConn) Write(p []byte) (int, error) {
	c.written += len(p)
	if bytes.HasPrefix(p, []byte("HTTP/1.1 429 ")) {
		c.refused++
	}
	return len(p), nil
}

func (c *memConn) Close() error        { return nil }
func (c *memConn) LocalAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }
func (c *memConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(203, 0, 113, 9), Port: 4000}
}
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// diffKey signs the differential tests' tokens; testdata/diff-jwks.json
// is its public key, kid "diff".
var diffKey = ed25519.NewKeyFromSeed([]byte("edge-differential-test-key-seed!"))

// diffToken is a token for sub, valid until 2100, with org.id org when
// org is set ("[1]": an array).
func diffToken(sub, org string) string {
	c := jwt.MapClaims{"sub": sub, "iss": "https://id.example", "exp": 4102444800}
	switch org {
	case "":
	case "[1]":
		c["org"] = map[string]any{"id": []int{1}}
	default:
		c["org"] = map[string]any{"id": org}
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
	tok.Header["kid"] = "diff"
	s, err := tok.SignedString(diffKey)
	if err != nil {
		panic(err)
	}
	return s
}
