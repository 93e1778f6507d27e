package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
		{"allow lists, one holding the client", []rules.RuleConfig{
			{Name: "outside", Limit: 1_000_000_000, Period: time.Minute, Allow: &rules.AllowConfig{CIDRs: []string{"10.0.0.0/8", "2001:db8::/32"}}},
			{Name: "inside", Limit: 1_000_000_000, Period: time.Minute, Allow: &rules.AllowConfig{CIDRs: []string{"203.0.113.0/24"}}},
		}},
		{"buckets and a window, priced by a header", []rules.RuleConfig{
			{Name: "tb", Algorithm: "token_bucket", Limit: 1_000_000_000, Period: time.Minute, CostHeader: "X-Cost", MaxCost: 10},
			{Name: "lb", Algorithm: "leaky_bucket", Limit: 1_000_000_000, Period: time.Minute, Burst: 1000},
			{Name: "fw", Algorithm: "fixed_window", Limit: 1_000_000_000, Period: time.Minute, CostHeader: "X-Cost", MaxCost: 10},
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
			req.Header.Set("X-Cost", "3")
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

func TestRuleMatching(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	writes := rule("writes", 1, time.Minute)
	writes.Match = &rules.MatchConfig{PathPrefix: "/v1/", Methods: []string{"POST"}}
	e := newEnv(t, oneDomain(origin.URL, writes))
	// Reads and other paths are never limited.
	for range 5 {
		if resp, _ := e.get("api.example.com", "/v1/x"); resp.StatusCode != 200 {
			t.Fatalf("GET /v1/x: got %d, want 200", resp.StatusCode)
		}
		if resp, _ := e.do("POST", "api.example.com", "/v2/x", nil, ""); resp.StatusCode != 200 {
			t.Fatalf("POST /v2/x: got %d, want 200", resp.StatusCode)
		}
	}
	if resp, _ := e.do("POST", "api.example.com", "/v1/x", nil, ""); resp.StatusCode != 200 {
		t.Fatalf("first POST /v1/x: got %d, want 200", resp.StatusCode)
	}
	// Path tricks normalise to the prefix and are limited too, or are
	// refused (dot segments: see screen.go).
	for p, want := range map[string]int{"/v1/x": 429, "//v1/x": 429, "/v2/../v1/x": 400, "/./v1/x": 400} {
		if resp, _ := e.do("POST", "api.example.com", p, nil, ""); resp.StatusCode != want {
			t.Errorf("POST %s: got %d, want %d", p, resp.StatusCode, want)
		}
	}
}

func TestBlockedRequestsUseNoQuota(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	// "wide" would allow 10 a minute, "narrow" 2. While narrow blocks, wide
	// must not be charged: after narrow's window slides, wide still has
	// room for its full limit minus what was really forwarded.
	e := newEnv(t, oneDomain(origin.URL, rule("wide", 10, time.Hour), rule("narrow", 2, time.Minute)))
	forwarded := 0
	for range 50 {
		if resp, _ := e.get("api.example.com", "/"); resp.StatusCode == 200 {
			forwarded++
		}
	}
	if forwarded != 2 {
		t.Fatalf("forwarded %d, want 2", forwarded)
	}
	e.clock.Advance(2 * time.Minute)
	for range 50 {
		if resp, _ := e.get("api.example.com", "/"); resp.StatusCode == 200 {
			forwarded++
		}
	}
	if forwarded != 4 {
		t.Fatalf("forwarded %d after narrow's window slid, want 4 (wide must not have counted blocked requests)", forwarded)
	}
	if got := testutil.ToFloat64(e.proxy.metrics.decisions.WithLabelValues("api.example.com", "wide", "block", "allowed")); got != 100 {
		t.Errorf("wide allowed decisions = %v, want 100", got)
	}
}

func TestCountBlockedAndMitigation(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	counting := rule("counting", 2, 10*time.Second)
	counting.CountBlocked = true
	e := newEnv(t, oneDomain(origin.URL, counting))
	for range 20 {
		e.get("api.example.com", "/")
	}
	// 20 counted in the first period: the estimate stays ≥ 2 until
	// 20×(10−e)/10 < 2, e > 9s into the next period.
	e.clock.Advance(18 * time.Second)
	if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != 429 {
		t.Errorf("count_blocked: got %d at 18s, want 429", resp.StatusCode)
	}

	mitigated := rule("penalty", 1, 10*time.Second)
	mitigated.MitigationTimeout = time.Hour
	e = newEnv(t, oneDomain(origin.URL, mitigated))
	e.get("api.example.com", "/")
	resp, _ := e.get("api.example.com", "/")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3600" {
		t.Fatalf("mitigation start: got %d Retry-After %q, want 429 3600", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	e.clock.Advance(30 * time.Minute)
	resp, _ = e.get("api.example.com", "/")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1800" {
		t.Fatalf("mid-mitigation: got %d Retry-After %q, want 429 1800", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if got := testutil.ToFloat64(e.proxy.metrics.decisions.WithLabelValues("api.example.com", "penalty", "block", "mitigated")); got != 2 {
		t.Errorf("mitigated decisions = %v, want 2", got)
	}
}

func TestLogActionNeverBlocks(t *testing.T) {
	origin, got := newOrigin(t, "a")
	shadow := rule("shadow", 2, time.Minute)
	shadow.Action = "log"
	e := newEnv(t, oneDomain(origin.URL, shadow))
	for range 10 {
		if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != 200 {
			t.Fatalf("log rule blocked: got %d", resp.StatusCode)
		}
	}
	if n := len(got()); n != 10 {
		t.Errorf("origin saw %d, want 10", n)
	}
	m := e.proxy.metrics.decisions
	if a, l := testutil.ToFloat64(m.WithLabelValues("api.example.com", "shadow", "log", "allowed")),
		testutil.ToFloat64(m.WithLabelValues("api.example.com", "shadow", "log", "limited")); a != 2 || l != 8 {
		t.Errorf("log rule decisions: allowed %v limited %v, want 2 and 8 (as a block rule would count)", a, l)
	}
}

func TestHeaderKeys(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	byKey := rule("per-key", 1, time.Minute)
	byKey.Key = []string{"header:X-Api-Key"}
	e := newEnv(t, oneDomain(origin.URL, byKey))
	key := func(k string) map[string]string {
		if k == "" {
			return nil
		}
		return map[string]string{"X-Api-Key": k}
	}
	steps := []struct {
		key  string
		want int
	}{
		{"alpha", 200}, {"alpha", 429}, {"beta", 200},
		// No header: keyed by the client address, apart from any header
		// value — the first request passes, the second is limited.
		{"", 200}, {"", 429},
		// A header value equal to an address is its own key.
		{"127.0.0.1", 200},
	}
	for i, s := range steps {
		if resp, _ := e.do("GET", "api.example.com", "/", key(s.key), ""); resp.StatusCode != s.want {
			t.Errorf("step %d (key %q): got %d, want %d", i, s.key, resp.StatusCode, s.want)
		}
	}
}

func TestEmptyHeaderKeyIsNotSharedBucket(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	byKey := rule("per-key", 1, time.Minute)
	byKey.Key = []string{"header:X-Api-Key"}
	cfg := oneDomain(origin.URL, byKey)
	cfg.ClientIP.TrustedProxies = []string{"127.0.0.1/32"}
	e := newEnv(t, cfg)
	// Four clients behind a trusted proxy send an empty key: each is limited
	// on its own address, none shares a bucket with the others.
	for i := range 4 {
		hdr := map[string]string{"X-Api-Key": " ", "X-Forwarded-For": fmt.Sprintf("203.0.113.%d", i+1)}
		if resp, _ := e.do("GET", "api.example.com", "/", hdr, ""); resp.StatusCode != 200 {
			t.Errorf("client %d with an empty key: got %d, want 200", i, resp.StatusCode)
		}
	}
}

// TestDomainFloodCannotEvictAnotherDomain: each domain counts in its own
// share of max_keys, so a flood of new clients on one domain leaves the
// counters of another untouched.
func TestDomainFloodCannotEvictAnotherDomain(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	cfg := rules.Config{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1",
		Origin:   origin.URL,
		MaxKeys:  200,
		ClientIP: rules.ClientIPConfig{TrustedProxies: []string{"127.0.0.1/32"}},
		Domains: []rules.DomainConfig{
			{Hosts: []string{"flooded.test"}, Rules: []rules.RuleConfig{rule("per-ip", 1, time.Minute)}},
			{Hosts: []string{"quiet.test"}, Rules: []rules.RuleConfig{rule("per-ip", 1, time.Minute)}},
		},
	}
	e := newEnv(t, cfg)
	quiet := func() int {
		resp, _ := e.do("GET", "quiet.test", "/", map[string]string{"X-Forwarded-For": "198.51.100.1"}, "")
		return resp.StatusCode
	}
	if got := quiet(); got != 200 {
		t.Fatalf("quiet client's first request: got %d, want 200", got)
	}
	for i := range 2000 {
		xff := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		e.do("GET", "flooded.test", "/", map[string]string{"X-Forwarded-For": xff}, "")
	}
	if got := quiet(); got != 429 {
		t.Errorf("quiet client after the flood on another domain: got %d, want 429 (its counter must survive)", got)
	}
	want := `
# HELP edge_tracked_keys Keys whose counters a domain holds now.
# TYPE edge_tracked_keys gauge
edge_tracked_keys{domain="flooded.test"} 100
edge_tracked_keys{domain="quiet.test"} 1
`
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(want), "edge_tracked_keys"); err != nil {
		t.Error(err)
	}
}

// TestAllowExemptsClients: a rule's allow list exempts the clients in it,
// by their address as edge derives it (X-Forwarded-For only from a trusted
// proxy), from that rule alone: another rule still counts and refuses them.
func TestAllowExemptsClients(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	office := rule("office-exempt", 1, time.Minute)
	office.Allow = &rules.AllowConfig{CIDRs: []string{"10.0.0.0/8", "2001:db8::/32", "198.51.100.7"}}
	cfg := oneDomain(origin.URL, office, rule("everyone", 3, time.Minute))
	cfg.ClientIP.TrustedProxies = []string{"192.0.2.10", "2001:db8:ffff::/48"}
	tests := []struct {
		name       string
		remoteAddr string
		xff        string
		want       []int // statuses of successive requests
		exempt     bool  // office-exempt decided none of them
	}{
		{"IPv4 in range", "10.1.2.3:4000", "", []int{200, 200, 200, 429}, true},
		{"IPv4 bare address", "198.51.100.7:4000", "", []int{200, 200, 200, 429}, true},
		{"IPv4 outside", "203.0.113.5:4000", "", []int{200, 429}, false},
		{"IPv4-mapped peer in range", "[::ffff:10.0.0.7]:4000", "", []int{200, 200, 200, 429}, true},
		{"IPv6 in range", "[2001:db8:1::5]:4000", "", []int{200, 200, 200, 429}, true},
		{"IPv6 outside", "[2001:db9::5]:4000", "", []int{200, 429}, false},
		{"trusted proxy, client in range", "192.0.2.10:4000", "10.9.9.9", []int{200, 200, 200, 429}, true},
		{"trusted IPv6 proxy, IPv6 client in range", "[2001:db8:ffff::1]:4000", "2001:db8:2::1", []int{200, 200, 200, 429}, true},
		{"trusted proxy, client outside", "192.0.2.10:4000", "10.9.9.9, 203.0.113.77", []int{200, 429}, false},
		// A client in range is still limited by the proxy's prefix when it
		// names itself: the header is not believed from an untrusted peer.
		{"untrusted peer claims a client in range", "203.0.113.8:4000", "10.9.9.9", []int{200, 429}, false},
		// The proxy itself is in range only if the list says so: here it
		// forwards a client outside.
		{"trusted proxy in range forwarding client outside", "[2001:db8:ffff::1]:4000", "203.0.113.9", []int{200, 429}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(Options{Table: compile(t, cfg), Registerer: prometheus.NewRegistry(), Now: newClock().Now})
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for range tt.want {
				req := httptest.NewRequest("GET", "http://api.example.com/", nil)
				req.RemoteAddr = tt.remoteAddr
				if tt.xff != "" {
					req.Header.Set("X-Forwarded-For", tt.xff)
				}
				w := httptest.NewRecorder()
				p.ServeHTTP(w, req)
				got = append(got, w.Code)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("statuses: got %v, want %v", got, tt.want)
			}
			m := p.metrics.decisions
			decided := testutil.ToFloat64(m.WithLabelValues("api.example.com", "office-exempt", "block", "allowed")) +
				testutil.ToFloat64(m.WithLabelValues("api.example.com", "office-exempt", "block", "limited"))
			if exempt := decided == 0; exempt != tt.exempt {
				t.Errorf("office-exempt decided %v requests: got exempt %v, want %v", decided, exempt, tt.exempt)
			}
			if everyone := testutil.ToFloat64(m.WithLabelValues("api.example.com", "everyone", "block", "allowed")); everyone == 0 {
				t.Errorf("everyone allowed none: the other rule must still count")
			}
		})
	}
}
