package proxy

import (
	"fmt"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
)

func shareConfig(nodes int, split string, conf float64, r rules.RuleConfig) rules.Config {
	return rules.Config{
		Pop: "test", Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1",
		Cluster: rules.ClusterConfig{Sync: "share", Nodes: nodes, Split: split, SplitConfidence: conf},
		Domains: []rules.DomainConfig{{
			Name: "site", Hosts: []string{"site.test"},
			Respond: &rules.ResponseConfig{Body: "ok"},
			Rules:   []rules.RuleConfig{r},
		}},
	}
}

// TestShareSplitsEachLimit: with cluster.sync share a node allows a key
// its share of each limit, shows the PoP's limit in RateLimit-Policy and
// X-RateLimit-Limit and its own remaining share in r, and exports the
// share as edge_rule_node_share.
func TestShareSplitsEachLimit(t *testing.T) {
	tests := []struct {
		name   string
		cfg    rules.Config
		policy string
		share  int
	}{
		{"even, rounded up", shareConfig(3, "", 0, rules.RuleConfig{Name: "api", Limit: 10, Period: time.Hour, Headers: "always"}),
			`"api";q=10;w=3600`, 4},
		{"poisson 0.95 of 30 over 3 nodes", shareConfig(3, "poisson", 0, rules.RuleConfig{Name: "api", Algorithm: "fixed_window", Limit: 30, Period: time.Hour, Headers: "always"}),
			`"api";q=30;w=3600`, 15},
		{"poisson capped at the limit", shareConfig(2, "poisson", 0.99, rules.RuleConfig{Name: "api", Limit: 1, Period: time.Minute, Headers: "always"}),
			`"api";q=1;w=60`, 1},
		{"one node keeps the limit", shareConfig(1, "even", 0, rules.RuleConfig{Name: "plan", Algorithm: "quota", Limit: 5, Reset: "daily", Headers: "always"}),
			`"plan";q=5`, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			p, err := New(Options{Table: compile(t, tt.cfg), Registerer: reg, Version: "test",
				Now: func() time.Time { return time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC) }})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			limit := tt.cfg.Domains[0].Rules[0].Limit
			for i := 0; i <= tt.share; i++ {
				req := httptest.NewRequest("GET", "http://site.test/", nil)
				req.RemoteAddr = "192.0.2.80:40000"
				w := httptest.NewRecorder()
				p.ServeHTTP(w, req)
				want := 200
				if i == tt.share {
					want = 429
				}
				if w.Code != want {
					t.Fatalf("request %d: got %d, want %d", i+1, w.Code, want)
				}
				if got := w.Header().Get("RateLimit-Policy"); got != tt.policy {
					t.Errorf("request %d: RateLimit-Policy %q, want %q", i+1, got, tt.policy)
				}
				remaining := max(tt.share-i-1, 0)
				if got, want := w.Header().Get("X-RateLimit-Remaining"), strconv.Itoa(remaining); got != want {
					t.Errorf("request %d: X-RateLimit-Remaining %q, want %q", i+1, got, want)
				}
				if got, want := w.Header().Get("X-RateLimit-Limit"), strconv.Itoa(limit); got != want {
					t.Errorf("request %d: X-RateLimit-Limit %q, want %q", i+1, got, want)
				}
				if got, want := w.Header().Get("RateLimit"), fmt.Sprintf(`"%s";r=%d;`, tt.cfg.Domains[0].Rules[0].Name, remaining); !strings.HasPrefix(got, want) {
					t.Errorf("request %d: RateLimit %q, want it to start %q", i+1, got, want)
				}
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatalf("Gather: %v", err)
			}
			var got []float64
			for _, mf := range mfs {
				if mf.GetName() == "edge_rule_node_share" {
					for _, m := range mf.GetMetric() {
						got = append(got, m.GetGauge().GetValue())
					}
				}
			}
			if want := []float64{float64(tt.share)}; !slices.Equal(got, want) {
				t.Errorf("edge_rule_node_share = %v, want %v", got, want)
			}
		})
	}
}

// TestShareKeepsStartedSplitOnReload: the cluster keys need a restart, so a
// reload that changes nodes keeps the share edge started with and lists
// cluster.nodes under restart_required.
func TestShareKeepsStartedSplitOnReload(t *testing.T) {
	rule := rules.RuleConfig{Name: "api", Limit: 10, Period: time.Hour}
	reg := prometheus.NewRegistry()
	p, err := New(Options{Table: compile(t, shareConfig(2, "", 0, rule)), Registerer: reg, Version: "test"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	res, err := p.Reload(compile(t, shareConfig(5, "", 0, rule)), "h2")
	if err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if !slices.Equal(res.RestartRequired, []string{"cluster.nodes"}) {
		t.Errorf("restart_required: got %q, want [cluster.nodes]", res.RestartRequired)
	}
	if got := p.state.Load().domains[0].rules[0].share; got != 5 {
		t.Errorf("share after the reload: got %d, want 5 (10 over the 2 nodes edge started with)", got)
	}
}

// nodeShareMetric is p's edge_rule_node_share of the one rule of its
// domain, read through registry reg.
func nodeShareMetric(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "edge_rule_node_share" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no edge_rule_node_share")
	return 0
}

// TestShareOverRedis: with cluster.sync share and store redis, the node
// count comes from the heartbeats: a node alone allows a key the whole
// limit; once a second node's heartbeat appears each node allows a new key
// its even split of two, with the PoP's limit in RateLimit-Policy and the
// node's remaining share in r; no request waits for Redis, which sees no
// round trip but heartbeats.
func TestShareOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := sharedConfig(srv.Addr, "share", "", rules.RuleConfig{Name: "api", Limit: 10, Period: time.Hour, Headers: "always"})
	table := compile(t, cfg)
	regs := make([]*prometheus.Registry, 2)
	ps := make([]*Proxy, 2)
	start := func(i int) {
		regs[i] = prometheus.NewRegistry()
		var err error
		ps[i], err = New(Options{Table: table, Registerer: regs[i], Version: "test", Node: "node" + strconv.Itoa(i)})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { ps[i].Close() })
	}
	// through sends requests of client ip to node i until one is refused
	// and returns how many got through, checking their fields.
	through := func(i int, ip string) int {
		for n := range 11 {
			w, _ := hit(ps[i], ip)
			if got, want := w.Header().Get("RateLimit-Policy"), `"api";q=10;w=3600`; got != want {
				t.Errorf("node %d: RateLimit-Policy %q, want %q", i, got, want)
			}
			if w.Code == 429 {
				return n
			}
			share := int(nodeShareMetric(t, regs[i]))
			if got, want := w.Header().Get("RateLimit"), fmt.Sprintf(`"api";r=%d;`, share-n-1); !strings.HasPrefix(got, want) {
				t.Errorf("node %d, request %d: RateLimit %q, want it to start %q", i, n+1, got, want)
			}
		}
		return 11
	}
	start(0)
	wait.For(t, 2*time.Second, "node 0 registered", func() bool { return ps[0].cluster.Nodes() == 1 && roundTrips(t, ps[0], "heartbeat") > 0 })
	if got := nodeShareMetric(t, regs[0]); got != 10 {
		t.Errorf("node 0 alone: edge_rule_node_share %v, want 10", got)
	}
	if got := through(0, "192.0.2.1"); got != 10 {
		t.Errorf("node 0 alone let a key through %d times, want 10", got)
	}
	start(1)
	for i := range ps {
		wait.For(t, 2*time.Second, "both nodes' shares split", func() bool { return nodeShareMetric(t, regs[i]) == 5 })
	}
	for i := range ps {
		if got := through(i, "192.0.2.2"); got != 5 {
			t.Errorf("node %d of 2 let a new key through %d times, want 5", i, got)
		}
		for _, op := range []string{"decide", "refund", "charge", "flush"} {
			if n := roundTrips(t, ps[i], op); n != 0 {
				t.Errorf("node %d made %d %s round trips to Redis, want none", i, n, op)
			}
		}
	}
}
