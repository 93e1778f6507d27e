package proxy

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, wherever the tests run

	"github.com/edgerate/edge/rules"
)

// quotaRule is a quota of limit per reset in zone, with its fields on
// every response.
func quotaRule(name string, limit int, reset, zone string) rules.RuleConfig {
	r := rule(name, limit, 0)
	r.Algorithm, r.Reset, r.Timezone, r.Headers = "quota", reset, zone, "always"
	return r
}

// TestQuotaSequence spends a monthly quota in Berlin an hour before the
// month ends: refusals say the quota is used up, wait exactly to the
// local midnight (refused 1ns before it, allowed at it), and the new
// month's reset is its full length away.
func TestQuotaSequence(t *testing.T) {
	const ns = time.Nanosecond
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	origin, _ := newOrigin(t, "a")
	e := newEnv(t, oneDomain(origin.URL, quotaRule("q", 2, "monthly", "Europe/Berlin")))
	// 23:00 on 31 October, after the clocks went back on the 25th.
	e.clock.ns.Store(time.Date(2026, 10, 31, 23, 0, 0, 0, berlin).UnixNano())
	november := 30 * 24 * 3600
	runSteps(t, e, []step{
		{at: 0, status: 200, rateLimit: `"q";r=1;t=3600`, remaining: "1"},
		{at: 0, status: 200, rateLimit: `"q";r=0;t=3600`},
		{at: 0, status: 429, retryAfter: "3600", rateLimit: `"q";r=0;t=3600`, remaining: "0",
			body: `{"error":"quota_exceeded","rule":"q","retry_after":3600}` + "\n"},
		{at: time.Hour - ns, status: 429, retryAfter: "1"},
		{at: time.Hour, status: 200, rateLimit: `"q";r=1;t=` + strconv.Itoa(november)},
		{at: time.Hour, status: 200},
		{at: time.Hour, status: 429, retryAfter: strconv.Itoa(november)},
	})
	resp, body := e.get("api.example.com", "/")
	if got, want := body, "quota used up: it resets in "+strconv.Itoa(november)+"s\n"; resp.StatusCode != 429 || got != want {
		t.Errorf("text refusal: got %d %q, want 429 %q", resp.StatusCode, got, want)
	}
	// A quota's policy states no window: its calendar period has no fixed
	// length.
	if got, want := resp.Header.Get("Ratelimit-Policy"), `"q";q=2`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	var j struct {
		Error string `json:"error"`
	}
	_, body = e.do("GET", "api.example.com", "/", map[string]string{"Accept": "application/json"}, "")
	if err := json.Unmarshal([]byte(body), &j); err != nil || j.Error != "quota_exceeded" {
		t.Errorf("JSON refusal %q: got %+v, %v; want error quota_exceeded", body, j, err)
	}
}

// TestQuotaBesideThrottle: a request refused by a per-second throttle does
// not use the quota beside it (the quota does not count blocked requests),
// and one refused by the quota says so, not that it went too fast.
func TestQuotaBesideThrottle(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	throttle := rule("throttle", 1, time.Second)
	throttle.Algorithm = "fixed_window"
	e := newEnv(t, oneDomain(origin.URL, throttle, quotaRule("q", 2, "daily", "")))
	steps := []struct {
		advance time.Duration
		status  int
		error   string
	}{
		{0, 200, ""},
		{0, 429, "rate_limited"}, // the throttle: the quota gets its unit back
		{time.Second, 200, ""},
		{time.Second, 429, "quota_exceeded"},
	}
	for i, s := range steps {
		e.clock.Advance(s.advance)
		resp, body := e.do("GET", "api.example.com", "/", map[string]string{"Accept": "application/json"}, "")
		var j struct {
			Error string `json:"error"`
		}
		if resp.StatusCode == 429 {
			if err := json.Unmarshal([]byte(body), &j); err != nil {
				t.Fatalf("step %d: body %q: %v", i, body, err)
			}
		}
		if resp.StatusCode != s.status || j.Error != s.error {
			t.Fatalf("step %d: got %d %q, want %d %q", i, resp.StatusCode, j.Error, s.status, s.error)
		}
	}
}

// TestReloadQuota: changing a quota's limit keeps its counts; changing its
// reset or time zone starts them afresh and is reported as a reset; a zone
// spelled out as UTC is the default.
func TestReloadQuota(t *testing.T) {
	tests := []struct {
		name       string
		next       rules.RuleConfig
		wantReset  bool
		wantStatus []int // of the next requests: 429 while the 2 counted remain
	}{
		{"limit raised", quotaRule("q", 3, "daily", ""), false, []int{200, 429}},
		{"limit kept, zone spelled out", quotaRule("q", 2, "daily", "UTC"), false, []int{429}},
		{"reset changed", quotaRule("q", 2, "weekly", ""), true, []int{200, 200, 429}},
		{"timezone changed", quotaRule("q", 2, "daily", "America/New_York"), true, []int{200, 200, 429}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			origin, _ := newOrigin(t, "a")
			e := newEnv(t, oneDomain(origin.URL, quotaRule("q", 2, "daily", "")))
			for range 2 {
				e.get("api.example.com", "/")
			}
			res, err := e.proxy.Reload(compile(t, oneDomain(origin.URL, tt.next)), "next")
			if err != nil {
				t.Fatal(err)
			}
			if got := len(res.RulesReset) == 1; got != tt.wantReset {
				t.Errorf("got rules_reset %q, want reset %v", res.RulesReset, tt.wantReset)
			}
			for i, want := range tt.wantStatus {
				if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != want {
					t.Errorf("request %d after reload: got %d, want %d", i, resp.StatusCode, want)
				}
			}
		})
	}
}
