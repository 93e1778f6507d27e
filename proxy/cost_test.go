package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRequestCost: the cost header is one whole number from 0 to
// max_cost, sent once; anything else is refused, and a request without it
// costs the rule's cost.
func TestRequestCost(t *testing.T) {
	r := &rules.Rule{Cost: 2, CostHeader: "X-Cost", MaxCost: 50}
	tests := []struct {
		name    string
		values  []string // nil: the header is not sent
		want    int64
		problem costProblem
	}{
		{"absent: the rule's cost", nil, 2, costOK},
		{"zero", []string{"0"}, 0, costOK},
		{"one", []string{"1"}, 1, costOK},
		{"max_cost", []string{"50"}, 50, costOK},
		{"leading zeros", []string{"007"}, 7, costOK},
		{"max_cost + 1", []string{"51"}, 0, costTooHigh},
		{"huge", []string{"99999999999999999999999999999999999999"}, 0, costTooHigh},
		{"huge, zero-padded", []string{"00000000000000000000000000000000000050"}, 50, costOK},
		{"negative", []string{"-1"}, 0, costBad},
		{"negative zero", []string{"-0"}, 0, costBad},
		{"plus sign", []string{"+5"}, 0, costBad},
		{"fraction", []string{"2.5"}, 0, costBad},
		{"exponent", []string{"1e3"}, 0, costBad},
		{"hex", []string{"0x10"}, 0, costBad},
		{"word", []string{"cheap"}, 0, costBad},
		{"empty", []string{""}, 0, costBad},
		{"inner space", []string{"1 0"}, 0, costBad},
		{"list in one value", []string{"3, 4"}, 0, costBad},
		{"repeated", []string{"3", "4"}, 0, costBad},
		{"repeated, same value", []string{"3", "3"}, 0, costBad},
		{"huge then junk", []string{"9999999999x"}, 0, costBad},
		{"non-ASCII digit", []string{"٣"}, 0, costBad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.values != nil {
				h["X-Cost"] = tt.values
			}
			got, problem := requestCost(r, h)
			if got != tt.want || problem != tt.problem {
				t.Errorf("requestCost(%q) = %d, %d; want %d, %d", tt.values, got, problem, tt.want, tt.problem)
			}
		})
	}
	if got, problem := requestCost(&rules.Rule{Cost: 3}, http.Header{"X-Cost": {"junk"}}); got != 3 || problem != costOK {
		t.Errorf("a rule without cost_header: got %d, %d; want its cost 3", got, problem)
	}
}

// TestUnusableCostIsRefused: a request whose cost header a block rule
// cannot use gets 400 with a body that says why (JSON or text, as the 429
// body), no Retry-After, is counted in edge_refused_requests_total, never
// reaches the origin and uses no quota in any rule.
func TestUnusableCostIsRefused(t *testing.T) {
	origin, seen := newOrigin(t, "a")
	priced := rule("priced", 10, time.Minute)
	priced.CostHeader, priced.MaxCost = "X-Cost", 5
	e := newEnv(t, oneDomain(origin.URL, rule("per-ip", 2, time.Minute), priced))
	tests := []struct {
		name   string
		hdr    map[string]string
		repeat bool // send X-Cost twice
		ctype  string
		body   string
	}{
		{name: "negative, text", hdr: map[string]string{"X-Cost": "-1"}, ctype: "text/plain; charset=utf-8",
			body: "bad cost: X-Cost must be sent once, as a whole number from 0 to 5\n"},
		{name: "non-numeric, JSON", hdr: map[string]string{"X-Cost": "two", "Accept": "application/json"}, ctype: "application/json",
			body: `{"error":"bad_cost","rule":"priced","header":"X-Cost","max_cost":5}` + "\n"},
		{name: "repeated, JSON", hdr: map[string]string{"Accept": "application/problem+json"}, repeat: true, ctype: "application/json",
			body: `{"error":"bad_cost","rule":"priced","header":"X-Cost","max_cost":5}` + "\n"},
		{name: "over max_cost, text", hdr: map[string]string{"X-Cost": "6"}, ctype: "text/plain; charset=utf-8",
			body: "cost too high: X-Cost must be at most 5\n"},
		{name: "huge, JSON", hdr: map[string]string{"X-Cost": strings.Repeat("9", 400), "Accept": "application/json"}, ctype: "application/json",
			body: `{"error":"cost_too_high","rule":"priced","header":"X-Cost","max_cost":5}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", e.srv.URL+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "api.example.com"
			for k, v := range tt.hdr {
				req.Header.Set(k, v)
			}
			if tt.repeat {
				req.Header["X-Cost"] = []string{"1", "1"}
			}
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("status %d, want 400", resp.StatusCode)
			}
			if got := resp.Header.Get("Content-Type"); got != tt.ctype {
				t.Errorf("Content-Type %q, want %q", got, tt.ctype)
			}
			if got := string(b); got != tt.body {
				t.Errorf("body %q, want %q", got, tt.body)
			}
			if tt.ctype == "application/json" && !json.Valid(b) {
				t.Errorf("body %q is not JSON", b)
			}
			for _, f := range []string{"Retry-After", "Ratelimit", "X-Ratelimit-Remaining"} {
				if v := resp.Header.Get(f); v != "" {
					t.Errorf("%s: %q, want none (retrying cannot help)", f, v)
				}
			}
		})
	}
	if n := len(seen()); n != 0 {
		t.Errorf("origin saw %d requests, want 0", n)
	}
	if got := testutil.ToFloat64(e.proxy.metrics.refused.WithLabelValues("400")); got != float64(len(tests)) {
		t.Errorf(`edge_refused_requests_total{code="400"} = %v, want %d`, got, len(tests))
	}
	// per-ip (limit 2) counted none of them: two requests still pass.
	for i := range 2 {
		if resp, _ := e.do("GET", "api.example.com", "/", map[string]string{"X-Cost": "1"}, ""); resp.StatusCode != 200 {
			t.Fatalf("request %d after the refused ones: got %d, want 200", i, resp.StatusCode)
		}
	}
}

// TestLogRuleNeverRefusesForCost: a log rule does not refuse a request
// whose cost it cannot use; it leaves it uncounted. A HEAD request refused
// for its cost gets no body.
func TestLogRuleNeverRefusesForCost(t *testing.T) {
	origin, seen := newOrigin(t, "a")
	logged := rule("logged", 10, time.Minute)
	logged.Action, logged.CostHeader, logged.MaxCost = "log", "X-Cost", 5
	e := newEnv(t, oneDomain(origin.URL, logged))
	for _, v := range []string{"junk", "6", "-2"} {
		if resp, _ := e.do("GET", "api.example.com", "/", map[string]string{"X-Cost": v}, ""); resp.StatusCode != 200 {
			t.Errorf("X-Cost %q under a log rule: got %d, want 200", v, resp.StatusCode)
		}
	}
	if n := len(seen()); n != 3 {
		t.Errorf("origin saw %d requests, want 3", n)
	}
	if got := testutil.ToFloat64(e.proxy.metrics.decisions.WithLabelValues("api.example.com", "logged", "log", "allowed")); got != 0 {
		t.Errorf("log rule decisions = %v, want 0 (it counts none of them)", got)
	}

	blocking := rule("blocking", 10, time.Minute)
	blocking.CostHeader, blocking.MaxCost = "X-Cost", 5
	e = newEnv(t, oneDomain(origin.URL, blocking))
	resp, body := e.do("HEAD", "api.example.com", "/", map[string]string{"X-Cost": "junk"}, "")
	if resp.StatusCode != 400 || body != "" {
		t.Errorf("HEAD with a bad cost: got %d %q, want 400 without a body", resp.StatusCode, body)
	}
}
