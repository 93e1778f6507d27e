package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
)

// h2Config is the config of the HTTP/2 tests: h2c and TLS (certificates
// api and wild of startTLSEdge), with origin, and extra at the top level.
func h2Config(origin, extra string) string {
	return fmt.Sprintf(`
listen: %q
admin_listen: %q
origin: %q
h2c: true
tls:
  listen: "127.0.0.1:0"
  certificates:
    - {cert_file: api.pem, key_file: api.key}
    - {cert_file: wild.pem, key_file: wild.key}
%s
domains:
  - name: api
    hosts: [api.example.com, 127.0.0.1]
    hsts_max_age: 1h
    max_request_body: 10
    rules:
      - {name: limited, match: {path_prefix: /limited}, limit: 2, period: 1h}
  - name: static
    hosts: [static.example.net]
    respond: {status: 203, body: "static\n"}
  - name: secure
    hosts: [secure.example.net]
    https_redirect: true
`, publicAnyPort, adminAnyPort, origin, extra)
}

// protoClient returns a client of e that speaks only proto ("h1" or "h2")
// and dials e's TLS listener for https URLs, its plain one for http (h2
// there is prior knowledge), whatever the URL's host; it follows no
// redirect.
func (e *tlsEdge) protoClient(proto string) *http.Client {
	var p http.Protocols
	if proto == "h1" {
		p.SetHTTP1(true)
	} else {
		p.SetHTTP2(true)
		p.SetUnencryptedHTTP2(true)
	}
	tr := &http.Transport{
		Protocols:       &p,
		TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			to := e.public
			if strings.HasSuffix(addr, ":443") {
				to = e.tls
			}
			return (&net.Dialer{}).DialContext(ctx, network, to)
		},
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// recordingOrigin answers "origin <path>" and records what each request
// brought it, Via's version aside (edge says 1.1 or 2, as received).
func recordingOrigin(t *testing.T) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var seen []string
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var fields []string
		for k, vs := range r.Header {
			v := strings.Join(vs, ", ")
			if k == "Via" {
				v = strings.Replace(strings.Replace(v, "2 edge-", "1.1 edge-", 1), "3 edge-", "1.1 edge-", 1)
			}
			fields = append(fields, k+": "+v)
		}
		slices.Sort(fields)
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %s %s host=%s len=%d\n%s\n%s", r.Method, r.RequestURI, r.Proto, r.Host, r.ContentLength, strings.Join(fields, "\n"), body))
		mu.Unlock()
		fmt.Fprintf(w, "origin %s\n", r.URL.Path)
	}))
	t.Cleanup(o.Close)
	return o, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// hopByHop are the fields of a connection, not of a message: an HTTP/2
// response has none of them.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Te", "Trailer"}

// answerText is a response as the comparison sees it: status, fields but
// Date and the hop-by-hop ones, body.
func answerText(resp *http.Response) string {
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var fields []string
	for k, vs := range resp.Header {
		if k == "Date" || slices.Contains(hopByHop, k) {
			continue
		}
		fields = append(fields, k+": "+strings.Join(vs, ", "))
	}
	slices.Sort(fields)
	return fmt.Sprintf("%d\n%s\n%s", resp.StatusCode, strings.Join(fields, "\n"), body)
}

// serverLabel is an origin server's label in a metric line.
var serverLabel = regexp.MustCompile(`server="[^"]*"`)

// comparedMetrics are e's edge_* series but those of connections, TLS
// handshakes, certificates and time.
func comparedMetrics(t *testing.T, e *tlsEdge) string {
	_, body := httpGet(t, "http://"+e.admin+"/metrics")
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, "edge_") {
			continue
		}
		skip := false
		for _, p := range []string{"edge_connections_open", "edge_tls_", "edge_http3_", "edge_config_last_reload_success_timestamp_seconds",
			"edge_upstream_request_duration_seconds_bucket", "edge_upstream_request_duration_seconds_sum",
			"edge_origin_response_seconds_bucket", "edge_origin_response_seconds_sum"} {
			skip = skip || strings.HasPrefix(l, p)
		}
		if !skip {
			// Each run has an origin of its own: its one server by role.
			out = append(out, serverLabel.ReplaceAllString(l, `server="origin"`))
		}
	}
	return strings.Join(out, "\n")
}

// topTalkers is what /v1/top says of rule limited: each key's counts.
func topTalkers(t *testing.T, e *tlsEdge) string {
	_, body := httpGet(t, "http://"+e.admin+"/v1/top/api/limited")
	var keys []struct {
		Key            string
		Count, Blocked uint64
		Current        int64
	}
	if err := json.Unmarshal([]byte(body), &keys); err != nil {
		t.Fatalf("/v1/top: %v: %s", err, body)
	}
	return fmt.Sprint(keys)
}

// statusTotals is what the status page's data (/v1/status) says of each
// domain and rule since the start, time aside.
func statusTotals(t *testing.T, e *tlsEdge) string {
	_, body := httpGet(t, "http://"+e.admin+"/v1/status")
	var v struct {
		Domains []struct {
			Name   string
			Totals map[string]any
			Rules  []struct {
				Name   string
				Totals map[string]any
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("/v1/status: %v: %s", err, body)
	}
	for _, d := range v.Domains {
		delete(d.Totals, "upstream_latency_seconds_sum")
	}
	return fmt.Sprint(v.Domains)
}

// logMessages are the messages e logged after it started.
func logMessages(e *tlsEdge) string {
	_, after, _ := strings.Cut(e.log.String(), "edge started")
	var msgs []string
	for _, l := range strings.Split(after, "\n")[1:] {
		if _, m, ok := strings.Cut(l, "msg="); ok {
			msgs = append(msgs, m)
		}
	}
	return strings.Join(msgs, "\n")
}

// h2Step is one request of TestHTTP2SameAsHTTP1.
type h2Step struct {
	method, url, host string // host "" is the URL's
	fields            []string
	body              string
}

// TestHTTP2SameAsHTTP1: the same request sequences sent over HTTP/1.1 to
// one edge, over HTTP/2 to another (in the clear with prior knowledge,
// and over TLS with ALPN) and over HTTP/3 to a third (its https requests;
// the plain ones over HTTP/1.1) get the same statuses, fields (but Date
// and hop-by-hop ones) and bodies; their origins receive the same requests
// (Via's version aside), and the edges end with the same metrics and top
// talkers: the screen, host routing, client identity, rules, refusals,
// static responses, TLS's answers (421, HSTS, Alt-Svc, X-Forwarded-Proto,
// https_redirect) are the same for every stream. Each edge serves HTTP/3.
func TestHTTP2SameAsHTTP1(t *testing.T) {
	steps := []h2Step{}
	for _, scheme := range []string{"http", "https"} {
		api := scheme + "://api.example.com"
		steps = append(steps,
			h2Step{method: "GET", url: api + "/a?q=1", fields: []string{"Accept: text/plain", "X-Custom: one", "X-Custom: two"}},
			h2Step{method: "GET", url: api + "/limited"},
			h2Step{method: "GET", url: api + "/limited/x"},
			h2Step{method: "GET", url: api + "/limited"},
			h2Step{method: "GET", url: api + "/limited", fields: []string{"Accept: application/json"}},
			h2Step{method: "POST", url: api + "/echo", fields: []string{"Content-Type: text/plain"}, body: "hello"},
			h2Step{method: "POST", url: api + "/echo", body: "far too long a body"},
			h2Step{method: "HEAD", url: api + "/a"},
			h2Step{method: "DELETE", url: api + "/item/1"},
			h2Step{method: "GET", url: api + "/x/../a"},
			h2Step{method: "GET", url: api + "/a%2fb"},
			h2Step{method: "GET", url: api + "/a", fields: []string{"X_Forwarded_For: 1.2.3.4"}},
			h2Step{method: "GET", url: api + "/a", fields: []string{"X-Forwarded-For: 6.6.6.6", "Forwarded: for=6.6.6.6"}},
			h2Step{method: "GET", url: api + "/a", fields: []string{"Via: 1.1 other"}},
			h2Step{method: "GET", url: scheme + "://static.example.net/"},
			h2Step{method: "GET", url: api + "/", host: "nobody.example.org"},
			h2Step{method: "GET", url: api + "/a", host: "static.example.net"}, // over TLS the certificate is api's: 421
			h2Step{method: "GET", url: scheme + "://secure.example.net/s?x=1"}, // plain: 308 to https
			h2Step{method: "GET", url: scheme + "://secure.example.net/.well-known/acme-challenge/t"},
		)
	}
	type run struct {
		answers, origin []string
		metrics, top    string
		status, logs    string
	}
	runs := map[string]*run{}
	edges := map[string]*tlsEdge{}
	clients := map[string]*http.Client{}
	seen := map[string]func() []string{}
	protos := []string{"h1", "h2", "h3"}
	for _, proto := range protos {
		origin, recorded := recordingOrigin(t)
		e := startTLSEdge(t, h3Config(origin.URL, ""))
		client := e.protoClient(proto)
		if proto == "h3" {
			h3 := e.h3Client(t, nil, nil)
			client = &http.Client{Transport: h3OrPlain{h3: h3.tr, plain: e.protoClient("h1").Transport},
				CheckRedirect: client.CheckRedirect, Timeout: client.Timeout}
		}
		runs[proto], edges[proto], clients[proto], seen[proto] = &run{}, e, client, recorded
	}
	// Each step goes to every edge in turn, so that the answers that
	// depend on the time (Retry-After) are made within a second of each
	// other (sameAnswers allows for a second boundary between them).
	for _, s := range steps {
		for _, proto := range protos {
			var body io.Reader
			if s.body != "" {
				body = strings.NewReader(s.body)
			}
			req, err := http.NewRequest(s.method, s.url, body)
			must(t, err)
			req.Header.Set("User-Agent", "edge-test")
			for _, f := range s.fields {
				k, v, _ := strings.Cut(f, ": ")
				req.Header.Add(k, v)
			}
			if s.host != "" {
				req.Host = s.host
			}
			resp, err := clients[proto].Do(req)
			if err != nil {
				t.Fatalf("%s %s %s: %v", proto, s.method, s.url, err)
			}
			want := map[string]int{"h1": 1, "h2": 2, "h3": 3}[proto]
			if proto == "h3" && req.URL.Scheme == "http" {
				want = 1
			}
			if resp.ProtoMajor != want {
				t.Fatalf("%s %s: answered over %s", proto, s.url, resp.Proto)
			}
			// The HTTPS port (in a redirect, in Alt-Svc) is each edge's own.
			_, port, _ := net.SplitHostPort(edges[proto].tls)
			text := strings.ReplaceAll(answerText(resp), ":"+port+"/", ":<tls port>/")
			runs[proto].answers = append(runs[proto].answers, s.method+" "+s.url+"\n"+strings.ReplaceAll(text, `":`+port+`"`, `":<tls port>"`))
		}
	}
	for _, proto := range protos {
		clients[proto].CloseIdleConnections()
		runs[proto].origin = seen[proto]()
	}
	// The status page's totals are sampled each second: the reference
	// run's are read once a sample has followed its sequence (two reads a
	// sample apart agree), after every sequence ran (the rules' Retry-After
	// depends on when each ran). Counted as the answer is written: the
	// others settle against HTTP/1.1's. (A poll like wait.For's, which
	// gives up without failing: the comparison below says what differs.)
	for prev, deadline := statusTotals(t, edges["h1"]), time.Now().Add(10*time.Second); time.Now().Before(deadline); {
		time.Sleep(1100 * time.Millisecond)
		cur := statusTotals(t, edges["h1"])
		if cur == prev {
			break
		}
		prev = cur
	}
	for _, proto := range protos {
		r, e := runs[proto], edges[proto]
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			r.top, r.metrics, r.status, r.logs = topTalkers(t, e), comparedMetrics(t, e), statusTotals(t, e), logMessages(e)
			if proto == "h1" || r.metrics == runs["h1"].metrics && r.status == runs["h1"].status || time.Now().After(deadline) {
				break
			}
		}
	}
	h1 := runs["h1"]
	for _, proto := range []string{"h2", "h3"} {
		other, name := runs[proto], map[string]string{"h2": "HTTP/2", "h3": "HTTP/3"}[proto]
		for i := range steps {
			if !sameAnswers(h1.answers[i], other.answers[i]) {
				t.Errorf("step %d answered\nover HTTP/1.1:\n%s\nover %s:\n%s", i, h1.answers[i], name, other.answers[i])
			}
		}
		if len(h1.origin) != len(other.origin) {
			t.Errorf("the origin got %d requests over HTTP/1.1, %d over %s", len(h1.origin), len(other.origin), name)
		}
		for i := range min(len(h1.origin), len(other.origin)) {
			if h1.origin[i] != other.origin[i] {
				t.Errorf("the origin's request %d\nfrom HTTP/1.1:\n%s\nfrom %s:\n%s", i, h1.origin[i], name, other.origin[i])
			}
		}
		if h1.top != other.top {
			t.Errorf("top talkers: HTTP/1.1 %s, %s %s", h1.top, name, other.top)
		}
		if h1.status != other.status {
			t.Errorf("status page's totals: HTTP/1.1 %s, %s %s", h1.status, name, other.status)
		}
		if h1.logs != other.logs {
			t.Errorf("logged after the start:\nHTTP/1.1:\n%s\n%s:\n%s", h1.logs, name, other.logs)
		}
		if h1.metrics != other.metrics {
			t.Errorf("metrics differ:\nHTTP/1.1:\n%s\n%s:\n%s", h1.metrics, name, other.metrics)
		}
	}
	// The sequence is worth comparing: it was refused, limited,
	// misdirected and redirected, and the origin saw TLS.
	all := strings.Join(h1.answers, "\n")
	for _, want := range []string{"\n429\n", "\n400\n", "\n413\n", "\n421\n", "\n308\n", "\n203\n", "Strict-Transport-Security: max-age=3600", `Alt-Svc: h3=":<tls port>"; ma=86400`} {
		if !strings.Contains(all, want) {
			t.Errorf("no answer has %q", want)
		}
	}
	if o := strings.Join(h1.origin, "\n"); !strings.Contains(o, "X-Forwarded-Proto: https") || !strings.Contains(o, "X-Forwarded-Proto: http\n") {
		t.Errorf("the origin was not told both schemes:\n%s", o)
	}
}

// waitFields are the numbers of an answer that count seconds until a
// limit resets: the same in two answers made within one second, or one
// apart when a second boundary passed between them.
var waitFields = regexp.MustCompile(`(Retry-After: |X-Ratelimit-Reset: |;t=|retry in |"retry_after":)(\d+)`)

// sameAnswers reports whether answer texts a and b are the same, but for
// their waitFields, which may differ by a second.
func sameAnswers(a, b string) bool {
	if a == b {
		return true
	}
	na, nb := waitFields.FindAllStringSubmatch(a, -1), waitFields.FindAllStringSubmatch(b, -1)
	if len(na) != len(nb) || waitFields.ReplaceAllString(a, "$1<s>") != waitFields.ReplaceAllString(b, "$1<s>") {
		return false
	}
	for i := range na {
		x, _ := strconv.Atoi(na[i][2])
		y, _ := strconv.Atoi(nb[i][2])
		if x-y > 1 || y-x > 1 {
			return false
		}
	}
	return true
}

// TestHTTP2ALPN: the TLS listener offers h2 and http/1.1 by ALPN, h2
// first; with tls.http2: false it offers http/1.1 alone, and a client that
// wants h2 only fails its handshake.
func TestHTTP2ALPN(t *testing.T) {
	o := echoOrigin(t)
	tests := []struct {
		name, extra string
		offer       []string
		want        string // "fail" for a failed handshake
	}{
		{"both offered", "", []string{"h2", "http/1.1"}, "h2"},
		{"http/1.1 first", "", []string{"http/1.1", "h2"}, "h2"},
		{"http/1.1 alone", "", []string{"http/1.1"}, "http/1.1"},
		{"none", "", nil, ""},
		{"http2 off, both offered", "tls_http2_off", []string{"h2", "http/1.1"}, "http/1.1"},
		{"http2 off, h2 alone", "tls_http2_off", []string{"h2"}, "fail"},
	}
	edges := map[string]*tlsEdge{}
	for _, tt := range tests {
		e := edges[tt.extra]
		if e == nil {
			cfg := h2Config(o.URL, "")
			if tt.extra != "" {
				cfg = strings.Replace(cfg, "tls:\n", "tls:\n  http2: false\n", 1)
				cfg = strings.Replace(cfg, "h2c: true\n", "", 1)
			}
			e = startTLSEdge(t, cfg)
			edges[tt.extra] = e
		}
		_, st, err := e.handshake(&tls.Config{ServerName: "api.example.com", NextProtos: tt.offer})
		switch {
		case tt.want == "fail":
			if err == nil {
				t.Errorf("%s: negotiated %q, want a failed handshake", tt.name, st.NegotiatedProtocol)
			}
		case err != nil || st.NegotiatedProtocol != tt.want:
			t.Errorf("%s: negotiated %q (%v), want %q", tt.name, st.NegotiatedProtocol, err, tt.want)
		}
	}
	// curl too: --http2 over https speaks what edge offers.
	for extra, want := range map[string]string{"": "2", "tls_http2_off": "1.1"} {
		e := edges[extra]
		out, err := exec.Command("curl", "-s", "--http2", "--cacert", e.ca.File, "--connect-to", "api.example.com:443:"+e.tls, "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
			"https://api.example.com/a").CombinedOutput()
		if err != nil || string(out) != want+" 200" {
			t.Errorf("curl --http2 (tls.http2 %q): %q, %v; want %q", extra, out, err, want+" 200")
		}
	}
}

// TestH2C: with h2c, the plain listener serves HTTP/2 with prior knowledge
// (curl --http2-prior-knowledge); without, the preface is refused with 400.
// An upgrade to h2c (curl --http2 to an http:// URL) is answered over
// HTTP/1.1 with the upgrade ignored, and the origin never sees Upgrade or
// HTTP2-Settings, on both paths (fastpath true and false), h2c or not.
func TestH2C(t *testing.T) {
	var heard sync.Map // the origin's fields, by path
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		heard.Store(r.URL.Path, fmt.Sprintf("upgrade=%q settings=%q connection=%q", r.Header.Get("Upgrade"), r.Header.Get("Http2-Settings"), r.Header.Get("Connection")))
		io.WriteString(w, "origin\n")
	}))
	t.Cleanup(o.Close)
	for _, tt := range []struct {
		name, extra string
		h2c         bool
	}{
		{"h2c", "", true},
		{"h2c, no fast path", "fastpath: false", true},
		{"no h2c", "", false},
		{"no h2c, no fast path", "fastpath: false", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := h2Config(o.URL, tt.extra)
			if !tt.h2c {
				cfg = strings.Replace(cfg, "h2c: true\n", "", 1)
			}
			e := startTLSEdge(t, cfg)
			curl := func(args ...string) string {
				out, _ := exec.Command("curl", append([]string{"-s", "-o", "/dev/null", "-w", "%{http_version} %{http_code}", "-H", "Host: api.example.com"}, args...)...).CombinedOutput()
				return string(out)
			}
			if tt.h2c {
				if got := curl("--http2-prior-knowledge", "http://"+e.public+"/prior"); got != "2 200" {
					t.Errorf("--http2-prior-knowledge: %q, want \"2 200\"", got)
				}
			} else {
				c, err := net.Dial("tcp", e.public)
				must(t, err)
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
				line, _ := bufio.NewReader(c).ReadString('\n')
				if line != "HTTP/1.1 400 Bad Request\r\n" {
					t.Errorf("the preface without h2c: answered %q, want 400", line)
				}
			}
			path := "/upgrade-" + strings.ReplaceAll(tt.name, " ", "")
			if got := curl("--http2", "http://"+e.public+path); got != "1.1 200" {
				t.Errorf("--http2 to http://: %q, want \"1.1 200\"", got)
			}
			if v, _ := heard.Load(path); v != `upgrade="" settings="" connection=""` {
				t.Errorf("the origin heard %v, want no upgrade", v)
			}
		})
	}
}

// TestHTTP2MaxRequestsPerConnection: an HTTP/2 connection serves
// http2.max_requests_per_connection requests: the last is answered with
// GOAWAY, and the client opens a new connection for the next; a reload
// changes the number for the connections after it.
func TestHTTP2MaxRequestsPerConnection(t *testing.T) {
	o, _ := recordingOrigin(t)
	e := startTLSEdge(t, h2Config(o.URL, "http2: {max_requests_per_connection: 3}"))
	count := func(n int) (conns int) {
		client := e.protoClient("h2")
		defer client.CloseIdleConnections()
		for i := range n {
			trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
				if !info.Reused {
					conns++
				}
			}}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", "http://api.example.com/a", nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
				t.Fatalf("request %d: %s %d", i, resp.Proto, resp.StatusCode)
			}
		}
		return conns
	}
	if got := count(7); got != 3 {
		t.Errorf("7 requests, 3 a connection: %d connections, want 3", got)
	}
	before := loadedConfigHash(t, e)
	must(t, os.WriteFile(e.cfg, []byte(h2Config(o.URL, "http2: {max_requests_per_connection: 2}")), 0o600))
	wait.For(t, 10*time.Second, "the reload", func() bool { return loadedConfigHash(t, e) != before })
	if got := count(7); got != 4 {
		t.Errorf("after the reload, 7 requests, 2 a connection: %d connections, want 4", got)
	}
}

// loadedConfigHash is the hash of e's running configuration.
func loadedConfigHash(t *testing.T, e *tlsEdge) string {
	_, body := httpGet(t, "http://"+e.admin+"/v1/config")
	var v struct {
		Hash string `json:"hash"`
	}
	must(t, json.Unmarshal([]byte(body), &v))
	return v.Hash
}

// TestHTTP2Shutdown: at shutdown an HTTP/2 request in flight completes
// (its connection gets GOAWAY), and edge exits cleanly.
func TestHTTP2Shutdown(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(arrived) })
		<-release
		io.WriteString(w, "slow\n")
	}))
	t.Cleanup(o.Close)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	ca.issue(t, dir, "api", time.Hour, "api.example.com")
	ca.issue(t, dir, "wild", time.Hour, "*.example.net")
	cfg := dir + "/edge.yaml"
	must(t, os.WriteFile(cfg, []byte(h2Config(o.URL, "")), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := newEdgeLog()
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"-config", cfg}, io.Discard, log) }()
	public, _ := log.waitStarted(t)
	e := &tlsEdge{public: public, ca: ca}
	client := e.protoClient("h2")
	type result struct {
		status int
		body   string
		err    error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := client.Get("http://api.example.com/slow")
		if err != nil {
			got <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- result{resp.StatusCode, string(b), err}
	}()
	<-arrived
	cancel()
	wait.For(t, 10*time.Second, "the shutdown to begin", func() bool { return strings.Contains(log.String(), "shutting down") })
	close(release)
	if r := <-got; r.err != nil || r.status != 200 || r.body != "slow\n" {
		t.Errorf("the request in flight: %d %q %v, want 200 \"slow\\n\"", r.status, r.body, r.err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit code %d:\n%s", code, log)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("edge did not stop")
	}
	if strings.Contains(log.String(), "drain timed out") {
		t.Errorf("the drain timed out:\n%s", log)
	}
}
