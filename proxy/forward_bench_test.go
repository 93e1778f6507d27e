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
func forwardBenchProxy(b *testing.B) *Proxy { return forwardBenchProxyOf(b, 0) }

// forwardBenchProxyOf is forwardBenchProxy with the origin as a server of
// max_in_flight maxInFlight (0: none).
func forwardBenchProxyOf(b *testing.B, maxInFlight int) *Proxy {
	b.Helper()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	}))
	b.Cleanup(origin.Close)
	table, err := rules.Compile(rules.Config{
		Domains: []rules.DomainConfig{{
			Hosts:          []string{"api.example.com"},
			UpstreamConfig: rules.UpstreamConfig{Origins: []rules.OriginConfig{{URL: origin.URL, MaxInFlight: maxInFlight}}},
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
func BenchmarkFastForward(b *testing.B) { benchFastForward(b, forwardBenchProxy(b)) }

func benchFastForward(b *testing.B, p *Proxy) {
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
func BenchmarkForward(b *testing.B) { benchForward(b, forwardBenchProxy(b)) }

func benchForward(b *testing.B, p *Proxy) {
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

// BenchmarkForwardMaxInFlight is BenchmarkFastForward and
// BenchmarkForward with the origin's max_in_flight unset beside one that
// is never reached: what a limit costs a forward (docs/origins.md, "A
// limit per server").
func BenchmarkForwardMaxInFlight(b *testing.B) {
	for _, max := range []int{0, 1000} {
		name := "max_in_flight=none"
		if max > 0 {
			name = "max_in_flight=1000"
		}
		b.Run("fast/"+name, func(b *testing.B) { benchFastForward(b, forwardBenchProxyOf(b, max)) })
		b.Run("net/http/"+name, func(b *testing.B) { benchForward(b, forwardBenchProxyOf(b, max)) })
	}
}
