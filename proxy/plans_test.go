package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// plansConfig is a domain whose clients are known by X-API-Key: the file
// (keys) puts each on a plan; rule "rate" allows 1 a minute, 3 on plan
// gold.
func plansConfig(origin string, keys map[string]string, required bool) rules.Config {
	r := rule("rate", 1, time.Minute)
	r.Key = []string{"header:X-API-Key"}
	r.Plans = map[string]rules.PlanConfig{"gold": {Limit: 3}}
	cfg := oneDomain(origin, r)
	cfg.Domains[0].APIKeys = &rules.APIKeysConfig{From: "header:X-API-Key", File: "keys.yaml", Required: required, Keys: keys}
	return cfg
}

func (e *env) withKey(key string) (*http.Response, string) {
	e.t.Helper()
	hdr := map[string]string{}
	if key != "" {
		hdr["X-API-Key"] = key
	}
	return e.do("GET", "api.example.com", "/", hdr, "")
}

// TestPlansFromFile: a key's plan replaces the rule's values; a plan the
// rule does not list uses the rule's own, on counters of its own; a
// missing or unknown key is refused 403 where a key is required, counted,
// and never forwarded; decisions are counted by plan, plans the config
// does not name as "other".
func TestPlansFromFile(t *testing.T) {
	origin, seen := newOrigin(t, "a")
	e := newEnv(t, plansConfig(origin.URL, map[string]string{"k-gold": "Gold", "k-free": "free"}, true))
	steps := []struct{ key, want string }{
		{"k-gold", "200 200 200 429"},
		{"k-free", "200 429"},
		{"", "403"},
		{"k-unknown", "403"},
	}
	for _, s := range steps {
		var got []string
		for range strings.Count(s.want, " ") + 1 {
			resp, body := e.withKey(s.key)
			got = append(got, fmt.Sprint(resp.StatusCode))
			if resp.StatusCode == 403 && (body != `{"error":"invalid_api_key"}`+"\n" || resp.Header.Get("Content-Type") != "application/json") {
				t.Errorf("key %q: 403 %q (%s), want the invalid_api_key JSON", s.key, body, resp.Header.Get("Content-Type"))
			}
		}
		if g := strings.Join(got, " "); g != s.want {
			t.Errorf("key %q: got %s, want %s", s.key, g, s.want)
		}
	}
	if n := len(seen()); n != 4 {
		t.Errorf("origin saw %d requests, want 4 (none refused, none without a valid key)", n)
	}
	m := e.proxy.metrics
	for _, c := range []struct {
		plan, outcome string
		want          float64
	}{{"gold", "allowed", 3}, {"gold", "limited", 1}, {"other", "allowed", 1}, {"other", "limited", 1}} {
		if got := testutil.ToFloat64(m.planDecisions.WithLabelValues("api.example.com", "rate", c.plan, c.outcome)); got != c.want {
			t.Errorf("edge_plan_decisions_total{plan=%q,outcome=%q} = %v, want %v", c.plan, c.outcome, got, c.want)
		}
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("api.example.com", "invalid_api_key")); got != 2 {
		t.Errorf(`edge_requests_total{outcome="invalid_api_key"} = %v, want 2`, got)
	}
}

// TestPlansNotRequired: without required, a request without a key (or
// with an unknown one) is counted by the rule's own values.
func TestPlansNotRequired(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	e := newEnv(t, plansConfig(origin.URL, map[string]string{"k-gold": "gold"}, false))
	var got []int
	for _, key := range []string{"", "", "k-unknown", "k-unknown", "k-gold"} {
		resp, _ := e.withKey(key)
		got = append(got, resp.StatusCode)
	}
	if fmt.Sprint(got) != "[200 429 200 429 200]" {
		t.Errorf("got %v, want [200 429 200 429 200]", got)
	}
}

// TestPlanFromPart: plan_from reads the plan from another key part (a
// header here; a token's claim, jwt:plan, reads the same way) for keys
// the file does not list; the file wins for those it lists.
func TestPlanFromPart(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	cfg := plansConfig(origin.URL, map[string]string{"k-listed": "free"}, true)
	cfg.Domains[0].APIKeys.PlanFrom = "header:X-Plan"
	e := newEnv(t, cfg)
	do := func(key, plan string) int {
		resp, _ := e.do("GET", "api.example.com", "/", map[string]string{"X-API-Key": key, "X-Plan": plan}, "")
		return resp.StatusCode
	}
	var got []int
	for range 4 {
		got = append(got, do("k-claimed", "GOLD"))
	}
	for range 2 {
		got = append(got, do("k-listed", "gold")) // the file says free
	}
	got = append(got, do("k-none", ""))
	if fmt.Sprint(got) != "[200 200 200 429 200 429 403]" {
		t.Errorf("got %v, want [200 200 200 429 200 429 403]", got)
	}
}

// TestPlanChangeStartsAfresh: a key moved to another plan by a reload
// counts on that plan's counters from zero; the plan's own counters are
// carried across a reload that keeps it.
func TestPlanChangeStartsAfresh(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	e := newEnv(t, plansConfig(origin.URL, map[string]string{"k": "gold"}, true))
	for range 3 {
		e.withKey("k")
	}
	if resp, _ := e.withKey("k"); resp.StatusCode != 429 {
		t.Fatalf("gold after 3: got %d, want 429", resp.StatusCode)
	}
	if _, err := e.proxy.Reload(compile(t, plansConfig(origin.URL, map[string]string{"k": "gold", "k2": "gold"}, true)), "h2"); err != nil {
		t.Fatal(err)
	}
	if resp, _ := e.withKey("k"); resp.StatusCode != 429 {
		t.Errorf("gold after a reload that keeps it: got %d, want 429 (counters carried)", resp.StatusCode)
	}
	if _, err := e.proxy.Reload(compile(t, plansConfig(origin.URL, map[string]string{"k": "silver"}, true)), "h3"); err != nil {
		t.Fatal(err)
	}
	if resp, _ := e.withKey("k"); resp.StatusCode != 200 {
		t.Errorf("moved to silver: got %d, want 200 (afresh)", resp.StatusCode)
	}
	// Two plans the rule does not list both use its own values, on
	// counters of their own.
	if _, err := e.proxy.Reload(compile(t, plansConfig(origin.URL, map[string]string{"k": "bronze"}, true)), "h4"); err != nil {
		t.Fatal(err)
	}
	if resp, _ := e.withKey("k"); resp.StatusCode != 200 {
		t.Errorf("moved from silver to bronze: got %d, want 200 (afresh)", resp.StatusCode)
	}
}

// TestPlansCheckListener: the check listener refuses a missing key with
// its deny_status.
func TestPlansCheckListener(t *testing.T) {
	cfg := checkTestConfig(401)
	cfg.Domains[0].APIKeys = &rules.APIKeysConfig{From: "header:X-API-Key", File: "keys.yaml", Required: true, Keys: map[string]string{"k": "gold"}}
	e := newCheckEnv(t, cfg)
	hdr := traefik("GET", "api.example.com", "/", "203.0.113.7")
	if resp, _ := e.ask(hdr); resp.StatusCode != 401 {
		t.Errorf("no key: got %d, want deny_status 401", resp.StatusCode)
	}
	hdr.Set("X-API-Key", "k")
	if resp, _ := e.ask(hdr); resp.StatusCode != 200 {
		t.Errorf("a listed key: got %d, want 200", resp.StatusCode)
	}
}

// TestSharedPlans: through Redis (exact), a plan's limit is the PoP's, each
// plan on counters of its own: two nodes let a gold key through 3 times in
// all, and the same key on a plan the rule does not list once more.
func TestSharedPlans(t *testing.T) {
	srv := redistest.Start(t)
	r := rule("per-key", 1, time.Hour)
	r.Key = []string{"header:X-API-Key"}
	r.Plans = map[string]rules.PlanConfig{"gold": {Limit: 3}}
	cfg := sharedConfig(srv.Addr, "exact", "closed", r)
	cfg.Domains[0].APIKeys = &rules.APIKeysConfig{From: "header:X-API-Key", PlanFrom: "header:X-Plan"}
	ps := newNodes(t, 2, cfg, true)
	send := func(i int, plan string) int {
		req := httptest.NewRequest("GET", "http://site.test/", nil)
		req.RemoteAddr = "198.51.100.7:40000"
		req.Header.Set("X-API-Key", "k")
		req.Header.Set("X-Plan", plan)
		w := httptest.NewRecorder()
		ps[i%2].ServeHTTP(w, req)
		return w.Code
	}
	var got []int
	for i := range 4 {
		got = append(got, send(i, "gold"))
	}
	for i := range 2 {
		got = append(got, send(i, "silver"))
	}
	if fmt.Sprint(got) != "[200 200 200 429 200 429]" {
		t.Errorf("got %v, want [200 200 200 429 200 429]", got)
	}
	for i, p := range ps {
		if n := fallbacks(p); n != 0 {
			t.Errorf("node %d decided %d requests without redis", i, n)
		}
	}
}
