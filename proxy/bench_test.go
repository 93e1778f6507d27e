package proxy

import (
	"net/http"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// nopWriter is a ResponseWriter that keeps one header map and discards the
// body, so the benchmarks measure edge's work, not the recorder's.
type nopWriter struct {
	h      http.Header
	status int
}

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(s int)           { w.status = s }

// BenchmarkServeHTTP measures one request through edge with no network: host
// lookup, client identity, every rule's decision, response fields, and a
// static response. Forwarding is left out (it is net/http's cost).
func BenchmarkServeHTTP(b *testing.B) {
	cases := []struct {
		name    string
		limit   int
		headers string
		status  int
	}{
		{"allowed", 1_000_000_000, "blocked", 200},
		{"allowed-with-fields", 1_000_000_000, "always", 200},
		{"blocked", 1, "blocked", 429},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p := benchProxy(b, rules.RuleConfig{Name: "per-ip", Limit: c.limit, Period: time.Minute, Headers: c.headers})
			req, _ := http.NewRequest("GET", "http://api.example.com/v1/items", nil)
			req.RemoteAddr = "203.0.113.9:41000"
			w := &nopWriter{h: make(http.Header)}
			p.ServeHTTP(w, req)
			p.ServeHTTP(w, req)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				clear(w.h)
				p.ServeHTTP(w, req)
			}
			if w.status != c.status {
				b.Fatalf("status %d, want %d", w.status, c.status)
			}
		})
	}
}

// benchProxy returns a Proxy answering api.example.com with a static
// response under rule r, on a clock that stands still.
func benchProxy(b testing.TB, r rules.RuleConfig) *Proxy {
	b.Helper()
	table, err := rules.Compile(rules.Config{
		Domains: []rules.DomainConfig{{
			Hosts:   []string{"api.example.com"},
			Respond: &rules.ResponseConfig{Body: "ok"},
			Rules:   []rules.RuleConfig{r},
		}},
	})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	p, err := New(Options{Table: table, Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	return p
}
