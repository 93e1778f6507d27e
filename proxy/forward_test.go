package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/rules"
)

func TestForwardsEverythingTheClientSent(t *testing.T) {
	origin, got := newOrigin(t, "a")
	e := newEnv(t, oneDomain(origin.URL))
	resp, body := e.do("POST", "API.Example.com.", "/v1/items?q=1&r=two", map[string]string{
		"X-Custom":          "kept",
		"Connection":        "X-Drop-Me",
		"X-Drop-Me":         "hop-by-hop",
		"X-Forwarded-For":   "6.6.6.6",
		"X-Real-IP":         "6.6.6.6",
		"Forwarded":         "for=6.6.6.6",
		"X-Forwarded-Proto": "https",
	}, "payload")
	if resp.StatusCode != 200 || body != "origin:a" {
		t.Fatalf("got %d %q, want 200 origin:a", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Hop") != "" {
		t.Errorf("hop-by-hop response field X-Hop reached the client")
	}
	r := got()[0]
	checks := []struct{ what, got, want string }{
		{"method", r.Method, "POST"},
		{"host", r.Host, "API.Example.com."},
		{"path", r.Path, "/v1/items"},
		{"query", r.RawQuery, "q=1&r=two"},
		{"body", r.Body, "payload"},
		{"X-Custom", r.Header.Get("X-Custom"), "kept"},
		{"X-Drop-Me", r.Header.Get("X-Drop-Me"), ""},
		// The peer is not a trusted proxy: its forwarding fields are not
		// believed, and the origin is told the peer's address only.
		{"X-Forwarded-For", strings.Join(r.Header.Values("X-Forwarded-For"), ","), "127.0.0.1"},
		{"X-Real-Ip", r.Header.Get("X-Real-Ip"), ""},
		{"Forwarded", r.Header.Get("Forwarded"), ""},
		{"X-Forwarded-Host", r.Header.Get("X-Forwarded-Host"), "API.Example.com."},
		{"X-Forwarded-Proto", r.Header.Get("X-Forwarded-Proto"), "http"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("origin saw %s = %q, want %q", c.what, c.got, c.want)
		}
	}
}

func TestTrustedProxyChainIsKept(t *testing.T) {
	origin, got := newOrigin(t, "a")
	cfg := oneDomain(origin.URL, rule("per-ip", 1, time.Minute))
	cfg.ClientIP.TrustedProxies = []string{"127.0.0.1/32"}
	e := newEnv(t, cfg)
	hdr := map[string]string{"X-Forwarded-For": "203.0.113.1, 127.0.0.1", "X-Forwarded-Proto": "https"}
	if resp, _ := e.do("GET", "api.example.com", "/", hdr, ""); resp.StatusCode != 200 {
		t.Fatalf("first request: got %d, want 200", resp.StatusCode)
	}
	r := got()[0]
	if xff := r.Header.Get("X-Forwarded-For"); xff != "203.0.113.1, 127.0.0.1, 127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the chain with the peer appended", xff)
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p != "https" {
		t.Errorf("X-Forwarded-Proto = %q, want the trusted proxy's https", p)
	}
	// The client is 203.0.113.1: its second request is limited, another
	// client behind the same proxy is not.
	if resp, _ := e.do("GET", "api.example.com", "/", hdr, ""); resp.StatusCode != 429 {
		t.Errorf("same client again: got %d, want 429", resp.StatusCode)
	}
	hdr["X-Forwarded-For"] = "203.0.113.2"
	if resp, _ := e.do("GET", "api.example.com", "/", hdr, ""); resp.StatusCode != 200 {
		t.Errorf("other client: got %d, want 200", resp.StatusCode)
	}
}

func TestUpstreamFailures(t *testing.T) {
	dead := "http://" + redistest.RefusingAddr(t)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)
	cfg := rules.Config{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1",
		Timeouts: rules.TimeoutsConfig{Upstream: 100 * time.Millisecond},
		Domains: []rules.DomainConfig{
			{Hosts: []string{"dead.test"}, Origin: dead},
			{Hosts: []string{"slow.test"}, Origin: slow.URL},
		},
	}
	e := newEnv(t, cfg)
	if resp, body := e.get("dead.test", "/"); resp.StatusCode != 502 || !strings.Contains(body, "bad gateway") {
		t.Errorf("unreachable origin: got %d %q, want 502", resp.StatusCode, body)
	}
	if resp, body := e.get("slow.test", "/"); resp.StatusCode != 504 || !strings.Contains(body, "gateway timeout") {
		t.Errorf("slow origin: got %d %q, want 504", resp.StatusCode, body)
	}
}

func TestStreamingPassesThrough(t *testing.T) {
	release := make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: second\n\n")
	}))
	t.Cleanup(origin.Close)
	defer close(release)
	e := newEnv(t, oneDomain(origin.URL))
	req, _ := http.NewRequest("GET", e.srv.URL+"/events", nil)
	req.Host = "api.example.com"
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The first event must arrive while the origin still holds the stream.
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first event: got %q, %v", line, err)
	}
}

func TestWebSocketUpgrade(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want upgrade", 400)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		// Echo one line.
		line, _ := brw.ReadString('\n')
		brw.WriteString("echo:" + line)
		brw.Flush()
	}))
	t.Cleanup(origin.Close)
	e := newEnv(t, oneDomain(origin.URL))
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: api.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: got %v, %v, want 101", resp, err)
	}
	io.WriteString(conn, "hello\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo:hello\n" {
		t.Fatalf("echo: got %q, %v", line, err)
	}
}

// TestHalfClosedClientGetsTheResponse sends a complete request and then
// half-closes the connection (as `nc -N` does). net/http cancels the
// request's context when it reads that end of stream; the origin answers
// only after that, and the client must still get the origin's response,
// never an empty 200.
func TestHalfClosedClientGetsTheResponse(t *testing.T) {
	off := false
	tests := []struct {
		name      string
		raw       string
		buffering *bool
	}{
		{"GET", hostile.Get("/slow"), nil},
		{"chunked POST", hostile.Req("POST /slow HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked") + "5\r\nhello\r\n0\r\n\r\n", nil},
		{"chunked POST, streaming", hostile.Req("POST /slow HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked") + "5\r\nhello\r\n0\r\n\r\n", &off},
		{"Content-Length POST", hostile.Req("POST /slow HTTP/1.1", hostile.HostAPI, "Content-Length: 5") + "hello", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				select {
				case <-release:
					io.WriteString(w, "origin response")
				case <-r.Context().Done():
				}
			}))
			defer origin.Close()
			cfg := oneDomain(origin.URL)
			cfg.Domains[0].RequestBuffering = tt.buffering
			table, err := rules.Compile(cfg)
			if err != nil {
				t.Fatal(err)
			}
			transport := newTransport(table.Timeouts)
			defer transport.CloseIdleConnections()
			p, err := New(Options{Table: table, Transport: transport})
			if err != nil {
				t.Fatal(err)
			}
			// The server's view of the request: its context is cancelled
			// once net/http reads the client's end of stream.
			served := make(chan context.Context, 1)
			addr := startServer(t, table, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served <- r.Context()
				p.ServeHTTP(w, r)
			}))
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(c, tt.raw); err != nil {
				t.Fatal(err)
			}
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-(<-served).Done():
			case <-time.After(10 * time.Second):
				t.Fatal("net/http did not cancel the request's context after the half-close")
			}
			close(release)
			resp, body, _ := response(t, c, "GET")
			if resp.StatusCode != 200 || body != "origin response" {
				t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, "origin response")
			}
		})
	}
}

// startServer serves h on a real http.Server behind a Listener, configured
// as startHostileServer configures it, until the test ends.
func startServer(t *testing.T, table *rules.Table, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: table.Timeouts.ReadHeader,
		ReadTimeout:       table.Timeouts.Read,
		IdleTimeout:       table.Timeouts.Idle,
		MaxHeaderBytes:    table.MaxHeaderBytes,
		ErrorLog:          discardLog,
	}
	done := make(chan error, 1)
	go func() {
		done <- srv.Serve(guard.NewListener(ln, guard.ListenerOptions{MaxHeaderBytes: table.MaxHeaderBytes, WriteIdleTimeout: 5 * time.Second}))
	}()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// TestErrorHandlerNeverEndsSilently: a forward that failed gets an answer,
// or, when it was cancelled, the handler aborts the connection; it never
// returns having written nothing (net/http would send an empty 200).
func TestErrorHandlerNeverEndsSilently(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		err     error
		want    int
		aborted bool
	}{
		{"origin unreachable", context.Background(), errors.New("dial tcp: connection refused"), 502, false},
		{"origin too slow", context.Background(), context.DeadlineExceeded, 504, false},
		{"forward cancelled", cancelled, context.Canceled, 0, true},
	}
	l := newErrorLog(slog.New(slog.DiscardHandler), "api", nil, func(w http.ResponseWriter, err error) {
		var a answer
		a.refusalAnswer(bodyRefusal(err), outcomeBodyRefused)
		a.write(w)
	})
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "http://api.example.com/", nil).WithContext(tt.ctx)
		w := httptest.NewRecorder()
		aborted := func() (aborted bool) {
			defer func() {
				if v := recover(); v != nil {
					aborted = v == http.ErrAbortHandler
				}
			}()
			l.handle(w, r, tt.err)
			return false
		}()
		if aborted != tt.aborted || (!aborted && w.Code != tt.want) {
			t.Errorf("%s: got status %d, aborted %v, want %d, aborted %v", tt.name, w.Code, aborted, tt.want, tt.aborted)
		}
	}
}

// TestGoneClientAbortsTheForward: a client that closes its connection for
// good (here with a reset) while the origin streams a large response is
// found by the first write that fails, and the origin's request is
// cancelled: ignoring the end of stream does not keep abandoned forwards.
func TestGoneClientAbortsTheForward(t *testing.T) {
	started, aborted := make(chan struct{}), make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		chunk := make([]byte, 64<<10)
		for range 1024 { // 64 MiB: more than any socket buffers hold
			if _, err := w.Write(chunk); err != nil {
				close(aborted)
				return
			}
		}
	}))
	defer origin.Close()
	table, err := rules.Compile(oneDomain(origin.URL))
	if err != nil {
		t.Fatal(err)
	}
	transport := newTransport(table.Timeouts)
	defer transport.CloseIdleConnections()
	p, err := New(Options{Table: table, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, table, p)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, hostile.Get("/big")); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := c.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case <-aborted:
	case <-time.After(10 * time.Second):
		t.Fatal("the origin's response was not cancelled 10s after the client reset its connection")
	}
}
