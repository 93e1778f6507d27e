package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestViaToken(t *testing.T) {
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown"
	}
	tests := []struct {
		name, pop, node, want string
	}{
		{"pop and node", "fra1", "web3", "edge-fra1-web3"},
		{"a host name with dots", "local", "web3.fra1.example.com", "edge-local-web3.fra1.example.com"},
		{"bytes that are not tchar", "local", "web 3,x:8(y)é", "edge-local-web-3-x-8-y---"},
		{"no node: the host name", "local", "", wire.Pseudonym("edge-local-" + host)},
	}
	for _, tt := range tests {
		got := viaToken(tt.pop, tt.node)
		if got != tt.want {
			t.Errorf("%s: viaToken(%q, %q) = %q, want %q", tt.name, tt.pop, tt.node, got, tt.want)
		}
		if !wire.IsToken(got) {
			t.Errorf("%s: viaToken(%q, %q) = %q, not a token", tt.name, tt.pop, tt.node, got)
		}
	}
}

// TestOriginReceivesVia: the origin receives this node's Via entry on a
// line after the client's Via lines, kept as they came; an HTTP/1.0
// request's entry says 1.0 (the version edge received).
func TestOriginReceivesVia(t *testing.T) {
	origin, seenBy := newOrigin(t, "a")
	cfg := oneDomain(origin.URL, rule("per-ip", 100, time.Minute))
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Table: table, Node: "web3"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	srv := newRawServer(t, p)
	tests := []struct {
		name, req string
		want      []string
	}{
		{"no Via", "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n", []string{"1.1 edge-local-web3"}},
		{"the client's Via", "GET / HTTP/1.1\r\nHost: api.example.com\r\nVia: 1.0 fred, 1.1 p.example.net\r\n\r\n",
			[]string{"1.0 fred, 1.1 p.example.net", "1.1 edge-local-web3"}},
		{"two lines", "GET / HTTP/1.1\r\nHost: api.example.com\r\nVia: 1.0 fred\r\nVia: 1.1 edge-other-web3\r\n\r\n",
			[]string{"1.0 fred", "1.1 edge-other-web3", "1.1 edge-local-web3"}},
		{"HTTP/1.0", "GET / HTTP/1.0\r\nHost: api.example.com\r\n\r\n", []string{"1.0 edge-local-web3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(seenBy())
			if status := rawStatus(t, srv, tt.req); status != http.StatusOK {
				t.Fatalf("status %d, want 200", status)
			}
			seen := seenBy()
			if len(seen) != before+1 {
				t.Fatalf("the origin saw %d requests, want 1", len(seen)-before)
			}
			if got := seen[len(seen)-1].Header["Via"]; !slices.Equal(got, tt.want) {
				t.Errorf("origin's Via = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestLoopRefused: a request whose Via holds this node's entry is answered
// 508 before any rule counts it, and never forwarded; one with another
// node's entry is forwarded.
func TestLoopRefused(t *testing.T) {
	origin, seenBy := newOrigin(t, "a")
	e := newEnv(t, oneDomain(origin.URL, rule("per-ip", 1, time.Minute)))
	me := e.proxy.Via()
	loops := testutil.ToFloat64(e.proxy.metrics.requests.WithLabelValues("api.example.com", outcomeLoop))
	tests := []struct {
		name, via string
		status    int
	}{
		{"this node", "1.1 " + me, http.StatusLoopDetected},
		{"this node last of several", "1.0 fred, 1.1 p.example.net (x, y), 1.1 " + me, http.StatusLoopDetected},
		{"this node received as HTTP/1.0", "1.0 " + me, http.StatusLoopDetected},
		{"this node, a comment after", "1.1 " + me + " (edge)", http.StatusLoopDetected},
		{"this node in a comment only", "1.1 p.example.net (" + me + ")", http.StatusOK},
		{"another node", "1.1 " + me + "x", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.clock.Advance(2 * time.Minute) // per-ip allows one a minute, sliding
			before := len(seenBy())
			resp, body := e.do("GET", "api.example.com", "/", map[string]string{"Via": tt.via}, "")
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			forwarded := len(seenBy()) - before
			if tt.status == http.StatusOK {
				if forwarded != 1 {
					t.Errorf("forwarded %d times, want 1", forwarded)
				}
				return
			}
			if forwarded != 0 {
				t.Errorf("a loop was forwarded %d times, want 0", forwarded)
			}
			if want := "loop detected: the request came back to the edge node that forwarded it\n"; body != want {
				t.Errorf("body %q, want %q", body, want)
			}
			if got := resp.Header.Get("Content-Type"); got != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type %q, want text/plain; charset=utf-8", got)
			}
			// No rule counted it: per-ip's one request is still there.
			if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != http.StatusOK {
				t.Errorf("the next request: status %d, want 200 (a loop counted by a rule)", resp.StatusCode)
			}
		})
	}
	got := testutil.ToFloat64(e.proxy.metrics.requests.WithLabelValues("api.example.com", outcomeLoop)) - loops
	if got != 4 {
		t.Errorf("edge_requests_total{outcome=\"loop\"} grew by %v, want 4", got)
	}
}

// TestFastLoop: the fast path answers a loop itself, 508 as ServeHTTP
// answers it, allocating nothing, on a domain whose allowed requests it
// declines (a static response), HEAD included; one whose body it cannot
// read it declines.
func TestFastLoop(t *testing.T) {
	p := benchProxy(t, rules.RuleConfig{Name: "per-ip", Limit: 1, Period: time.Minute}, 0)
	h := fastHead("GET /v1/items HTTP/1.1\r\nHost: api.example.com\r\nVia: 1.0 fred\r\nvia: 1.1 " + p.Via() + "\r\n\r\n")
	before := testutil.ToFloat64(p.metrics.requests.WithLabelValues("api.example.com", outcomeLoop))
	out := make([]byte, 0, 4096)
	var ok bool
	if n := testing.AllocsPerRun(100, func() {
		c := *h
		out, ok = p.Answer(&c, out[:0])
	}); (n != 0 && !raceEnabled) || !ok {
		t.Errorf("%v allocations per loop (answered %v), want 0", n, ok)
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(out))), nil)
	if err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if resp.StatusCode != http.StatusLoopDetected {
		t.Errorf("status %d, want 508", resp.StatusCode)
	}
	if got := testutil.ToFloat64(p.metrics.requests.WithLabelValues("api.example.com", outcomeLoop)) - before; got != 101 {
		t.Errorf("edge_requests_total{outcome=\"loop\"} grew by %v, want 101", got)
	}
	// The rule counted none of them.
	if _, ok := p.Answer(fastHead("GET /v1/items HTTP/1.1\r\nHost: api.example.com\r\n\r\n"), out[:0]); ok {
		t.Errorf("after the loops, a request was refused: a rule counted them")
	}
	head := fastHead("HEAD /v1/items HTTP/1.1\r\nHost: api.example.com\r\nVia: 1.1 " + p.Via() + "\r\n\r\n")
	if out, ok := p.Answer(head, out[:0]); !ok || !strings.HasPrefix(string(out), "HTTP/1.1 508 Loop Detected\r\n") || !strings.HasSuffix(string(out), "\r\n\r\n") {
		t.Errorf("HEAD: answered %v with %q, want 508 without a body", ok, out)
	}
	body := fastHead("POST /v1/items HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 3\r\nVia: 1.1 " + p.Via() + "\r\n\r\n")
	body.BodyLen = 3 // and no Body to read it by
	if _, ok := p.Answer(body, out[:0]); ok {
		t.Errorf("a loop with a body the fast path cannot read was answered, want declined")
	}
}

// newRawServer serves p on a loopback listener of its own, for raw
// requests (rawStatus).
func newRawServer(t *testing.T, p *Proxy) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// rawStatus sends raw to addr on a new connection and returns the status
// of the response.
func rawStatus(t *testing.T, addr, raw string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
