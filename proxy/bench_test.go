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
	// The client is not in the default accuracy sample (1 in 1000); the
	// -sampled cases sample every key, -unsampled ones turn it off.
	cases := []struct {
		name    string
		limit   int
		headers string
		status  int
		sample  int // accuracy_sample; 0: the default
	}{
		{"allowed", 1_000_000_000, "blocked", 200, 0},
		{"allowed-with-fields", 1_000_000_000, "always", 200, 0},
		{"blocked", 1, "blocked", 429, 0},
		{"allowed-sample-off", 1_000_000_000, "blocked", 200, -1},
		{"allowed-sampled", 1_000_000_000, "blocked", 200, 1},
		{"blocked-sampled", 1, "blocked", 429, 1},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p := benchProxy(b, rules.RuleConfig{Name: "per-ip", Limit: c.limit, Period: time.Minute, Headers: c.headers}, c.sample)
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
//
// sample is accuracy_sample: 0 leaves the default, -1 turns it off.
func benchProxy(b testing.TB, r rules.RuleConfig, sample int) *Proxy {
	b.Helper()
	return benchProxyFor(b, r, sample, nil)
}

// benchProxyJWT is benchProxy's proxy verifying tokens as jwt says.
func benchProxyJWT(b testing.TB, r rules.RuleConfig, jwt *rules.JWTConfig) *Proxy {
	b.Helper()
	return benchProxyFor(b, r, 0, jwt)
}

func benchProxyFor(b testing.TB, r rules.RuleConfig, sample int, jwt *rules.JWTConfig) *Proxy {
	cfg := rules.Config{
		Domains: []rules.DomainConfig{{
			Hosts:   []string{"api.example.com"},
			Respond: &rules.ResponseConfig{Body: "ok"},
			Rules:   []rules.RuleConfig{r},
			JWT:     jwt,
		}},
	}
	if sample != 0 {
		cfg.AccuracySample = max(sample, 0)
		cfg.Given = map[string]bool{"accuracy_sample": true}
	}
	table, err := rules.Compile(cfg)
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
