package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
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

func TestAdminAPI(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	penalty := rule("per-ip", 2, time.Minute)
	penalty.MitigationTimeout = 10 * time.Minute
	byKey := rule("per-key", 100, time.Minute)
	byKey.Key = []string{"header:X-Api-Key", "ip"}
	cfg := oneDomain(origin.URL, penalty, byKey)
	cfg.ClientIP.TrustedProxies = []string{"127.0.0.1/32"}
	e := newEnv(t, cfg)
	admin := httptest.NewServer(e.proxy.AdminHandler())
	t.Cleanup(admin.Close)
	call := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, admin.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	send := func(xff string, n int) {
		for range n {
			e.do("GET", "api.example.com", "/", map[string]string{"X-Forwarded-For": xff, "X-Api-Key": "k1"}, "")
		}
	}
	send("203.0.113.7", 5)  // 2 allowed, then mitigated
	send("198.51.100.1", 1) // light
	send("2001:db8:1:2::7", 3)

	code, body := call("GET", "/v1/keys/api.example.com/per-ip/203.0.113.7")
	var ks keyState
	if err := json.Unmarshal([]byte(body), &ks); code != 200 || err != nil {
		t.Fatalf("GET key: %d %s", code, body)
	}
	if ks.Current != 2 || ks.Remaining != 0 || ks.MitigatedUntil == nil || ks.RetryAfter != 600 {
		t.Errorf("key state = %+v, want 2 counted, mitigated for 600s", ks)
	}
	// IPv6 clients are keyed by their /64: any address inside it, or the
	// prefix, names the key.
	for _, k := range []string{"2001:db8:1:2::/64", "2001:db8:1:2::99"} {
		if code, body := call("GET", "/v1/keys/api.example.com/per-ip/"+k); code != 200 || !strings.Contains(body, `"current": 2`) {
			t.Errorf("GET IPv6 key %s: %d %s", k, code, body)
		}
	}
	if code, _ := call("GET", "/v1/keys/api.example.com/per-key/k1|203.0.113.7"); code != 200 {
		t.Errorf("GET two-part key: %d", code)
	}

	code, body = call("GET", "/v1/top/api.example.com/per-ip?n=2")
	var top []keyState
	if err := json.Unmarshal([]byte(body), &top); code != 200 || err != nil || len(top) != 2 {
		t.Fatalf("GET top: %d %s", code, body)
	}
	if top[0].Key != "203.0.113.7" || top[0].Count != 5 || top[0].Blocked != 3 || top[1].Key != "2001:db8:1:2::/64" {
		t.Errorf("top = %+v, want 203.0.113.7 (5 seen, 3 blocked) then 2001:db8:1:2::/64", top)
	}

	if code, _ := call("DELETE", "/v1/keys/api.example.com/per-ip/203.0.113.7"); code != 204 {
		t.Errorf("DELETE key: %d, want 204", code)
	}
	if resp, _ := e.do("GET", "api.example.com", "/", map[string]string{"X-Forwarded-For": "203.0.113.7"}, ""); resp.StatusCode != 200 {
		t.Errorf("after DELETE the client is still refused: %d", resp.StatusCode)
	}

	errorCases := []struct {
		method, path string
		want         int
	}{
		{"GET", "/v1/keys/nope.example/per-ip/1.2.3.4", 404},
		{"GET", "/v1/keys/api.example.com/nope/1.2.3.4", 404},
		{"GET", "/v1/keys/api.example.com/per-ip/192.0.2.1", 404}, // never seen
		{"DELETE", "/v1/keys/api.example.com/per-ip/192.0.2.1", 404},
		{"GET", "/v1/keys/api.example.com/per-ip/not-an-ip", 400},
		{"GET", "/v1/keys/api.example.com/per-key/only-one-part", 400},
		{"GET", "/v1/top/api.example.com/per-ip?n=0", 400},
		{"GET", "/v1/top/api.example.com/per-ip?n=x", 400},
		{"POST", "/v1/config", 405},
		{"GET", "/v1/nothing", 404},
	}
	for _, c := range errorCases {
		if code, body := call(c.method, c.path); code != c.want || !strings.Contains(body, `"error"`) {
			t.Errorf("%s %s: got %d %s, want %d with a JSON error", c.method, c.path, code, body, c.want)
		}
	}

	code, body = call("GET", "/v1/config")
	var cv configView
	if err := json.Unmarshal([]byte(body), &cv); code != 200 || err != nil {
		t.Fatalf("GET config: %d %v", code, err)
	}
	if len(cv.Domains) != 1 || len(cv.Domains[0].Rules) != 2 || !slices.Equal(cv.Domains[0].Rules[1].Key, []string{"header:X-Api-Key", "ip"}) {
		t.Errorf("config view = %+v", cv.Domains)
	}
	if cv.Hash != "" && !strings.Contains(body, `"last_load"`) {
		t.Errorf("config view lacks last_load")
	}
}

func TestTopTalkersBounded(t *testing.T) {
	top := newTopTalkers()
	s := newEnv(t, oneDomain("http://127.0.0.1:1", rule("r", 1, time.Minute))).proxy.state.Load().domains[0].store
	heavy := s.KeyString(0, "heavy")
	for i := range 100_000 {
		top.observe(s.KeyString(0, string(rune(i))), false, func() string { return "flood" })
		if i%10 == 0 {
			top.observe(heavy, true, func() string { return "heavy" })
		}
	}
	got := top.top(5)
	if len(top.heap.items) != topSize || len(top.index) != topSize {
		t.Fatalf("tracked %d keys, want the bound %d", len(top.heap.items), topSize)
	}
	if got[0].text != "heavy" || got[0].count < 10_000 || got[0].blocked != 10_000 {
		t.Errorf("top = %+v, want heavy first with ≥10000 counted and 10000 blocked", got[0])
	}
}
