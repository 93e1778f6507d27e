package proxy

import (
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
// every request with a 2-byte body: over TLS with secure (HTTP/1.1
// alone, its certificate trusted by origin_tls.ca_file).
func forwardBenchProxy(b *testing.B, secure bool) *Proxy { return forwardBenchProxyOf(b, secure, 0) }

// forwardBenchProxyOf is forwardBenchProxy with the origin as a server of
// max_in_flight maxInFlight (0: none).
func forwardBenchProxyOf(b *testing.B, secure bool, maxInFlight int) *Proxy {
	b.Helper()
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	}))
	cfg := rules.Config{
		Domains: []rules.DomainConfig{{
			Hosts: []string{"api.example.com"},
			Rules: []rules.RuleConfig{{Name: "per-ip", Limit: 1_000_000_000, Period: time.Minute}},
		}},
	}
	if secure {
		origin.StartTLS()
		ca := filepath.Join(b.TempDir(), "origin.pem")
		if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: origin.Certificate().Raw}), 0o600); err != nil {
			b.Fatal(err)
		}
		cfg.OriginTLS = &rules.OriginTLSConfig{CAFile: ca}
	} else {
		origin.Start()
	}
	b.Cleanup(origin.Close)
	cfg.Domains[0].Origins = []rules.OriginConfig{{URL: origin.URL, MaxInFlight: maxInFlight}}
	return configBenchProxy(b, cfg)
}

// configBenchProxy returns a Proxy serving cfg, closed when b ends.
func configBenchProxy(b *testing.B, cfg rules.Config) *Proxy {
	b.Helper()
	table, err := rules.Compile(cfg)
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
func BenchmarkFastForward(b *testing.B) { benchFastForward(b, false) }

// BenchmarkFastForwardHTTPS is BenchmarkFastForward to an https origin,
// over a pooled TLS connection (docs/origins.md, "TLS to origins").
func BenchmarkFastForwardHTTPS(b *testing.B) { benchFastForward(b, true) }

func benchFastForward(b *testing.B, secure bool) { benchFastForwardOn(b, forwardBenchProxy(b, secure)) }

func benchFastForwardOn(b *testing.B, p *Proxy) {
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
func BenchmarkForward(b *testing.B) { benchForward(b, false) }

// BenchmarkForwardHTTPS is BenchmarkForward to an https origin, over the
// transport's pooled TLS connection (HTTP/1.1: the origin offers no h2).
func BenchmarkForwardHTTPS(b *testing.B) { benchForward(b, true) }

func benchForward(b *testing.B, secure bool) { benchForwardOn(b, forwardBenchProxy(b, secure)) }

func benchForwardOn(b *testing.B, p *Proxy) {
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

// routesBenchProxy returns a Proxy of two domains forwarded to origin:
// none.example.com without routes, and ten.example.com with ten routes
// (/r0/ to /r9/, the last for POST alone) and its own origins for the
// rest.
func routesBenchProxy(b *testing.B, origin string) *Proxy {
	b.Helper()
	ten := rules.DomainConfig{Name: "ten", Hosts: []string{"ten.example.com"}, Origin: origin,
		Rules: []rules.RuleConfig{{Name: "per-ip", Limit: 1_000_000_000, Period: time.Minute}}}
	for i := range 10 {
		rc := rules.RouteConfig{Name: fmt.Sprintf("r%d", i), Match: &rules.RouteMatchConfig{PathPrefix: fmt.Sprintf("/r%d/", i)},
			UpstreamConfig: rules.UpstreamConfig{Origins: []rules.OriginConfig{{URL: origin}}}}
		if i == 9 {
			rc.Match.Methods = []string{"POST"}
		}
		ten.Routes = append(ten.Routes, rc)
	}
	return configBenchProxy(b, rules.Config{Origin: origin, Domains: []rules.DomainConfig{
		{Name: "none", Hosts: []string{"none.example.com"}, Rules: ten.Rules}, ten}})
}

// BenchmarkRouteChoice measures the route step alone (exchange.routeTo)
// for a domain without routes and one with ten: a path the first route
// takes, one that falls through all ten to the domain's own origins, and
// on the net/http path (its path cleaned by the step) the same with a
// path that needs cleaning. docs/origins.md has the figures.
func BenchmarkRouteChoice(b *testing.B) {
	p := routesBenchProxy(b, "http://127.0.0.1:9")
	st := p.state.Load()
	for _, bc := range []struct {
		name, domain, path string
		cleaned            bool
		want               string
	}{
		{"none", "none", "/v1/items", true, ""},
		{"ten/first", "ten", "/r0/items", true, "r0"},
		{"ten/fallthrough", "ten", "/v1/items", true, ""},
		{"ten/fallthrough/net-http", "ten", "/v1/items", false, ""},
		{"ten/fallthrough/net-http-dirty", "ten", "//v1/./items", false, ""},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ex := &exchange{d: st.domain(bc.domain), method: http.MethodGet}
			for b.Loop() {
				ex.routeTo(bc.path, bc.cleaned)
			}
			if ex.group.name != bc.want {
				b.Fatalf("route %q, want %q", ex.group.name, bc.want)
			}
			b.ReportAllocs()
		})
	}
}

// BenchmarkFastForwardRoutes is BenchmarkFastForward for a domain
// without routes and one with ten, for a path that falls through them
// all: the route step's share of a forward.
func BenchmarkFastForwardRoutes(b *testing.B) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	}))
	b.Cleanup(origin.Close)
	p := routesBenchProxy(b, origin.URL)
	for _, domain := range []string{"none", "ten"} {
		b.Run(domain, func(b *testing.B) {
			h := fastHead("GET /v1/items HTTP/1.1\r\nHost: " + domain + ".example.com\r\nUser-Agent: bench\r\n\r\n")
			h.Client = &countClient{}
			var out []byte
			for b.Loop() {
				var ok bool
				if out, ok = p.Answer(h, out[:0]); !ok || !strings.HasPrefix(string(out), "HTTP/1.1 200 ") {
					b.Fatalf("the fast path declined or failed the request: %v %q", ok, out)
				}
			}
			b.ReportAllocs()
		})
	}
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
		b.Run("fast/"+name, func(b *testing.B) { benchFastForwardOn(b, forwardBenchProxyOf(b, false, max)) })
		b.Run("net/http/"+name, func(b *testing.B) { benchForwardOn(b, forwardBenchProxyOf(b, false, max)) })
	}
}
