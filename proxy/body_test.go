package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// countingOrigin is an origin that counts the connections it accepts and
// records the requests that reach it, answering "origin".
type countingOrigin struct {
	srv   *httptest.Server
	conns atomic.Int64 // connections accepted

	mu       sync.Mutex
	complete int // requests whose body arrived whole
	last     *http.Request
	lastBody string
}

func newCountingOrigin(t *testing.T) *countingOrigin {
	t.Helper()
	o := &countingOrigin{}
	o.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "origin: broken body", http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		o.complete++
		o.last, o.lastBody = r, string(body)
		o.mu.Unlock()
		io.WriteString(w, "origin")
	}))
	o.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			o.conns.Add(1)
		}
	}
	o.srv.Start()
	t.Cleanup(o.srv.Close)
	return o
}

func (o *countingOrigin) seen() (complete int, last *http.Request, body string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.complete, o.last, o.lastBody
}

// bodyEnv is a proxy behind a real server and Listener, forwarding to a
// counting origin.
type bodyEnv struct {
	origin *countingOrigin
	proxy  *Proxy
	srv    *hostileServer
}

func newBodyEnv(t *testing.T, mutate func(*rules.Config)) *bodyEnv {
	t.Helper()
	o := newCountingOrigin(t)
	cfg := oneDomain(o.srv.URL, rule("per-ip", 1000, time.Hour))
	mutate(&cfg)
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	transport := newTransport(table.Timeouts)
	t.Cleanup(transport.CloseIdleConnections)
	p, err := New(Options{Table: table, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	s := startHostileServer(t, p, table, guard.ListenerOptions{WriteIdleTimeout: 5 * time.Second})
	t.Cleanup(func() { s.stop(t) })
	return &bodyEnv{origin: o, proxy: p, srv: s}
}

// dial opens a client connection to edge that the test closes at its end.
func (e *bodyEnv) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// response reads one final response from c (skipping 1xx ones, which it
// returns as interim) and its body.
func response(t *testing.T, c net.Conn, method string) (resp *http.Response, body string, interim []int) {
	t.Helper()
	br := bufio.NewReader(c)
	for {
		var err error
		resp, err = http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("reading the response: %v", err)
		}
		if resp.StatusCode >= 200 {
			break
		}
		interim = append(interim, resp.StatusCode)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), interim
}

// TestSlowBodiesHoldNoOriginConnection opens 100 connections that send a
// request head and part of a body, then stall: with request buffering the
// origin has no connection from edge (every handler is waiting on its
// body, as the buffered-bytes gauge shows) until a body completes; without
// it every request holds an origin connection.
func TestSlowBodiesHoldNoOriginConnection(t *testing.T) {
	const clients, size = 100, 1000
	off := false
	tests := []struct {
		name      string
		buffering *bool
		// wantConns is the origin connections while every body stalls.
		wantConns int64
	}{
		{"buffering (default)", nil, 0},
		{"request_buffering: false", &off, clients},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newBodyEnv(t, func(c *rules.Config) { c.Domains[0].RequestBuffering = tt.buffering })
			head := hostile.Req("POST /upload HTTP/1.1", hostile.HostAPI, fmt.Sprintf("Content-Length: %d", size))
			conns := make([]net.Conn, clients)
			for i := range conns {
				conns[i] = e.dial(t)
				if _, err := io.WriteString(conns[i], head+"first part;"); err != nil {
					t.Fatal(err)
				}
			}
			if tt.buffering == nil {
				// Every handler has reserved its buffer: all heads were
				// allowed and every body is being read.
				wait.For(t, 10*time.Second, "request buffering every body", func() bool {
					return testutil.ToFloat64(e.proxy.metrics.bufferedBytes) == clients*size
				})
			} else {
				wait.For(t, 10*time.Second, "origin connection per request", func() bool {
					return e.origin.conns.Load() >= tt.wantConns
				})
			}
			if got := e.origin.conns.Load(); got != tt.wantConns {
				t.Fatalf("origin accepted %d connections while bodies stall, want %d", got, tt.wantConns)
			}
			if got := testutil.ToFloat64(e.proxy.metrics.inFlight); got != float64(tt.wantConns) {
				t.Errorf("edge_upstream_requests_in_flight: got %v, want %d", got, tt.wantConns)
			}

			// One body completes: that request reaches the origin whole.
			rest := strings.Repeat("x", size-len("first part;"))
			if _, err := io.WriteString(conns[0], rest); err != nil {
				t.Fatal(err)
			}
			resp, body, _ := response(t, conns[0], "POST")
			if resp.StatusCode != 200 || body != "origin" {
				t.Fatalf("completed request: got %d %q, want 200 origin", resp.StatusCode, body)
			}
			complete, last, lastBody := e.origin.seen()
			if complete != 1 || lastBody != "first part;"+rest || last.ContentLength != size {
				t.Errorf("origin: got %d complete requests, last with %d bytes (Content-Length %d), want 1 with %d",
					complete, len(lastBody), last.ContentLength, size)
			}
			if tt.buffering == nil {
				if got := e.origin.conns.Load(); got != 1 {
					t.Errorf("origin accepted %d connections after one body completed, want 1", got)
				}
			}
			for _, c := range conns[1:] {
				c.Close()
			}
			wait.For(t, 10*time.Second, "buffers released", func() bool {
				return testutil.ToFloat64(e.proxy.metrics.bufferedBytes) == 0 &&
					testutil.ToFloat64(e.proxy.metrics.inFlight) == 0
			})
		})
	}
}

// TestMaxRequestBody sends bodies over and under max_request_body, with and
// without a declared length: those over get 413 and never reach the
// origin; those under are forwarded whole, with a Content-Length.
func TestMaxRequestBody(t *testing.T) {
	chunk := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
	chunked := func(parts ...string) string {
		b := hostile.Req("POST /upload HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked")
		for _, p := range parts {
			b += chunk(p)
		}
		return b + "0\r\n\r\n"
	}
	kib := strings.Repeat("k", 1024)
	tests := []struct {
		name      string
		raw       string
		max, buf  rules.Size
		streaming bool
		want      int
		// wantOrigin: the origin got the request whole; otherwise no
		// complete request reached it.
		wantOrigin bool
	}{
		{name: "Content-Length over", raw: hostile.Req("POST /upload HTTP/1.1", hostile.HostAPI, "Content-Length: 4097"),
			max: 4 * rules.KiB, want: 413},
		{name: "Content-Length over with Expect", raw: hostile.Req("POST /upload HTTP/1.1", hostile.HostAPI, "Content-Length: 4097", "Expect: 100-continue"),
			max: 4 * rules.KiB, want: 413},
		{name: "Content-Length over, streaming", raw: hostile.Req("POST /upload HTTP/1.1", hostile.HostAPI, "Content-Length: 4097"),
			max: 4 * rules.KiB, streaming: true, want: 413},
		{name: "Content-Length at the limit", raw: hostile.Req("POST /upload HTTP/1.1", hostile.HostAPI, "Content-Length: 4096") + strings.Repeat(kib, 4),
			max: 4 * rules.KiB, want: 200, wantOrigin: true},
		{name: "chunked over, within the buffer", raw: chunked(kib, kib, kib, kib, "x"),
			max: 4 * rules.KiB, want: 413},
		{name: "chunked over, past the buffer", raw: chunked(kib, kib, kib, kib, kib, kib, kib, kib),
			max: 4 * rules.KiB, buf: rules.KiB, want: 413},
		{name: "chunked over, streaming", raw: chunked(kib, kib, kib, kib, kib),
			max: 4 * rules.KiB, streaming: true, want: 413},
		{name: "chunked at the limit", raw: chunked(kib, kib, kib, kib),
			max: 4 * rules.KiB, want: 200, wantOrigin: true},
		{name: "no limit", raw: chunked(kib, kib, kib, kib, kib),
			want: 200, wantOrigin: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newBodyEnv(t, func(c *rules.Config) {
				c.MaxRequestBody = tt.max
				c.Domains[0].RequestBuffer = tt.buf
				if tt.streaming {
					off := false
					c.Domains[0].RequestBuffering = &off
				}
			})
			c := e.dial(t)
			if _, err := io.WriteString(c, tt.raw); err != nil {
				t.Fatal(err)
			}
			resp, _, interim := response(t, c, "POST")
			if resp.StatusCode != tt.want || len(interim) != 0 {
				t.Errorf("got %d (after interim %v), want %d alone", resp.StatusCode, interim, tt.want)
			}
			c.Close()
			complete, last, body := e.origin.seen()
			if tt.wantOrigin {
				if complete != 1 || last.ContentLength != int64(len(body)) || len(last.TransferEncoding) != 0 {
					t.Errorf("origin: got %d complete requests, last with Content-Length %d, Transfer-Encoding %q, %d bytes; want 1 with a Content-Length",
						complete, last.ContentLength, last.TransferEncoding, len(body))
				}
				return
			}
			if complete != 0 {
				t.Errorf("origin got %d complete requests, want 0", complete)
			}
			if !tt.streaming && tt.buf == 0 {
				if n := e.origin.conns.Load(); n != 0 {
					t.Errorf("origin accepted %d connections, want 0", n)
				}
			}
			if got := testutil.ToFloat64(e.proxy.metrics.refused.WithLabelValues("413")); tt.want == 413 && got != 1 {
				t.Errorf("edge_refused_requests_total{code=413}: got %v, want 1", got)
			}
		})
	}
}

// TestExpectContinue: an allowed request with "Expect: 100-continue" gets
// 100 Continue from edge, then its response; a refused one gets 429 at
// once, without 100 Continue and without edge reading (or buffering) its
// body; the origin never sees Expect.
func TestExpectContinue(t *testing.T) {
	e := newBodyEnv(t, func(c *rules.Config) { c.Domains[0].Rules[0].Limit = 1 })
	head := hostile.Req("POST /upload HTTP/1.1", hostile.HostAPI, "Content-Length: 5", "Expect: 100-continue")

	allowed := e.dial(t)
	if _, err := io.WriteString(allowed, head); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(allowed)
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("allowed request: got %q, %v, want 100 Continue before the body", line, err)
	}
	if _, err := io.WriteString(allowed, "hello"); err != nil {
		t.Fatal(err)
	}
	br.ReadString('\n') // the empty line ending the 100 response
	resp, err := http.ReadResponse(br, &http.Request{Method: "POST"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("allowed request: got %v, %v, want 200", resp, err)
	}
	resp.Body.Close()
	if _, last, body := e.origin.seen(); body != "hello" || last.Header.Get("Expect") != "" {
		t.Errorf("origin got body %q, Expect %q, want hello and none", body, last.Header.Get("Expect"))
	}

	refused := e.dial(t)
	if _, err := io.WriteString(refused, head); err != nil { // the body never comes
		t.Fatal(err)
	}
	resp, _, interim := response(t, refused, "POST")
	if resp.StatusCode != 429 || len(interim) != 0 {
		t.Errorf("refused request: got %d after interim %v, want 429 alone", resp.StatusCode, interim)
	}
	if got := testutil.ToFloat64(e.proxy.metrics.bufferedBytes); got != 0 {
		t.Errorf("buffered bytes after the refusal: got %v, want 0", got)
	}
}

// TestRefusedRequestNeverBuffers: a request over its limit is answered 429
// on its head alone, while its (complete) body is never read by the proxy.
func TestRefusedRequestNeverBuffers(t *testing.T) {
	e := newBodyEnv(t, func(c *rules.Config) { c.Domains[0].Rules[0].Limit = 1 })
	tests := []struct {
		name string
		want int
	}{{"allowed", 200}, {"refused", 429}}
	for _, tt := range tests {
		var read atomic.Int64
		r := httptest.NewRequest("POST", "http://api.example.com/upload", &countingReader{n: &read, left: 10000})
		r.ContentLength = -1
		w := httptest.NewRecorder()
		e.proxy.ServeHTTP(w, r)
		wantRead := int64(10000)
		if tt.want != 200 {
			wantRead = 0
		}
		if w.Code != tt.want || read.Load() != wantRead {
			t.Errorf("%s: got %d with %d body bytes read, want %d with %d", tt.name, w.Code, read.Load(), tt.want, wantRead)
		}
	}
}

// countingReader yields left bytes, counting those read.
type countingReader struct {
	n    *atomic.Int64
	left int
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), c.left)
	c.left -= n
	c.n.Add(int64(n))
	return n, nil
}

// TestBufferCapFallsBackToStreaming holds max_buffered_bytes with one slow
// body: the next request streams its body to the origin rather than fail,
// and is counted as unbuffered.
func TestBufferCapFallsBackToStreaming(t *testing.T) {
	e := newBodyEnv(t, func(c *rules.Config) {
		c.RequestBuffer, c.MaxBufferedBytes = 64*rules.KiB, 64*rules.KiB
	})
	holder := e.dial(t)
	if _, err := io.WriteString(holder, hostile.Req("POST /upload HTTP/1.1", hostile.HostAPI, "Content-Length: 65536")+"slow"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the first body buffering", func() bool {
		return testutil.ToFloat64(e.proxy.metrics.bufferedBytes) == 64<<10
	})

	streamer := e.dial(t)
	if _, err := io.WriteString(streamer, hostile.Req("POST /upload HTTP/1.1", hostile.HostAPI, "Content-Length: 9")+"slow"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the second request at the origin", func() bool { return e.origin.conns.Load() == 1 })
	if got := testutil.ToFloat64(e.proxy.metrics.bufferFull); got != 1 {
		t.Errorf("edge_request_body_unbuffered_total: got %v, want 1", got)
	}
	if _, err := io.WriteString(streamer, "still"); err != nil {
		t.Fatal(err)
	}
	if resp, body, _ := response(t, streamer, "POST"); resp.StatusCode != 200 || body != "origin" {
		t.Errorf("streamed request: got %d %q, want 200 origin", resp.StatusCode, body)
	}
	if _, _, body := e.origin.seen(); body != "slowstill" {
		t.Errorf("origin got %q, want slowstill", body)
	}
}

// TestBodyKeysTakeEffectOnReload reloads max_request_body,
// request_buffering and max_buffered_bytes: the next request follows the
// new values, and none of them is listed as needing a restart.
func TestBodyKeysTakeEffectOnReload(t *testing.T) {
	e := newBodyEnv(t, func(c *rules.Config) {})
	post := func() int {
		r := httptest.NewRequest("POST", "http://api.example.com/upload", strings.NewReader(strings.Repeat("x", 2048)))
		w := httptest.NewRecorder()
		e.proxy.ServeHTTP(w, r)
		return w.Code
	}
	off := false
	tests := []struct {
		name   string
		mutate func(c *rules.Config)
		want   int
	}{
		{"defaults", func(c *rules.Config) {}, 200},
		{"max_request_body 1KiB", func(c *rules.Config) { c.MaxRequestBody = rules.KiB }, 413},
		{"domain max_request_body 4KiB", func(c *rules.Config) {
			c.MaxRequestBody, c.Domains[0].MaxRequestBody = rules.KiB, 4*rules.KiB
		}, 200},
		{"request_buffering false, max_buffered_bytes 1MiB", func(c *rules.Config) {
			c.Domains[0].RequestBuffering, c.MaxBufferedBytes = &off, rules.MiB
		}, 200},
	}
	for _, tt := range tests {
		cfg := oneDomain(e.origin.srv.URL, rule("per-ip", 1000, time.Hour))
		tt.mutate(&cfg)
		res, err := e.proxy.Reload(compile(t, cfg), tt.name)
		if err != nil {
			t.Fatalf("%s: Reload: %v", tt.name, err)
		}
		if got := post(); got != tt.want || len(res.RestartRequired) != 0 {
			t.Errorf("%s: got %d, restart_required %q, want %d and none", tt.name, got, res.RestartRequired, tt.want)
		}
		d := e.proxy.state.Load().domains[0]
		if got := e.proxy.Table().MaxBufferedBytes; d.Body.Buffer != (cfg.Domains[0].RequestBuffering == nil) || (cfg.MaxBufferedBytes != 0 && got != cfg.MaxBufferedBytes) {
			t.Errorf("%s: running policy %+v, max_buffered_bytes %s", tt.name, d.Body, got)
		}
	}
}
