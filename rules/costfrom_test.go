package rules

import (
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
