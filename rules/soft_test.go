package rules

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestCompileMode: mode soft compiles on windows, implies count_blocked,
// and is refused where it cannot work, each error naming the key.
func TestCompileMode(t *testing.T) {
	const at = "domains[0] (api).rules[0] (r)." // as messages name the rule
	const key = "domains[0].rules[0]."          // as Config.Given spells it
	tests := []struct {
		name  string
		rule  RuleConfig // Name, Limit and Period are filled in: limit 10 per minute
		redis bool
		given []string // keys of the rule the file writes, beside name, limit and period
		want  []string // errors; nil: compiles
		soft  bool
	}{
		{name: "default hard", rule: RuleConfig{}},
		{name: "hard", rule: RuleConfig{Mode: "hard"}},
		{name: "soft sliding window", rule: RuleConfig{Mode: "soft"}, soft: true},
		{name: "soft fixed window", rule: RuleConfig{Mode: "soft", Algorithm: "fixed_window"}, soft: true},
		{name: "soft with count_blocked", rule: RuleConfig{Mode: "soft", CountBlocked: true}, soft: true},
		{name: "soft with count_blocked false", rule: RuleConfig{Mode: "soft"}, given: []string{"mode", "count_blocked"},
			want: []string{at + `count_blocked: false is not allowed with mode: soft, which counts every request offered (leave count_blocked out)`}},
		{name: "soft with count_blocked left out", rule: RuleConfig{Mode: "soft"}, given: []string{"mode"}, soft: true},
		{name: "unknown", rule: RuleConfig{Mode: "Soft"},
			want: []string{at + `mode: must be hard or soft, got "Soft"`}},
		{name: "soft token bucket", rule: RuleConfig{Mode: "soft", Algorithm: "token_bucket"},
			want: []string{at + `mode: soft applies only to algorithm sliding_window or fixed_window, got token_bucket`}},
		{name: "soft with count_status", rule: RuleConfig{Mode: "soft", CountStatus: []int{401}},
			want: []string{at + `mode: soft counts every request offered: not valid with count_status`}},
		{name: "soft with response_cost_header", rule: RuleConfig{Mode: "soft", Cost: intp(0), ResponseCostHeader: "X-Cost"},
			want: []string{at + `mode: soft counts every request offered: not valid with response_cost_header`}},
		{name: "soft with mitigation", rule: RuleConfig{Mode: "soft", MitigationTimeout: time.Minute},
			want: []string{at + `mode: soft never blocks a key outright: not valid with mitigation_timeout, got 1m`}},
		{name: "soft with redis", rule: RuleConfig{Mode: "soft", Algorithm: "fixed_window"}, redis: true, soft: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			rc := tt.rule
			rc.Name, rc.Limit, rc.Period = "r", 10, time.Minute
			cfg.Domains[0].Rules = []RuleConfig{rc}
			if tt.given != nil {
				cfg.Given = map[string]bool{}
				for _, k := range append(tt.given, "name", "limit", "period") {
					cfg.Given[key+k] = true
				}
			}
			if tt.redis {
				cfg.Cluster.Store = "redis"
				cfg.Cluster.Redis.Addresses = []string{"127.0.0.1:6379"}
			}
			tab, err := Compile(cfg)
			if tt.want != nil {
				if err == nil {
					t.Fatalf("Compile = nil error, want %q", tt.want)
				}
				if got := errorLines(t, err); !reflect.DeepEqual(got, tt.want) {
					t.Errorf("got errors:\n%s\nwant exactly:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
				}
				return
			}
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			r := tab.Domains[0].Rules[0]
			if r.Soft != tt.soft || r.Soft && !r.CountBlocked {
				t.Errorf("Soft %v, CountBlocked %v; want Soft %v, counting blocked requests when soft", r.Soft, r.CountBlocked, tt.soft)
			}
		})
	}
}
