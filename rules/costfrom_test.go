package rules

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCompileCostFromErrors: each mistake with cost_from or the graphql
// section is one error naming the key, the domain and the value.
func TestCompileCostFromErrors(t *testing.T) {
	const at = "domains[0] (api)."
	const rule = at + "rules[0] (r)."
	off := false
	tests := []struct {
		name string
		rule RuleConfig // Name, Limit 100 and Period a minute are filled in
		more func(c *Config)
		want []string
	}{
		{name: "unknown", rule: RuleConfig{CostFrom: "body"},
			want: []string{rule + `cost_from: must be graphql or origin_time, got "body"`}},
		{name: "with cost_header", rule: RuleConfig{CostFrom: "graphql", CostHeader: "X-Cost", MaxCost: 5},
			want: []string{rule + `cost_from: graphql and cost_header both say what a request costs: set one`}},
		{name: "with response_cost_header", rule: RuleConfig{CostFrom: "origin_time", ResponseCostHeader: "X-Cost"},
			want: []string{rule + `cost_from: origin_time and response_cost_header both say what a request costs: set one`}},
		{name: "origin_time soft", rule: RuleConfig{CostFrom: "origin_time", Mode: "soft"},
			want: []string{rule + `mode: soft counts every request offered: not valid with cost_from origin_time`}},
		{name: "origin_time with respond", rule: RuleConfig{CostFrom: "origin_time"},
			more: func(c *Config) { c.Domains[0].Respond = &ResponseConfig{}; c.Domains[0].Origin = "" },
			want: []string{rule + `cost_from: needs an origin's response, but the domain answers with respond`}},
		{name: "graphql with request_buffering false", rule: RuleConfig{CostFrom: "graphql"},
			more: func(c *Config) { c.Domains[0].RequestBuffering = &off },
			want: []string{at + `request_buffering: must not be false with a rule with cost_from: graphql (r), which reads the body before deciding`}},
		{name: "graphql section without a rule", more: func(c *Config) { c.Domains[0].GraphQL = &GraphQLConfig{} },
			want: []string{at + `graphql: prices requests for rules with cost_from: graphql, and the domain has none`}},
		{name: "max_query_cost over the capacity", rule: RuleConfig{CostFrom: "graphql"},
			more: func(c *Config) { c.Domains[0].GraphQL = &GraphQLConfig{MaxQueryCost: 101} },
			want: []string{at + `graphql.max_query_cost: must be at most the capacity of every rule with cost_from: graphql (100, rule r), got 101`}},
		{name: "bad path and prices", rule: RuleConfig{CostFrom: "graphql"},
			more: func(c *Config) {
				c.Domains[0].GraphQL = &GraphQLConfig{Path: "graphql", MutationCost: -1, DefaultPage: 2_000_000}
			},
			want: []string{
				at + `graphql.path: must start with "/", got "graphql"`,
				at + `graphql.mutation_cost: must be between 0 and 1000000, got -1`,
				at + `graphql.default_page: must be between 0 and 1000000, got 2000000`,
			}},
		{name: "concurrency", rule: RuleConfig{Algorithm: "concurrency", CostFrom: "origin_time"},
			more: noPeriod,
			want: []string{rule + `cost_from: does not apply to algorithm concurrency, which counts the requests in flight`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			rc := tt.rule
			rc.Name, rc.Period, rc.Limit = "r", time.Minute, 100
			cfg.Domains[0].Rules = []RuleConfig{rc}
			if tt.more != nil {
				tt.more(&cfg)
			}
			wantErrors(t, cfg, tt.want)
		})
	}
}

// TestCompileCostFromChecked: neither cost_from works on a domain the
// check listener answers for, as count_status does not.
func TestCompileCostFromChecked(t *testing.T) {
	for _, from := range []string{"graphql", "origin_time"} {
		cfg := checkConfig()
		cfg.Domains[0].Rules = []RuleConfig{{Name: "r", Limit: 10, Period: time.Minute, CostFrom: from}}
		_, err := Compile(cfg)
		if err == nil || !strings.Contains(err.Error(), "rules[0] (r).cost_from: "+from) ||
			!strings.Contains(err.Error(), "check listener never sees") {
			t.Errorf("cost_from %s on a checked domain: got %v, want an error naming cost_from", from, err)
		}
	}
}

// TestCompileGraphQL: the graphql section's defaults, and max_query_cost
// defaulting to the smallest capacity of the rules that price by it.
func TestCompileGraphQL(t *testing.T) {
	cfg := validConfig()
	cfg.Domains[0].Rules = []RuleConfig{
		{Name: "a", Limit: 1000, Period: time.Minute, CostFrom: "graphql"},
		{Name: "b", Limit: 10, Period: time.Second, Algorithm: "token_bucket", Burst: 400, CostFrom: "graphql"},
		{Name: "t", Limit: 60_000, Period: time.Minute, CostFrom: "origin_time", Cost: intp(0)},
	}
	tab, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := tab.Domains[0]
	want := GraphQL{Path: "/graphql", ObjectCost: 1, MutationCost: 10, DefaultPage: 50, MaxQueryCost: 400}
	if d.GraphQL == nil || *d.GraphQL != want {
		t.Errorf("graphql: got %+v, want %+v", d.GraphQL, want)
	}
	if r := d.Rules[2]; r.CostFrom != CostFromOriginTime || !r.CountsAfter() || r.Cost != 0 {
		t.Errorf("rule t: cost_from %v, counts after %v, cost %d; want origin_time, true, 0", r.CostFrom, r.CountsAfter(), r.Cost)
	}

	cfg.Domains[0].GraphQL = &GraphQLConfig{Path: "/api/2024-01/graphql.json", ObjectCost: 0, MaxQueryCost: 100}
	cfg.Given = map[string]bool{"domains[0].graphql.object_cost": true}
	if tab, err = Compile(cfg); err != nil {
		t.Fatal(err)
	}
	want = GraphQL{Path: "/api/2024-01/graphql.json", ObjectCost: 0, MutationCost: 10, DefaultPage: 50, MaxQueryCost: 100}
	if got := tab.Domains[0].GraphQL; *got != want {
		t.Errorf("graphql: got %+v, want %+v", got, want)
	}
}

// TestCompilePlansErrors: mistakes in api_keys and plans, each one error
// naming the key.
func TestCompilePlansErrors(t *testing.T) {
	const at = "domains[0] (api)."
	const rule = at + "rules[0] (r)."
	keys := &APIKeysConfig{From: "header:X-API-Key", File: "keys.yaml"}
	tests := []struct {
		name string
		api  *APIKeysConfig
		rule RuleConfig
		want []string
	}{
		{name: "plans without api_keys", rule: RuleConfig{Plans: map[string]PlanConfig{"gold": {Limit: 5}}},
			want: []string{rule + `plans: need the domain's api_keys, which say which plan a request is on`}},
		{name: "from missing", api: &APIKeysConfig{File: "k.yaml"},
			want: []string{at + `api_keys.from: required`}},
		{name: "from the client address", api: &APIKeysConfig{From: "ip", File: "k.yaml"},
			want: []string{at + `api_keys.from: must be a part the client sends (a header, for one), not "ip"`}},
		{name: "neither file nor plan_from", api: &APIKeysConfig{From: "header:X-API-Key"},
			want: []string{at + `api_keys: needs a file (API key to plan) or plan_from (where the plan is read)`}},
		{name: "bad plan values", api: keys,
			rule: RuleConfig{Plans: map[string]PlanConfig{"gold": {Limit: -1, Burst: 5, Period: 1500 * time.Millisecond}, "x y": {}}},
			want: []string{
				rule + `plans.gold.limit: must be between 1 and 1000000000, got -1`,
				rule + `plans.gold.period: must be a whole number of seconds from 1s to 720h, got 1.5s`,
				rule + `plans.gold.burst: applies only to algorithm token_bucket or leaky_bucket, got 5 with sliding_window`,
				rule + `plans.x y: must contain only [A-Za-z0-9_.-], got "x y"`,
			}},
		{name: "plan cost over its capacity", api: keys, rule: RuleConfig{Plans: map[string]PlanConfig{"tiny": {Limit: 2, Cost: new(5)}}},
			want: []string{rule + `plans.tiny.cost: must be at most the plan's capacity (2), got 5`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			rc := tt.rule
			rc.Name, rc.Period, rc.Limit = "r", time.Minute, 100
			cfg.Domains[0].Rules = []RuleConfig{rc}
			cfg.Domains[0].APIKeys = tt.api
			wantErrors(t, cfg, tt.want)
		})
	}
}

// TestCompilePlans: a plan replaces the values it gives and keeps the
// rest; the file's keys are held by hash, their plans in lower case.
func TestCompilePlans(t *testing.T) {
	cfg := validConfig()
	cfg.Domains[0].APIKeys = &APIKeysConfig{From: "header:X-API-Key", File: "k.yaml", Keys: map[string]string{"secret-1": "Gold"}}
	cfg.Domains[0].Rules = []RuleConfig{{Name: "r", Limit: 10, Period: time.Minute, Algorithm: "token_bucket", Burst: 20,
		Plans: map[string]PlanConfig{"gold": {Limit: 100, Burst: 200}, "free": {Period: time.Hour, Cost: new(0)}}}}
	tab, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := tab.Domains[0]
	if got := fmt.Sprint(d.PlanNames); got != "[free gold]" {
		t.Errorf("plan names: got %s, want [free gold]", got)
	}
	r := d.Rules[0]
	if len(r.Plans) != 2 {
		t.Fatalf("plans: got %d, want 2", len(r.Plans))
	}
	free, gold := r.Plans[0].Rule, r.Plans[1].Rule
	if free.Limit != 10 || free.Burst != 20 || free.Period != time.Hour || free.Cost != 0 {
		t.Errorf("free: limit %d burst %d period %s cost %d, want 10 20 1h 0", free.Limit, free.Burst, free.Period, free.Cost)
	}
	if gold.Limit != 100 || gold.Burst != 200 || gold.Period != time.Minute || gold.Cost != 1 {
		t.Errorf("gold: limit %d burst %d period %s cost %d, want 100 200 1m 1", gold.Limit, gold.Burst, gold.Period, gold.Cost)
	}
	if plan, ok := d.APIKeys.PlanOf("secret-1"); !ok || plan != "gold" {
		t.Errorf("PlanOf: got %q, %v; want gold", plan, ok)
	}
	if strings.Contains(fmt.Sprintf("%+v", *d.APIKeys), "secret-1") {
		t.Error("the compiled api_keys hold a key in the clear")
	}
	if h := KeyHash("secret-1"); len(h) != 12 || strings.Contains(h, "secret") {
		t.Errorf("KeyHash: got %q", h)
	}
}

// TestPartValue: a key part's value as the request sent it, or none.
func TestPartValue(t *testing.T) {
	h := http.Header{"X-Api-Key": {"-abc|d,e%f"}, "X-Empty": {" "}}
	src := &KeySource{Header: h}
	for _, tt := range []struct {
		part string
		want string
		ok   bool
	}{{"header:X-API-Key", "-abc|d,e%f", true}, {"header:X-Empty", "", false}, {"header:X-None", "", false}} {
		kp, err := ParseKeyPart(tt.part)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := PartValue(kp, src); got != tt.want || ok != tt.ok {
			t.Errorf("%s: got %q, %v; want %q, %v", tt.part, got, ok, tt.want, tt.ok)
		}
	}
}
