package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// countClient is a ClientWriter that counts the answers it is given (the
// writes that begin with a 200's status line) and discards them.
type countClient struct{ ok int }

func (c *countClient) Write(b []byte) (int, error) {
	if strings.HasPrefix(string(b), "HTTP/1.1 200 ") {
		c.ok++
	}
	return len(b), nil
}
func (*countClient) Forwarding() {}
func (*countClient) Left() bool  { return false }
func (*countClient) CloseAfter() {}

// forwardBenchProxy returns a Proxy forwarding api.example.com, under a
// rule that allows everything, to an origin on 127.0.0.1 that answers
// every request with a 2-byte body.
func forwardBenchProxy(b *testing.B) *Proxy {
	b.Helper()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	}))
	b.Cleanup(origin.Close)
	table, err := rules.Compile(rules.Config{
		Origin: origin.URL,
		Domains: []rules.DomainConfig{{
			Hosts: []string{"api.example.com"},
			Rules: []rules.RuleConfig{{Name: "per-ip", Limit: 1_000_000_000, Period: time.Minute}},
		}},
	})
	if err != nil {
		b.Fatal(err)
	}
	p, err := New(Options{Table: table, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// BenchmarkFastForward measures one allowed GET forwarded by the fast
// path to an origin on 127.0.0.1, over a pooled connection: the head
// written, the response read and relayed (to a client that discards it).
func BenchmarkFastForward(b *testing.B) {
	p := forwardBenchProxy(b)
	raw := "GET /v1/items HTTP/1.1\r\nHost: api.example.com\r\nUser-Agent: bench\r\n\r\n"
	c := &countClient{}
	h := fastHead(raw)
	h.Client = c
	var out []byte
	n := 0
	for b.Loop() {
		var ok bool
		out, ok = p.Answer(h, out[:0])
		if !ok {
			b.Fatal("the fast path declined the request")
		}
		if strings.HasPrefix(string(out), "HTTP/1.1 200 ") {
			c.ok++
		}
		n++
	}
	if c.ok != n {
		b.Fatalf("%d answers 200, want %d", c.ok, n)
	}
	b.ReportAllocs()
}

// BenchmarkForward measures one allowed GET forwarded by the net/http
// path (ReverseProxy over the pooled transport) to an origin on
// 127.0.0.1, with no client connection: ServeHTTP and the transport.
func BenchmarkForward(b *testing.B) {
	p := forwardBenchProxy(b)
	req, _ := http.NewRequest("GET", "http://api.example.com/v1/items", nil)
	req.RemoteAddr = "203.0.113.9:41000"
	w := &nopWriter{h: make(http.Header)}
	for b.Loop() {
		clear(w.h)
		p.ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Fatalf("status %d, want 200", w.status)
		}
	}
	b.ReportAllocs()
}
