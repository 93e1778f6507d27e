package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"hash/crc32"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/proxy"
	"github.com/prometheus/client_golang/prometheus"
)

// The differential test of the fast forward: the same request sequences
// go through an edge with fastpath true and one with fastpath false, each
// to its own raw TCP origin that records every request it receives and
// answers from a script by the request's path. What each origin received
// and what each client heard must mean the same (meaning_test.go), and the
// metrics must be the same.

// rawResponses are the origin's answers, by the last path segment.
var rawResponses = map[string]string{
	"cl":          "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
	"sniff":       "HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n<html>hi</html>",
	"gzip":        "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
	"chunked":     "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
	"trailer":     "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 42\r\n\r\n",
	"unannounced": "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Late: 1\r\n\r\n",
	"hop": "HTTP/1.1 200 OK\r\nConnection: X-Drop, keep-alive\r\nX-Drop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Connection: x\r\n" +
		"Upgrade: foo\r\nTe: x\r\nX-Keep: 2\r\nx-lower: 3\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
	"nocontent":   "HTTP/1.1 204 No Content\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n\r\n",
	"notmodified": "HTTP/1.1 304 Not Modified\r\nContent-Type: text/plain\r\nContent-Length: 7\r\nEtag: \"x\"\r\n\r\n",
	"early":       "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
	"close":       "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
	"http10":      "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
	"pragma":      "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
	"odd":         "HTTP/1.1 299 Whatever\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
	"dupcl":       "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
	"badcl":       "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
	"date":        "HTTP/1.1 200 OK\r\nDate: Mon, 02 Jan 2006 15:04:05 GMT\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
	"malformed":   "HTTP/1.1 abc\r\n\r\n",
	"garbage":     "hello\r\n\r\n",
	"bareLF":      "HTTP/1.1 200 OK\nContent-Type: text/plain\nContent-Length: 2\n\nok",
	"folded":      "HTTP/1.1 200 OK\r\nX-Fold: a\r\n b\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
	"notfound":    "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\nnope",
	"hsts":        "HTTP/1.1 200 OK\r\nStrict-Transport-Security: max-age=1\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
	"server-err":  "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n",
	"big":         "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 100000),
	"bigchunked":  "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + rawChunks(3, 1000),
	"short":       "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\nok", // then the origin closes
	"sniffchunk":  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nf\r\n<html>hi</html>\r\n0\r\n\r\n",
	"emptychunk":  "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"empty-eof":   "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n",                          // then the origin closes
	"hang":        "",                                                                             // the origin closes at once
	"eof-body":    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end",             // then the origin closes
	"eof-sniff":   "HTTP/1.1 200 OK\r\n\r\n<html>until the end</html>",                            // then the origin closes
	"idleclose":   "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\nidle", // then the origin closes
}

func rawChunks(n, size int) string {
	var b strings.Builder
	for range n {
		fmt.Fprintf(&b, "%x\r\n%s\r\n", size, strings.Repeat("y", size))
	}
	return b.String() + "0\r\n\r\n"
}

// rawOrigin is a TCP origin that records what it receives.
type rawOrigin struct {
	ln    net.Listener
	more  []net.Listener // group's
	conns map[net.Conn]*originState
	mu    sync.Mutex
	got   bytes.Buffer // every request head, in the order they came
	wg    sync.WaitGroup
	stop  chan struct{}
	// gates hold the answers to the requests named by their keys until
	// closed; arrived is told each such name when its head has come.
	gates   map[string]chan struct{}
	arrived chan string
	// script, if set, answers the requests it knows (ok) in place of the
	// named responses below, and says whether the connection ends after.
	script func(name, method string) (resp string, end, ok bool)
	// tls, if set, is spoken on every connection (an https origin).
	tls *tls.Config
}

func startRawOrigin(t *testing.T) *rawOrigin {
	return startGatedOrigin(t, nil, nil)
}

// startGatedOrigin starts a rawOrigin with gates and arrived set.
func startGatedOrigin(t *testing.T, gates map[string]chan struct{}, arrived chan string) *rawOrigin {
	t.Helper()
	return newRawOrigin(t, gates, arrived, nil)
}

// newRawOrigin starts a rawOrigin with gates, arrived and script set.
func newRawOrigin(t testing.TB, gates map[string]chan struct{}, arrived chan string,
	script func(name, method string) (string, bool, bool)) *rawOrigin {
	t.Helper()
	return startRawOriginOf(t, &rawOrigin{gates: gates, arrived: arrived, script: script})
}

// startRawOriginOf starts o, a rawOrigin with its settings set.
func startRawOriginOf(t testing.TB, o *rawOrigin) *rawOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.ln, o.stop, o.conns = ln, make(chan struct{}), make(map[net.Conn]*originState)
	o.acceptOn(ln)
	t.Cleanup(func() {
		ln.Close()
		o.mu.Lock()
		for _, l := range o.more {
			l.Close()
		}
		o.mu.Unlock()
		close(o.stop)
		o.wg.Wait()
	})
	return o
}

// acceptOn serves the connections of ln as o's.
func (o *rawOrigin) acceptOn(ln net.Listener) {
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if o.tls != nil {
				c = tls.Server(c, o.tls)
			}
			st := &originState{}
			o.mu.Lock()
			o.conns[c] = st
			o.mu.Unlock()
			o.wg.Add(1)
			go func() {
				defer o.wg.Done()
				o.serve(c, st)
				o.mu.Lock()
				delete(o.conns, c)
				o.mu.Unlock()
			}()
		}
	}()
}

// group returns the config line of an upstream group of three servers
// that are all o: its listener and two more it serves alike, recording
// what they receive in one log (requests come one at a time, so in the
// same order on both sides of a differential test). They are listed
// sorted, so that metricsText's server-0..2 are the group's order.
func (o *rawOrigin) group(t testing.TB) string {
	t.Helper()
	addrs := []string{o.ln.Addr().String()}
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		o.mu.Lock()
		o.more = append(o.more, ln)
		o.mu.Unlock()
		o.acceptOn(ln)
		addrs = append(addrs, ln.Addr().String())
	}
	slices.Sort(addrs)
	scheme := "http://"
	if o.tls != nil {
		scheme = "https://"
	}
	var urls []string
	for _, a := range addrs {
		urls = append(urls, fmt.Sprintf("{url: %q}", scheme+a))
	}
	return "origins: [" + strings.Join(urls, ", ") + "]"
}

// config is cfg (fwdConfig's form) for o: its top level's origin is
// o.group, a route's ORIGIN the group's first server (server-0), and
// TRUST is trust.
func (o *rawOrigin) config(t testing.TB, cfg, trust string) string {
	group := o.group(t)
	first, _, _ := strings.Cut(strings.TrimPrefix(group, `origins: [{url: "`), `"`)
	return strings.NewReplacer("origin: ORIGIN", group, "ORIGIN", first, "TRUST", trust).Replace(cfg)
}

// originState is where a rawOrigin's connection is: waiting for a
// request with nothing read of it.
type originState struct {
	waiting bool // for a request's first byte, with none buffered
}

// settled reports whether the origin has taken in everything sent to it:
// no connection waits to be accepted, and each accepted one waits for a
// request, with nothing buffered or unread (what an edge sent before its client got an answer
// is then recorded, even if no response followed it).
func (o *rawOrigin) settled() bool {
	if pendingAccept(o.ln) {
		return false // a connection the accept loop has yet to take up
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for c, st := range o.conns {
		if !st.waiting || readable(c) {
			return false
		}
	}
	return true
}

func (o *rawOrigin) serve(c net.Conn, st *originState) {
	defer c.Close()
	go func() {
		<-o.stop
		c.Close()
	}()
	br := bufio.NewReader(c)
	for {
		var head bytes.Buffer
		for {
			if head.Len() == 0 {
				o.mu.Lock()
				st.waiting = br.Buffered() == 0
				o.mu.Unlock()
			}
			line, err := br.ReadString('\n')
			o.mu.Lock()
			st.waiting = false
			o.mu.Unlock()
			head.WriteString(line)
			if err != nil {
				if head.Len() > 0 {
					o.mu.Lock()
					fmt.Fprintf(&o.got, "head cut: %q (%v)\n", head.String(), err)
					o.mu.Unlock()
				}
				return
			}
			if line == "\r\n" {
				break
			}
		}
		body, ok := readRawBody(br, head.String())
		o.mu.Lock()
		o.got.WriteString(canonicalRequest(head.String()))
		o.got.WriteString(body)
		o.mu.Unlock()
		if !ok {
			return
		}
		reqLine, _, _ := strings.Cut(head.String(), "\r\n")
		parts := strings.Fields(reqLine)
		if len(parts) < 2 {
			return // not a request: recorded as it came
		}
		path, _, _ := strings.Cut(parts[1], "?")
		name := path[strings.LastIndexByte(path, '/')+1:]
		resp, ok := rawResponses[name]
		if r, acct := accountingResponses[name]; acct {
			resp, ok = r, true
		}
		if !ok {
			resp = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nyes"
		}
		scripted, end := false, false
		if o.script != nil {
			if r, e, ok := o.script(name, parts[0]); ok {
				resp, end, scripted = r, e, true
			}
		}
		if gate, ok := o.gates[name]; ok {
			o.arrived <- name
			select {
			case <-gate:
			case <-o.stop:
				return
			}
		}
		if parts[0] == http.MethodHead && !scripted { // the final head only
			last := strings.LastIndex(resp, "HTTP/1.")
			if i := strings.Index(resp[max(last, 0):], "\r\n\r\n"); last >= 0 && i >= 0 {
				resp = resp[:last+i+4]
			} else if i := strings.Index(resp[max(last, 0):], "\n\n"); last >= 0 && i >= 0 {
				resp = resp[:last+i+2]
			}
		}
		if _, err := io.WriteString(c, resp); err != nil {
			return
		}
		if end {
			return
		}
		switch name {
		case "short", "hang", "eof-body", "eof-sniff", "close", "http10", "malformed", "garbage", "cost-broken", "idleclose", "empty-eof":
			return
		}
	}
}

// readRawBody reads the body of the request with head from br and
// describes it: a Content-Length body as it came, a chunked one decoded
// (its chunks follow the client's reads on both paths) with its trailer
// fields sorted. It reports false if the body broke off.
func readRawBody(br *bufio.Reader, head string) (string, bool) {
	cl, chunked := int64(0), false
	for line := range strings.SplitSeq(head, "\r\n") {
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "content-length":
			cl, _ = strconv.ParseInt(value, 10, 64)
		case "transfer-encoding":
			chunked = strings.EqualFold(value, "chunked")
		}
	}
	describe := func(b []byte) string {
		if len(b) > 256 {
			return fmt.Sprintf("%d bytes, crc %08x", len(b), crc32.ChecksumIEEE(b))
		}
		return fmt.Sprintf("%q", b)
	}
	if !chunked {
		if cl == 0 {
			return "", true
		}
		b := make([]byte, cl)
		n, err := io.ReadFull(br, b)
		if err != nil {
			return fmt.Sprintf("body cut after %d bytes: %s\n", n, describe(b[:n])), false
		}
		return "body: " + describe(b) + "\n", true
	}
	var body []byte
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return fmt.Sprintf("chunked body cut: %s\n", describe(body)), false
		}
		hex, _, _ := strings.Cut(strings.TrimSpace(line), ";")
		size, err := strconv.ParseInt(hex, 16, 64)
		if err != nil {
			return fmt.Sprintf("chunked body broken at %q: %s\n", line, describe(body)), false
		}
		if size == 0 {
			break
		}
		chunk := make([]byte, size+2)
		if _, err := io.ReadFull(br, chunk); err != nil {
			return fmt.Sprintf("chunked body cut: %s\n", describe(body)), false
		}
		body = append(body, chunk[:size]...)
	}
	var trailer []string // sorted: their order means nothing
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return fmt.Sprintf("chunked body cut in its trailer: %s\n", describe(body)), false
		}
		if line == "\r\n" {
			break
		}
		trailer = append(trailer, line)
	}
	slices.Sort(trailer)
	return fmt.Sprintf("chunked body: %s, trailer %q\n", describe(body), strings.Join(trailer, "")), true
}

func (o *rawOrigin) received(t *testing.T) string {
	wait.For(t, 5*time.Second, "the origin to take in what it was sent", o.settled)
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.got.String()
}

// take is received, and forgets it: the next take has only what came after.
func (o *rawOrigin) take(t *testing.T) string {
	got := o.received(t)
	o.mu.Lock()
	o.got.Reset()
	o.mu.Unlock()
	return got
}

// fwdConfig: a domain with no rules, one whose rule allows everything,
// and one with routes (to ORIGIN's first server alone) that allows
// everything.
const fwdConfig = `
origin: ORIGIN
max_keys: 1000
TRUST
domains:
  - name: plain
    hosts: [plain.example.com]
  - name: limited
    hosts: [limited.example.com]
    rules:
      - {name: per-ip, limit: 1000000, period: 1m, key: [ip]}
  - name: routed
    hosts: [routed.example.com]
    rules:
      - {name: all, limit: 1000000, period: 1m, key: [ip]}
    routes:
      - {name: chunked, match: {path_prefix: /r/chunked}, origins: [{url: ORIGIN}]}
      - {name: heads, match: {methods: [HEAD]}, origins: [{url: ORIGIN}]}
`

func TestFastForwardDifferential(t *testing.T) {
	for _, trust := range []bool{true, false} {
		for _, sq := range forwardSeqs() {
			t.Run(fmt.Sprintf("trusted=%v/%s", trust, sq.name), func(t *testing.T) {
				t.Parallel()
				runForwardSeq(t, sq, trust, nil)
			})
		}
	}
}

// forwardSeq is one request sequence of the fast forward's differential
// tests: sent one at a time (wait) or all at once.
type forwardSeq struct {
	name  string
	steps []string
	wait  bool
}

// forwardSeqs are the request sequences of the fast forward's
// differential tests, over plain HTTP and over TLS: every response of
// rawResponses (FFWD_ONLY, if set, names the ones to use) to GET and
// HEAD, with the fields a proxy rewrites, pipelined, odd targets, and the
// hostile corpus.
func forwardSeqs() []forwardSeq {
	var names []string
	for name := range rawResponses {
		names = append(names, name)
	}
	slices.Sort(names)
	if only := os.Getenv("FFWD_ONLY"); only != "" {
		names = strings.Split(only, ",")
	}
	reqs := func(host string, names []string, fields ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, get(host, "/r/"+n, fields...))
			out = append(out, hostile.Req(append([]string{"HEAD /r/" + n + " HTTP/1.1", "Host: " + host}, fields...)...))
		}
		return out
	}
	fields := []string{
		"User-Agent: one", "user-agent: two", "Te: trailers, gzip", "Connection: keep-alive", "Keep-Alive: 5",
		"Proxy-Authorization: x", "Forwarded: for=1.2.3.4", "X-Real-IP: 1.2.3.4",
		"X-Forwarded-For: 198.51.100.1, 203.0.113.7", "X-Forwarded-For: 10.0.0.1", "X-Forwarded-Host: a.example",
		"X-Forwarded-Proto: https", "x-custom: a", "X-CUSTOM: b", "Accept: */*", "X-Empty:", "Content-Length: 0",
		"Trailer: X-T", "Accept-Encoding: gzip", "Via: 1.0 fred, 1.1 p.example.net (x, y)", "via: 1.1 edge-elsewhere-x",
		"X-JA4: forged", "x-ja4: forged too", // the TLS variant's fingerprint_header
	}
	var seqs []forwardSeq
	for _, host := range []string{"plain.example.com", "limited.example.com", "Limited.Example.com:80"} {
		seqs = append(seqs,
			forwardSeq{"responses " + host, reqs(host, names), true},
			forwardSeq{"fields " + host, reqs(host, []string{"cl", "chunked", "hop"}, fields...), true},
			forwardSeq{"pipelined " + host, []string{strings.Join(reqs(host, []string{"cl", "chunked", "trailer", "big"}), "")}, false},
		)
	}
	seqs = append(seqs,
		forwardSeq{"targets", []string{
			get("plain.example.com", "/r/cl?a=1&b=%20"), get("plain.example.com", "/x%2Fy/cl"), get("plain.example.com", "/r/cl?"),
			get("plain.example.com", "/a!$&'()*+,;=:@[]/cl"), get("plain.example.com", "/a;b/cl?x;y"), get("plain.example.com", "/%7e/cl?%zz"),
			get("plain.example.com", "/a\"b/cl"), get("plain.example.com", "/a{b}/cl"), get("plain.example.com", "//double/cl"),
		}, true},
		forwardSeq{"ipv6 host", []string{get("[::1]:80", "/r/cl")}, true},
		// Routes: the route each path and method takes, on both paths
		// alike (the metrics' route label), hostile spellings included.
		forwardSeq{"routes", append(reqs("routed.example.com", []string{"cl", "chunked", "trailer"}),
			get("routed.example.com", "//r/chunked"), get("routed.example.com", "/r/%63hunked"),
			get("routed.example.com", "/r;x=1/chunked"), get("routed.example.com", "/r/x/../chunked"),
			get("routed.example.com", "/r/%2e%2e/r/chunked"), get("routed.example.com", "/R/chunked"),
			"POST /r/chunked HTTP/1.1\r\nHost: routed.example.com\r\nContent-Length: 2\r\n\r\nab"), true},
	)
	// The responses that end their connection, each on its own (in the
	// sequences above only the first of them is reached), after two that
	// put the client's connection on the fast path and leave an origin
	// connection in each path's pool, so that both retry alike.
	for _, n := range []string{"short", "hang", "eof-body", "eof-sniff", "empty-eof", "close", "http10", "malformed", "garbage", "idleclose"} {
		seqs = append(seqs, forwardSeq{"ends its connection " + n, []string{get("plain.example.com", "/r/cl"),
			get("plain.example.com", "/r/cl"), get("plain.example.com", "/r/"+n), get("plain.example.com", "/r/cl")}, true})
	}
	prime := []string{get("plain.example.com", "/r/cl"), get("limited.example.com", "/r/cl")}
	for _, hc := range hostile.Corpus() {
		seqs = append(seqs, forwardSeq{"hostile " + hc.Class + "/" + hc.Name,
			append(append([]string(nil), prime...), strings.ReplaceAll(hc.Raw, hostile.HostAPI, "Host: plain.example.com")), false})
	}
	return seqs
}

// runForwardSeq sends sq's requests through an edge with fastpath true and
// one with fastpath false, each in front of its own raw origin, trusting
// the client as a proxy when trust is set, serving TLS with fix's
// certificate (over which the requests go) or, for a nil fix, plain HTTP
// only; what the clients heard, what the origins received and the
// metrics must mean the same.
func runForwardSeq(t *testing.T, sq forwardSeq, trust bool, fix *diffTLS) {
	runForwardSeqTo(t, sq, trust, fix, nil)
}

// runForwardSeqTo is runForwardSeq to https origins with of's
// certificate, trusted by the origin_tls of's section, for an of not nil.
func runForwardSeqTo(t *testing.T, sq forwardSeq, trust bool, fix *diffTLS, of *originTLSFix) {
	trustLine := ""
	if trust {
		trustLine = `client_ip: {trusted_proxies: ["127.0.0.0/8"]}`
	}
	var got [2][]heard
	var want, metrics, lines [2]string
	var answered int64
	for i, fast := range []bool{true, false} {
		cfg := fwdConfig
		if fix != nil {
			cfg = fix.fwdConfig(t)
		}
		var origin *rawOrigin
		if of != nil {
			origin = startRawOriginOf(t, &rawOrigin{tls: of.server})
			cfg = of.section + cfg
		} else {
			origin = startRawOrigin(t)
		}
		// Three servers, all the one raw origin: the group's choice,
		// retries and pools run on both paths (origin.Upstream).
		cfg = origin.config(t, cfg, trustLine)
		ds := startConfigOver(t, cfg, fast, fix)
		got[i] = []heard{hear(sq.steps, exchange(t, ds, sq.steps, sq.wait, false))}
		want[i] = origin.received(t)
		if fast {
			answered = ds.answered.Load()
		} else if ds.answered.Load() != 0 {
			t.Errorf("fastpath false: %d requests answered by the fast path", ds.answered.Load())
		}
		metrics[i] = metricsText(t, ds.reg)
		lines[i] = ds.accessLines(t)
	}
	sidesAgree(t, got, want, metrics)
	if lines[0] != lines[1] {
		t.Errorf("access log lines differ:\nfast path\n%s\nslow path\n%s", lines[0], lines[1])
	}
	if sq.name == "routes" {
		for _, route := range []string{"chunked", "heads"} {
			if zero := fmt.Sprintf(`edge_origin_requests_total{code_class="2xx",domain="routed",route=%q,server="server-0"} 0`, route); strings.Contains(metrics[0], zero) {
				t.Errorf("route %s took no request:\n%s", route, zero)
			}
		}
	}
	if strings.HasPrefix(sq.name, "responses") && answered == 0 {
		t.Errorf("the fast path forwarded nothing")
	}
	if fix != nil && strings.Contains(want[0], "X-Forwarded-For:") && !strings.Contains(want[0], "X-Ja4: t13d") {
		t.Errorf("over TLS the origin received no JA4:\n%s", want[0])
	}
}

// startConfig starts an edge with configuration cfg and fastpath as fast,
// as startDiff does.
func startConfig(t testing.TB, cfg string, fast bool) *diffServer {
	t.Helper()
	return startConfigOver(t, cfg, fast, nil)
}

// startConfigOver is startConfig for a cfg that serves TLS, with the
// certificates of its tls section, when fix is not nil: the HTTPS socket
// is joined to the plain one as edge's listen does, and ds's client
// connects to it trusting fix's CA.
func startConfigOver(t testing.TB, cfg string, fast bool, fix *diffTLS) *diffServer {
	t.Helper()
	cfg += fmt.Sprintf("fastpath: %v\n", fast)
	_, bench := t.(*testing.B)
	if !bench && !strings.Contains(cfg, "access_log:") {
		// Every line, in the format with the most in it, compared between
		// the paths (accessLines).
		cfg += "access_log: {path: \"-\", format: json, keys: true}\n"
	}
	table, err := parseConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ds := &diffServer{reg: prometheus.NewRegistry(), logs: new(lockedBuffer), access: new(lockedBuffer)}
	// Every log line, debug included, but its time.
	logger := slog.New(slog.NewTextHandler(ds.logs, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	if bench {
		logger = slog.New(slog.DiscardHandler) // as edge runs: no debug lines
	}
	p, err := proxy.New(proxy.Options{Table: table, Registerer: ds.reg, Now: func() time.Time { return now },
		Logger: logger, AccessLogStdout: ds.access})
	if err != nil {
		t.Fatal(err)
	}
	ds.via, ds.proxy = p.Via(), p
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ds.addr = ln.Addr().String()
	// net/http's own log: a handler's panic, which net/http recovers and
	// answers with a closed connection on both paths alike, fails the test.
	serverLog := new(lockedBuffer)
	srv := publicServer(table, p, log.New(serverLog, "", 0))
	var public net.Listener = ln
	if fix != nil {
		public = fix.join(t, table, p, ln, srv, ds)
	}
	opts := guardOptions(srv, table.Timeouts.Read, p, connectionCap(table, slog.New(slog.DiscardHandler)))
	answer := opts.Answer
	opts.Answer = func(r *guard.Request, out []byte) ([]byte, bool) {
		out, ok := answer(r, out)
		if ok {
			ds.answered.Add(1)
		}
		return out, ok
	}
	gl := guard.NewListener(public, opts)
	ds.idle = make(chan struct{}, 64)
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		gl.ConnState(c, st)
		if st == http.StateIdle {
			select {
			case ds.idle <- struct{}{}:
			default:
			}
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(gl)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
		p.Close()
		if l := serverLog.String(); strings.Contains(l, "panic") {
			t.Errorf("net/http recovered a panic of edge's:\n%s", l)
		}
	})
	return ds
}

// originTLSFix is the certificate of https origins in a differential
// test, for 127.0.0.1, and the origin_tls section that trusts its CA.
type originTLSFix struct {
	server  *tls.Config
	section string
}

func newOriginTLSFix(t testing.TB) *originTLSFix {
	t.Helper()
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	ca.issue(t, dir, "origin", 24*time.Hour, "127.0.0.1")
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "origin.pem"), filepath.Join(dir, "origin.key"))
	must(t, err)
	return &originTLSFix{
		server:  &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"http/1.1"}},
		section: fmt.Sprintf("origin_tls: {ca_file: %q}\n", ca.File),
	}
}

// TestFastForwardDifferentialOriginTLS is TestFastForwardDifferential to
// https origins: the fast forward's pooled TLS connections (their idle
// readers, http/1.1 by ALPN) against the transport's, every sequence,
// those whose origin ends its connection included.
func TestFastForwardDifferentialOriginTLS(t *testing.T) {
	of := newOriginTLSFix(t)
	for _, sq := range forwardSeqs() {
		t.Run(sq.name, func(t *testing.T) {
			t.Parallel()
			runForwardSeqTo(t, sq, true, nil, of)
		})
	}
}
