package proxy

import (
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/edgerate/edge/headers"
	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/rules"
)

// step is one request of a sequence and what its response must carry.
type step struct {
	at     time.Duration // since the start of the test's clock (a period boundary)
	cost   string        // X-Cost, "" for none
	status int
	// Fields checked when not empty.
	retryAfter, rateLimit, remaining, body string
}

// runSteps sends each step's request at its time and checks its response.
func runSteps(t *testing.T, e *env, steps []step) {
	t.Helper()
	start := e.clock.Now()
	for i, s := range steps {
		e.clock.ns.Store(start.Add(s.at).UnixNano())
		hdr := map[string]string{"Accept": "application/json"}
		if s.cost != "" {
			hdr["X-Cost"] = s.cost
		}
		resp, body := e.do("GET", "api.example.com", "/", hdr, "")
		if resp.StatusCode != s.status {
			t.Fatalf("step %d (at %v, cost %q): got %d, want %d", i, s.at, s.cost, resp.StatusCode, s.status)
		}
		for _, c := range []struct{ field, got, want string }{
			{"Retry-After", resp.Header.Get("Retry-After"), s.retryAfter},
			{"RateLimit", resp.Header.Get("Ratelimit"), s.rateLimit},
			{"X-RateLimit-Remaining", resp.Header.Get("X-Ratelimit-Remaining"), s.remaining},
			{"body", body, s.body},
		} {
			if c.want != "" && c.got != c.want {
				t.Errorf("step %d (at %v, cost %q): %s = %q, want %q", i, s.at, s.cost, c.field, c.got, c.want)
			}
		}
		if s.status == 200 && resp.Header.Get("Retry-After") != "" {
			t.Errorf("step %d: an allowed response with Retry-After", i)
		}
	}
}

// countingRule is a rule of limit per period counted by algorithm, with
// its fields on every response and the cost in X-Cost (up to maxCost).
func countingRule(name, algorithm string, limit, burst int, period time.Duration, maxCost int) rules.RuleConfig {
	r := rule(name, limit, period)
	r.Algorithm, r.Burst, r.Headers = algorithm, burst, "always"
	if maxCost > 0 {
		r.CostHeader, r.MaxCost = "X-Cost", maxCost
	}
	return r
}

// TestAlgorithmSequences drives one rule of each algorithm through a
// sequence of requests on the injected clock: which are allowed, and the
// exact Retry-After, RateLimit and body of each; a refused request is
// refused 1ns before its Retry-After and allowed at it.
func TestAlgorithmSequences(t *testing.T) {
	const ns = time.Nanosecond
	tests := []struct {
		name   string
		rule   rules.RuleConfig
		policy string
		xLimit string
		steps  []step
	}{
		{
			// 3 tokens at once, one more a second.
			name: "token bucket", rule: countingRule("tb", "token_bucket", 10, 3, 10*time.Second, 0),
			policy: `"tb";q=3;w=3`, xLimit: "3",
			steps: []step{
				{at: 0, status: 200, rateLimit: `"tb";r=2;t=1`, remaining: "2"},
				{at: 0, status: 200, rateLimit: `"tb";r=1;t=1`},
				{at: 0, status: 200, rateLimit: `"tb";r=0;t=1`},
				{at: 0, status: 429, retryAfter: "1", rateLimit: `"tb";r=0;t=1`, remaining: "0",
					body: `{"error":"rate_limited","rule":"tb","retry_after":1,"cost":1,"remaining":0,"restore_rate":1}` + "\n"},
				{at: time.Second - ns, status: 429, retryAfter: "1"},
				{at: time.Second, status: 200, rateLimit: `"tb";r=0;t=1`},
				// 2.5 s idle: 2.5 tokens, 2 whole ones; the third in 0.5 s.
				{at: 3500 * time.Millisecond, status: 200, rateLimit: `"tb";r=1;t=1`},
				{at: 3500 * time.Millisecond, status: 200, rateLimit: `"tb";r=0;t=1`},
				{at: 3500 * time.Millisecond, status: 429, retryAfter: "1"},
				{at: 4 * time.Second, status: 200},
			},
		},
		{
			// 3 a 10 s period aligned to the epoch; all back when it ends.
			name: "fixed window", rule: countingRule("fw", "fixed_window", 3, 0, 10*time.Second, 0),
			policy: `"fw";q=3;w=10`, xLimit: "3",
			steps: []step{
				{at: 4 * time.Second, status: 200, rateLimit: `"fw";r=2;t=6`, remaining: "2"},
				{at: 4 * time.Second, status: 200, rateLimit: `"fw";r=1;t=6`},
				{at: 9 * time.Second, status: 200, rateLimit: `"fw";r=0;t=1`},
				{at: 9 * time.Second, status: 429, retryAfter: "1", rateLimit: `"fw";r=0;t=1`,
					body: `{"error":"rate_limited","rule":"fw","retry_after":1}` + "\n"},
				{at: 10*time.Second - ns, status: 429, retryAfter: "1"},
				{at: 10 * time.Second, status: 200, rateLimit: `"fw";r=2;t=10`},
				{at: 10 * time.Second, status: 200},
				{at: 10 * time.Second, status: 200},
				{at: 10 * time.Second, status: 429, retryAfter: "10"},
			},
		},
		{
			// A meter of 3 draining one a second, priced by X-Cost.
			name: "leaky bucket with cost", rule: countingRule("lb", "leaky_bucket", 10, 3, 10*time.Second, 3),
			policy: `"lb";q=3;w=3`, xLimit: "3",
			steps: []step{
				{at: 0, cost: "2", status: 200, rateLimit: `"lb";r=1;t=1`},
				{at: 0, cost: "2", status: 429, retryAfter: "1", rateLimit: `"lb";r=1;t=1`,
					body: `{"error":"rate_limited","rule":"lb","retry_after":1,"cost":2,"remaining":1,"restore_rate":1}` + "\n"},
				{at: time.Second - ns, cost: "2", status: 429},
				{at: time.Second, cost: "2", status: 200, rateLimit: `"lb";r=0;t=1`},
				// Cost 0 takes nothing, but is refused while nothing is left.
				{at: time.Second, cost: "0", status: 429, retryAfter: "1"},
				{at: 2 * time.Second, cost: "0", status: 200, rateLimit: `"lb";r=1;t=1`},
				{at: 2 * time.Second, status: 200, rateLimit: `"lb";r=0;t=1`}, // no header: cost 1
				{at: 5 * time.Second, cost: "3", status: 200, rateLimit: `"lb";r=0;t=1`},
			},
		},
		{
			// A sliding window priced by X-Cost: allowed iff estimate + c − 1 < limit.
			name: "sliding window with cost", rule: countingRule("sw", "", 10, 0, time.Minute, 10),
			policy: `"sw";q=10;w=60`, xLimit: "10",
			steps: []step{
				{at: 0, cost: "4", status: 200, rateLimit: `"sw";r=6;t=61`},
				{at: 0, cost: "4", status: 200, rateLimit: `"sw";r=2;t=61`},
				{at: 0, cost: "3", status: 429, retryAfter: "61", rateLimit: `"sw";r=2;t=61`,
					body: `{"error":"rate_limited","rule":"sw","retry_after":61}` + "\n"},
				{at: 0, cost: "2", status: 200, rateLimit: `"sw";r=0;t=61`},
				{at: 0, cost: "0", status: 429},
				// In the next period the 10 weigh (60 − e)/60: room for a
				// cost of 3 once 10 × (60 − e)/60 < 8, after 12 s.
				{at: 72*time.Second - ns, cost: "3", status: 429, retryAfter: "1"},
				{at: 72*time.Second + ns, cost: "3", status: 200},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			origin, _ := newOrigin(t, "a")
			e := newEnv(t, oneDomain(origin.URL, tt.rule))
			runSteps(t, e, tt.steps)
			resp, _ := e.get("api.example.com", "/")
			if got := resp.Header.Get("Ratelimit-Policy"); got != tt.policy {
				t.Errorf("RateLimit-Policy = %q, want %q", got, tt.policy)
			}
			if got := resp.Header.Get("X-Ratelimit-Limit"); got != tt.xLimit {
				t.Errorf("X-RateLimit-Limit = %q, want %q", got, tt.xLimit)
			}
		})
	}
}

// TestBucketBodyIsJSON: a bucket's 429 body parses, with a fractional
// restore rate written as a JSON number.
func TestBucketBodyIsJSON(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	e := newEnv(t, oneDomain(origin.URL, countingRule("tb", "token_bucket", 100, 20, time.Minute, 0)))
	var body string
	for range 21 {
		_, body = e.do("GET", "api.example.com", "/", map[string]string{"Accept": "application/json"}, "")
	}
	var j struct {
		Error       string  `json:"error"`
		RetryAfter  int     `json:"retry_after"`
		Cost        int64   `json:"cost"`
		Remaining   int64   `json:"remaining"`
		RestoreRate float64 `json:"restore_rate"`
	}
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if j.Error != "rate_limited" || j.RetryAfter != 1 || j.Cost != 1 || j.Remaining != 0 || j.RestoreRate != 100.0/60 {
		t.Errorf("body %q: got %+v, want retry 1, cost 1, remaining 0, restore_rate 100/60", body, j)
	}
}

// TestPolicyOf: q and w per algorithm. A bucket's w is the time it takes
// to fill, rounded up to whole seconds (so q/w never overstates the
// rate), at least 1, at most what headers sends.
func TestPolicyOf(t *testing.T) {
	tests := []struct {
		name string
		r    rules.Rule
		want headers.Policy
	}{
		{"sliding window", rules.Rule{Name: "a", Limit: 100, Period: time.Minute},
			headers.Policy{Name: "a", Quota: 100, Window: time.Minute}},
		{"fixed window ignores burst", rules.Rule{Name: "a", Algorithm: algorithm.FixedWindow, Limit: 100, Period: time.Hour},
			headers.Policy{Name: "a", Quota: 100, Window: time.Hour}},
		{"token bucket", rules.Rule{Name: "a", Algorithm: algorithm.TokenBucket, Limit: 100, Period: time.Minute, Burst: 20},
			headers.Policy{Name: "a", Quota: 20, Window: 12 * time.Second}},
		{"token bucket, burst from limit", rules.Rule{Name: "a", Algorithm: algorithm.TokenBucket, Limit: 100, Period: time.Minute},
			headers.Policy{Name: "a", Quota: 100, Window: time.Minute}},
		{"leaky bucket, fill rounded up", rules.Rule{Name: "a", Algorithm: algorithm.LeakyBucket, Limit: 3, Period: 10 * time.Second, Burst: 2},
			headers.Policy{Name: "a", Quota: 2, Window: 7 * time.Second}},
		{"fills in under a second", rules.Rule{Name: "a", Algorithm: algorithm.TokenBucket, Limit: 100, Period: time.Second, Burst: 10},
			headers.Policy{Name: "a", Quota: 10, Window: time.Second}},
		{"fills in 82 years", rules.Rule{Name: "a", Algorithm: algorithm.TokenBucket, Limit: 1, Period: rules.MaxPeriod, Burst: rules.MaxLimit},
			headers.Policy{Name: "a", Quota: rules.MaxLimit, Window: headers.MaxSeconds * time.Second}},
	}
	for _, tt := range tests {
		if got := policyOf(&tt.r); got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
	if got := strconv.FormatFloat(100.0/60, 'f', -1, 64); newRuleState(&rules.Rule{Algorithm: algorithm.TokenBucket, Limit: 100, Period: time.Minute}, ruleCounters{}).restoreRate != got {
		t.Errorf("restore rate of 100 a minute is not %s", got)
	}
}

// TestReloadKeepsOrResetsBuckets: changing a rule's limit, cost or
// max_delay keeps its counters; changing its algorithm or burst starts
// them afresh, and the reload says so.
func TestReloadKeepsOrResetsBuckets(t *testing.T) {
	zero := 0
	tests := []struct {
		name    string
		change  func(r *rules.RuleConfig)
		changed bool // reported under rules_changed (else rules_reset)
		status  int  // of the next request: 429 while the counters are kept
	}{
		{"limit", func(r *rules.RuleConfig) { r.Limit = 20 }, true, 429},
		{"cost", func(r *rules.RuleConfig) { r.Cost = &zero }, true, 429},
		{"max_delay 0 written", func(r *rules.RuleConfig) { r.MaxDelay = 0 }, false, 429},
		{"burst", func(r *rules.RuleConfig) { r.Burst = 3 }, false, 200},
		{"burst left out", func(r *rules.RuleConfig) { r.Burst = 0 }, false, 200},
		{"burst written as it was", func(r *rules.RuleConfig) { r.Burst = 2 }, false, 429},
		// A bucket's burst left out is its limit: a new limit is a new
		// capacity too.
		{"limit, burst left out", func(r *rules.RuleConfig) { r.Burst, r.Limit = 0, 5 }, false, 200},
		{"limit as the burst was, burst left out", func(r *rules.RuleConfig) { r.Burst, r.Limit = 0, 2 }, true, 429},
		{"algorithm", func(r *rules.RuleConfig) { r.Algorithm = "token_bucket" }, false, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			origin, _ := newOrigin(t, "a")
			r := rule("lb", 10, time.Hour)
			r.Algorithm, r.Burst = "leaky_bucket", 2
			e := newEnv(t, oneDomain(origin.URL, r))
			for range 2 {
				e.get("api.example.com", "/")
			}
			if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != 429 {
				t.Fatalf("before reload: got %d, want 429", resp.StatusCode)
			}
			tt.change(&r)
			res, err := e.proxy.Reload(compile(t, oneDomain(origin.URL, r)), "next")
			if err != nil {
				t.Fatal(err)
			}
			want := ReloadResult{Time: res.Time, Hash: "next", RulesReset: []string{"api.example.com/lb"}}
			switch {
			case tt.changed:
				want.RulesReset, want.RulesChanged, want.KeysCarried = nil, []string{"api.example.com/lb"}, 1
			case tt.status == 429:
				want.RulesReset, want.RulesKept, want.KeysCarried = nil, []string{"api.example.com/lb"}, 1
			}
			if got := mustJSON(res); got != mustJSON(want) {
				t.Errorf("Reload result:\n got %s\nwant %s", got, mustJSON(want))
			}
			if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != tt.status {
				t.Errorf("after reload: got %d, want %d", resp.StatusCode, tt.status)
			}
		})
	}
}

// TestConfigViewShowsCounting: /v1/config shows how each rule counts: its
// algorithm, a bucket's capacity, and its cost.
func TestConfigViewShowsCounting(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	priced := countingRule("priced", "leaky_bucket", 10, 0, time.Minute, 4)
	e := newEnv(t, oneDomain(origin.URL, rule("plain", 5, time.Minute), countingRule("tb", "token_bucket", 10, 3, time.Minute, 0), priced))
	w := httptest.NewRecorder()
	e.proxy.AdminHandler().ServeHTTP(w, httptest.NewRequest("GET", "/v1/config", nil))
	var cv configView
	if err := json.Unmarshal(w.Body.Bytes(), &cv); w.Code != 200 || err != nil {
		t.Fatalf("GET /v1/config: %d %v", w.Code, err)
	}
	type counting struct {
		Algorithm        string
		Burst, Cost, Max int64
		Header           string
	}
	var got []counting
	for _, r := range cv.Domains[0].Rules {
		got = append(got, counting{r.Algorithm, r.Burst, r.Cost, r.MaxCost, r.CostHeader})
	}
	want := []counting{
		{"sliding_window", 0, 1, 0, ""},
		{"token_bucket", 3, 1, 0, ""},
		{"leaky_bucket", 10, 1, 4, "X-Cost"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("rules in /v1/config: got %+v, want %+v", got, want)
	}
}
