package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
