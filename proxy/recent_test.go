package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// getStatusView reads GET /v1/status (with query q) from e's admin API.
func getStatusView(t *testing.T, e *env, q string) statusView {
	t.Helper()
	admin := httptest.NewServer(e.proxy.AdminHandler())
	defer admin.Close()
	resp, err := http.Get(admin.URL + "/v1/status" + q)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v statusView
	if err := json.Unmarshal(b, &v); resp.StatusCode != 200 || err != nil {
		t.Fatalf("GET /v1/status%s: %d %s (%v)", q, resp.StatusCode, b, err)
	}
	return v
}

// TestStatusFiguresMatchMetrics sends traffic between samples taken on an
// injected clock and checks that GET /v1/status shows, per second, what
// the counters /metrics exports rose by, and as totals their values.
func TestStatusFiguresMatchMetrics(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	cfg := oneDomain(origin.URL, rule("per-ip", 3, time.Minute))
	cfg.Domains = append(cfg.Domains, rules.DomainConfig{Name: "static", Hosts: []string{"static.example.com"},
		Respond: &rules.ResponseConfig{Status: 200, Body: "ok"}})
	e := newEnv(t, cfg)
	e.proxy.Record(e.clock.Now())
	for range 5 { // 3 allowed, 2 blocked
		e.get("api.example.com", "/")
	}
	e.clock.Advance(time.Second)
	e.proxy.Record(e.clock.Now())
	for range 4 { // 4 blocked, over 2 s
		e.get("api.example.com", "/")
	}
	e.get("static.example.com", "/")
	e.clock.Advance(2 * time.Second)
	e.proxy.Record(e.clock.Now())

	v := getStatusView(t, e, "")
	if v.Version != "test" || v.UptimeSeconds != 3 {
		t.Errorf("version %q uptime %v, want test and 3", v.Version, v.UptimeSeconds)
	}
	if len(v.Times) != 2 || len(v.Domains) != 2 {
		t.Fatalf("times %v, %d domains; want 2 intervals and 2 domains", v.Times, len(v.Domains))
	}
	api, static := v.Domains[0], v.Domains[1]
	tests := []struct {
		name string
		got  []float64
		want []float64
	}{
		{"served", api.Served, []float64{3, 0}},
		{"blocked", api.Blocked, []float64{2, 2}},
		{"upstream", api.Upstream, []float64{3, 0}},
		{"upstream errors", api.UpstreamErrors, []float64{0, 0}},
		{"rule allowed", api.Rules[0].Allowed, []float64{3, 0}},
		{"rule limited", api.Rules[0].Limited, []float64{2, 2}},
		{"static served", static.Served, []float64{0, 0.5}},
	}
	for _, tc := range tests {
		if !equalFloats(tc.got, tc.want) {
			t.Errorf("%s per second = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if api.UpstreamLatency[0] == nil || api.UpstreamLatency[1] != nil {
		t.Errorf("latency = %v, want a mean for the first second and null for the second", api.UpstreamLatency)
	}
	if static.Upstream == nil || len(static.Rules) != 0 {
		t.Errorf("static domain = %+v, want empty upstream figures and no rules", static)
	}
	// The totals are the counters' values as /metrics exports them.
	want := `
# HELP edge_requests_total Requests by domain and outcome: served (forwarded, answered by the domain's static response, or allowed by the check listener), blocked by a rate limit, unavailable (the rate limit store could not decide), bad_cost (a cost header a block rule cannot use), body_refused (413, 400 or 408 for the body), origin_failed (502), origin_timeout (504), origin_down (no origin server could be reached: 502, or when_down's status), origin_busy (503: every origin server was at its max_in_flight), shed (503 by load shedding), loop (508: the request came back to the node that forwarded it), redirect (308 to https by https_redirect), acme (an ACME server's HTTP-01 validation, answered by edge) or invalid_api_key (403: a missing or unknown API key where api_keys requires one).
# TYPE edge_requests_total counter
edge_requests_total{domain="api.example.com",outcome="bad_cost"} 0
edge_requests_total{domain="api.example.com",outcome="blocked"} 6
edge_requests_total{domain="api.example.com",outcome="body_refused"} 0
edge_requests_total{domain="api.example.com",outcome="loop"} 0
edge_requests_total{domain="api.example.com",outcome="origin_busy"} 0
edge_requests_total{domain="api.example.com",outcome="origin_down"} 0
edge_requests_total{domain="api.example.com",outcome="origin_failed"} 0
edge_requests_total{domain="api.example.com",outcome="origin_timeout"} 0
edge_requests_total{domain="api.example.com",outcome="served"} 3
edge_requests_total{domain="api.example.com",outcome="shed"} 0
edge_requests_total{domain="static",outcome="bad_cost"} 0
edge_requests_total{domain="static",outcome="blocked"} 0
edge_requests_total{domain="static",outcome="body_refused"} 0
edge_requests_total{domain="static",outcome="loop"} 0
edge_requests_total{domain="static",outcome="origin_busy"} 0
edge_requests_total{domain="static",outcome="origin_down"} 0
edge_requests_total{domain="static",outcome="origin_failed"} 0
edge_requests_total{domain="static",outcome="origin_timeout"} 0
edge_requests_total{domain="static",outcome="served"} 1
edge_requests_total{domain="static",outcome="shed"} 0
`
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(want), "edge_requests_total"); err != nil {
		t.Error(err)
	}
	r := api.Rules[0].Totals
	if api.Totals.Served != 3 || api.Totals.Blocked != 6 || static.Totals.Served != 1 ||
		r.Allowed != 3 || r.Limited != 6 || r.Mitigated != 0 {
		t.Errorf("totals = %+v, %+v, %+v; want the metrics' 3 served, 6 blocked; 1 served; 3 allowed, 6 limited",
			api.Totals, static.Totals, r)
	}
	got := testutil.ToFloat64(e.proxy.metrics.decisions.WithLabelValues("api.example.com", "per-ip", "block", "limited"))
	if got != r.Limited {
		t.Errorf("edge_rule_decisions_total limited = %v, /v1/status total %v", got, r.Limited)
	}
	if v := getStatusView(t, e, "?seconds=1"); len(v.Times) != 1 || !equalFloats(v.Domains[0].Blocked, []float64{2}) {
		t.Errorf("?seconds=1: times %v blocked %v, want the last interval only", v.Times, v.Domains[0].Blocked)
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestStatusRingBounded records more samples than the ring holds, with the
// clock going backwards once, and a reload that removes a rule.
func TestStatusRingBounded(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	e := newEnv(t, oneDomain(origin.URL, rule("per-ip", 1000, time.Minute), rule("gone", 1000, time.Minute)))
	for i := range recentSlots + 50 {
		if i%7 == 0 {
			e.get("api.example.com", "/")
		}
		e.clock.Advance(time.Second)
		e.proxy.Record(e.clock.Now())
	}
	before := getStatusView(t, e, "")
	e.proxy.Record(e.clock.Now().Add(-time.Second)) // ignored: not after the newest
	after := getStatusView(t, e, "")
	if len(after.Times) != recentSeconds || after.Times[len(after.Times)-1] != before.Times[len(before.Times)-1] {
		t.Errorf("got %d intervals ending %v, want %d ending %v", len(after.Times), after.Times[len(after.Times)-1],
			recentSeconds, before.Times[len(before.Times)-1])
	}
	var sum float64
	for _, v := range after.Domains[0].Served {
		sum += v
	}
	if sum < 42 || sum > 43 { // one request every 7 s over 300 s
		t.Errorf("sum of per-second served = %v over 300 s, want 42 or 43", sum)
	}
	table, err := rules.Compile(oneDomain(origin.URL, rule("per-ip", 1000, time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.proxy.Reload(table, "2"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	e.proxy.Record(e.clock.Now())
	if n := len(e.proxy.recent.domains["api.example.com"].rules); n != 1 {
		t.Errorf("ring holds %d rules after the reload, want 1", n)
	}
	if v := getStatusView(t, e, ""); len(v.Domains[0].Rules) != 1 || v.Domains[0].Rules[0].Name != "per-ip" {
		t.Errorf("rules after the reload = %+v, want per-ip only", v.Domains[0].Rules)
	}
}

func TestStatusQuery(t *testing.T) {
	e := newEnv(t, oneDomain("http://127.0.0.1:9", rule("r", 1, time.Minute)))
	admin := httptest.NewServer(e.proxy.AdminHandler())
	defer admin.Close()
	for _, q := range []string{"?seconds=0", "?seconds=301", "?seconds=x"} {
		resp, err := http.Get(admin.URL + "/v1/status" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("%s: status %d, want 400", q, resp.StatusCode)
		}
	}
	if v := getStatusView(t, e, ""); len(v.Times) != 0 || len(v.Domains) != 0 {
		t.Errorf("before any sample: %+v, want no figures", v)
	}
}

// TestRunRecorderStops checks that the recorder samples once a second and
// returns when its context ends.
func TestRunRecorderStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		table, err := rules.Compile(oneDomain("http://127.0.0.1:9", rule("r", 1, time.Minute)))
		if err != nil {
			t.Fatal(err)
		}
		p, err := New(Options{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.RunRecorder(ctx)
		}()
		time.Sleep(5*time.Second + time.Millisecond)
		synctest.Wait()
		p.recent.mu.Lock()
		n := p.recent.n
		p.recent.mu.Unlock()
		if n != 6 {
			t.Errorf("%d samples after 5 s, want 6 (one at start, one a second)", n)
		}
		cancel()
		<-done
	})
}

// TestStatusRingMemory pins the ring's memory that docs/operations.md states: fixed
// per domain and per rule, whatever the traffic.
func TestStatusRingMemory(t *testing.T) {
	d, r := unsafe.Sizeof(domainRing{}), unsafe.Sizeof(ruleRing{})
	t.Logf("ring of %d samples: %d bytes a domain, %d bytes a rule", recentSlots, d, r)
	if d != 7*recentSlots*8+8 || r != 3*recentSlots*8 {
		t.Errorf("domainRing %d bytes, ruleRing %d bytes; update docs/operations.md's figures", d, r)
	}
}

// BenchmarkRecord is one sample (RunRecorder takes one a second) of 10
// domains with 3 rules each.
func BenchmarkRecord(b *testing.B) {
	cfg := rules.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1", Origin: "http://127.0.0.1:9"}
	for i := range 10 {
		cfg.Domains = append(cfg.Domains, rules.DomainConfig{Name: fmt.Sprintf("d%d", i), Hosts: []string{fmt.Sprintf("d%d.example.com", i)},
			Rules: []rules.RuleConfig{rule("a", 10, time.Minute), rule("b", 10, time.Minute), rule("c", 10, time.Minute)}})
	}
	table, err := rules.Compile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	p, err := New(Options{Table: table, Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		p.Record(now)
	}
}

// TestStatusFallbackFigures: with Redis down, the requests decided
// without it are the status figures' fallback, as edge_store_fallback_
// requests_total counts them.
func TestStatusFallbackFigures(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	p := newNodes(t, 1, sharedConfig(srv.Addr, "exact", "closed", rule("per-ip", 5, time.Hour)), false)[0]
	start := time.Unix(1_800_000_000, 0)
	p.Record(start)
	for range 4 {
		hit(p, "198.51.100.9")
	}
	p.Record(start.Add(time.Second))
	admin := httptest.NewServer(p.AdminHandler())
	defer admin.Close()
	resp, err := http.Get(admin.URL + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v statusView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || len(v.Domains) != 1 {
		t.Fatalf("GET /v1/status: %v %+v", err, v)
	}
	d := v.Domains[0]
	if got := fallbacks(p); d.Totals.Fallback != float64(got) || got != 4 || !equalFloats(d.Fallback, []float64{4}) {
		t.Errorf("fallback total %v per second %v, metric %d; want 4 and [4]", d.Totals.Fallback, d.Fallback, got)
	}
}

// TestStatusRuleTerms: GET /v1/status shows each rule in its algorithm's
// own terms where the configuration alone cannot (a concurrency rule's
// slots in use now, a quota's next reset), and GET /v1/config every
// condition of a rule, with no period for a rule that has none.
func TestStatusRuleTerms(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(origin.Close)
	parallel := rules.RuleConfig{Name: "parallel", Limit: 4, Algorithm: "concurrency"}
	daily := rules.RuleConfig{Name: "daily", Limit: 1000, Algorithm: "quota", Reset: "daily", Timezone: "Europe/Berlin"}
	bucket := rules.RuleConfig{Name: "bucket", Limit: 20, Period: 10 * time.Second, Algorithm: "token_bucket", Burst: 40,
		CountStatus: []int{401, 403}, ResponseCostHeader: "X-Edge-Cost",
		Allow: &rules.AllowConfig{CIDRs: []string{"10.0.0.0/8", "192.0.2.1"}}}
	e := newEnv(t, oneDomain(origin.URL, parallel, daily, bucket))
	e.proxy.Record(e.clock.Now())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.get("api.example.com", "/slow")
	}()
	<-arrived
	defer func() { close(release); <-done }()
	e.clock.Advance(time.Second)
	e.proxy.Record(e.clock.Now())

	v := getStatusView(t, e, "")
	byName := map[string]ruleStatusView{}
	for _, r := range v.Domains[0].Rules {
		byName[r.Name] = r
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	now := e.clock.Now().In(berlin)
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, berlin).UTC()
	if got := byName["parallel"].SlotsInUse; got == nil || *got != 1 {
		t.Errorf("parallel's slots_in_use = %v, want 1 (one request held at the origin)", got)
	}
	if got := byName["daily"].ResetsAt; got == nil || !got.Equal(midnight) {
		t.Errorf("daily's resets_at = %v, want %v (the next midnight in Berlin)", got, midnight)
	}
	if r := byName["bucket"]; r.SlotsInUse != nil || r.ResetsAt != nil {
		t.Errorf("bucket shows slots_in_use %v, resets_at %v, want neither", r.SlotsInUse, r.ResetsAt)
	}

	rec := httptest.NewRecorder()
	e.proxy.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/config", nil))
	var raw struct {
		Domains []struct {
			Rules []map[string]any `json:"rules"`
		} `json:"domains"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	rs := raw.Domains[0].Rules
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"concurrency period", rs[0]["period"], nil},
		{"quota period", rs[1]["period"], nil},
		{"bucket period", rs[2]["period"], "10s"},
		{"burst", rs[2]["burst"], 40.0},
		{"count_status", fmt.Sprint(rs[2]["count_status"]), "[401 403]"},
		{"response_cost_header", rs[2]["response_cost_header"], "X-Edge-Cost"},
		{"allow", fmt.Sprint(rs[2]["allow"]), "[10.0.0.0/8 192.0.2.1/32]"},
		{"no allow", rs[0]["allow"], nil},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}
