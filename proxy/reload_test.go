package proxy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func compile(t *testing.T, cfg rules.Config) *rules.Table {
	t.Helper()
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return table
}

func TestReloadCarriesCounters(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	kept := rule("kept", 3, time.Minute)
	raised := rule("raised", 3, time.Minute)
	rekeyed := rule("rekeyed", 3, time.Minute)
	penalty := rule("penalty", 3, time.Minute)
	penalty.MitigationTimeout = time.Hour
	gone := rule("gone", 3, time.Minute)
	cfg := oneDomain(origin.URL, kept, raised, rekeyed, penalty, gone)
	e := newEnv(t, cfg)
	for range 4 { // 3 allowed by every rule, then one blocked: penalty mitigates
		e.get("api.example.com", "/")
	}

	raised.Limit = 5
	rekeyed.Key = []string{"ip", "path"}
	cfg2 := oneDomain(origin.URL, kept, raised, rekeyed, penalty, rule("added", 3, time.Minute))
	res, err := e.proxy.Reload(compile(t, cfg2), "second")
	if err != nil {
		t.Fatal(err)
	}
	want := ReloadResult{
		Time: res.Time, Hash: "second",
		RulesAdded:   []string{"api.example.com/added"},
		RulesRemoved: []string{"api.example.com/gone"},
		RulesKept:    []string{"api.example.com/kept", "api.example.com/penalty"},
		RulesChanged: []string{"api.example.com/raised"},
		RulesReset:   []string{"api.example.com/rekeyed"},
		KeysCarried:  3,
	}
	if got, _ := json.Marshal(res); string(got) != mustJSON(want) {
		t.Errorf("Reload result:\n got %s\nwant %s", got, mustJSON(want))
	}
	// The client's counts survived: "kept" still refuses it, and so does
	// the mitigation of "penalty".
	resp, _ := e.get("api.example.com", "/")
	if resp.StatusCode != 429 {
		t.Fatalf("after reload: got %d, want 429 (counters must survive)", resp.StatusCode)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "3600" {
		t.Errorf("Retry-After = %s, want 3600 (the mitigation survives)", ra)
	}
	if testutil.ToFloat64(e.proxy.metrics.reloads.WithLabelValues("success")) != 1 {
		t.Errorf("edge_config_reloads_total{result=success} != 1")
	}
	// The removed rule's series are gone.
	if n := testutil.CollectAndCount(e.proxy.metrics.decisions); n != 5*3 {
		t.Errorf("decision series after reload = %d, want 15 (5 rules × 3 outcomes)", n)
	}
}

func TestReloadAtomicityUnderLoad(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	small := func(r rules.RuleConfig) rules.Config {
		cfg := oneDomain(origin.URL, r)
		cfg.MaxKeys = 10_000
		return cfg
	}
	e := newEnv(t, small(rule("per-ip", 1_000_000, time.Hour)))
	stop := make(chan struct{})
	failures := make(chan string, 100)
	done := make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := e.srv.Client().Do(mustRequest("GET", e.srv.URL+"/", "api.example.com"))
			if err != nil {
				failures <- err.Error()
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				failures <- resp.Status
			}
			n++
		}
	}()
	for i := range 100 {
		r := rule("per-ip", 1_000_000+i, time.Hour)
		if _, err := e.proxy.Reload(compile(t, small(r)), ""); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	n := <-done
	close(failures)
	for f := range failures {
		t.Errorf("request failed during reloads: %s", f)
	}
	t.Logf("%d requests across 100 reloads", n)
}

func TestReloadFailureKeepsRunningConfig(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	e := newEnv(t, oneDomain(origin.URL, rule("per-ip", 1, time.Minute)))
	e.proxy.ReloadFailed(errBad)
	if e.proxy.LastReloadError() != errBad {
		t.Errorf("LastReloadError = %v", e.proxy.LastReloadError())
	}
	if testutil.ToFloat64(e.proxy.metrics.reloadOK) != 0 || testutil.ToFloat64(e.proxy.metrics.reloads.WithLabelValues("failure")) != 1 {
		t.Errorf("failure not reflected in metrics")
	}
	if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != 200 {
		t.Errorf("after a failed reload: got %d, want 200", resp.StatusCode)
	}
}

var errBad = &rules.FieldError{Path: "domains[0].rules[0].limit", Msg: "must be at least 1, got 0"}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func mustRequest(method, url, host string) *http.Request {
	req, _ := http.NewRequest(method, url, nil)
	req.Host = host
	return req
}

// TestReloadWhatCounts: allow, count_status and response_cost_header take
// effect on reload; changing them keeps the rule's counters (the rule is
// reported changed, not reset).
func TestReloadWhatCounts(t *testing.T) {
	origin := newCostOrigin(t)
	r := rule("r", 2, time.Minute)
	e := newEnv(t, oneDomain(origin.URL, r))
	for range 2 {
		e.get("api.example.com", "/")
	}
	steps := []struct {
		name   string
		mutate func(r *rules.RuleConfig)
		want   int // status of the next request, from the test's 127.0.0.1
	}{
		{"allow the client", func(r *rules.RuleConfig) { r.Allow = &rules.AllowConfig{CIDRs: []string{"127.0.0.0/8"}} }, 200},
		{"allow others", func(r *rules.RuleConfig) { r.Allow = &rules.AllowConfig{CIDRs: []string{"10.0.0.0/8"}} }, 429},
		{"count_status", func(r *rules.RuleConfig) { r.Allow = nil; r.CountStatus = []int{401} }, 429},
		{"response_cost_header", func(r *rules.RuleConfig) { r.CountStatus = nil; r.ResponseCostHeader = "X-Edge-Cost" }, 429},
	}
	for _, s := range steps {
		s.mutate(&r)
		res, err := e.proxy.Reload(compile(t, oneDomain(origin.URL, r)), s.name)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !slices.Equal(res.RulesChanged, []string{"api.example.com/r"}) || res.KeysCarried != 1 {
			t.Errorf("%s: rules_changed %v, keys_carried %d; want [api.example.com/r], 1", s.name, res.RulesChanged, res.KeysCarried)
		}
		if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != s.want {
			t.Errorf("%s: next request got %d, want %d", s.name, resp.StatusCode, s.want)
		}
	}
}

// TestReloadPrecision: changing a rule's precision keeps its counters in
// both directions (the rule is reported changed): a key counted in a log
// carries its count as two counters, and takes a log again near its limit.
func TestReloadPrecision(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	r := rule("r", 4, time.Minute)
	r.Precision = "fine"
	e := newEnv(t, oneDomain(origin.URL, r))
	for range 4 {
		e.get("api.example.com", "/")
	}
	logs := func() float64 {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(storeCollector{e.proxy.metrics})
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "edge_window_fine_logs" && len(f.GetMetric()) == 1 {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no edge_window_fine_logs series")
		return 0
	}
	if got := logs(); got != 1 {
		t.Fatalf("edge_window_fine_logs = %v before the reload, want 1", got)
	}
	for _, p := range []string{"standard", "fine"} {
		r.Precision = p
		res, err := e.proxy.Reload(compile(t, oneDomain(origin.URL, r)), p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if !slices.Equal(res.RulesChanged, []string{"api.example.com/r"}) || res.KeysCarried != 1 {
			t.Errorf("to %s: rules_changed %v, keys_carried %d; want [api.example.com/r], 1", p, res.RulesChanged, res.KeysCarried)
		}
		resp, _ := e.get("api.example.com", "/")
		if resp.StatusCode != 429 {
			t.Errorf("to %s: next request got %d, want 429 (the count carried)", p, resp.StatusCode)
		}
		if ra := resp.Header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Errorf("to %s: Retry-After %q, want the window's wait", p, ra)
		}
	}
	if got := logs(); got != 1 {
		t.Errorf("edge_window_fine_logs = %v after reloading to fine, want 1: the key near its limit takes a log again", got)
	}
}

// TestConfigViewShowsPrecision: /v1/config shows a fine rule's precision,
// and none for a standard one.
func TestConfigViewShowsPrecision(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	fine := rule("fine", 5, time.Minute)
	fine.Precision = "fine"
	e := newEnv(t, oneDomain(origin.URL, rule("standard", 5, time.Minute), fine))
	w := httptest.NewRecorder()
	e.proxy.AdminHandler().ServeHTTP(w, httptest.NewRequest("GET", "/v1/config", nil))
	var cv configView
	if err := json.Unmarshal(w.Body.Bytes(), &cv); w.Code != 200 || err != nil {
		t.Fatalf("GET /v1/config: %d %v", w.Code, err)
	}
	if rs := cv.Domains[0].Rules; len(rs) != 2 || rs[0].Precision != "" || rs[1].Precision != "fine" {
		t.Errorf("rules in /v1/config: %+v, want no precision, then fine", rs)
	}
}
