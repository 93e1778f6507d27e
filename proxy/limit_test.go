package proxy

import (
	"net/http"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// TestAllowedRequestAllocatesNothing: with local counters, deciding and
// answering an allowed request allocates nothing, however many rules count
// it and whatever they are keyed by, though the client keys pass through
// the domain's window.Counter, an interface.
func TestAllowedRequestAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers")
	}
	tests := []struct {
		name  string
		rules []rules.RuleConfig
	}{
		{"one rule by ip", []rules.RuleConfig{{Name: "per-ip", Limit: 1_000_000_000, Period: time.Minute}}},
		{"three rules, header and path keys", []rules.RuleConfig{
			{Name: "per-ip", Limit: 1_000_000_000, Period: time.Minute},
			{Name: "per-token", Limit: 1_000_000_000, Period: time.Minute, Key: []string{"header:X-Api-Key"}},
			{Name: "per-path", Limit: 1_000_000_000, Period: time.Hour, Key: []string{"ip", "path"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := rules.Compile(rules.Config{Domains: []rules.DomainConfig{{
				Hosts:   []string{"api.example.com"},
				Respond: &rules.ResponseConfig{Body: "ok"},
				Rules:   tt.rules,
			}}})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1_800_000_000, 0)
			p, err := New(Options{Table: table, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			req, err := http.NewRequest("GET", "http://api.example.com/v1/items", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.RemoteAddr = "203.0.113.9:41000"
			req.Header.Set("X-Api-Key", "k-0123456789abcdef0123456789abcdef0123456789abcdef0123456789")
			w := &nopWriter{h: make(http.Header)}
			got := testing.AllocsPerRun(100, func() {
				clear(w.h)
				p.ServeHTTP(w, req)
			})
			if w.status != http.StatusOK {
				t.Fatalf("status %d, want 200", w.status)
			}
			if got != 0 {
				t.Errorf("allocations a request: got %v, want 0", got)
			}
		})
	}
}
