package rules

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
)

// TestCompilePrecision: precision fine compiles on hard sliding windows of
// limit at most MaxFineLimit on a node's own counters, and is refused
// elsewhere, each error naming the key.
func TestCompilePrecision(t *testing.T) {
	const at = "domains[0] (api).rules[0] (r)." // as messages name the rule
	const key = "domains[0].rules[0]."          // as Config.Given spells it
	const shared = `precision: fine is not supported with a cluster that shares counters (cluster.store redis, or cluster.sync share): the log of a key near its limit is one node's, while the PoP's count is two counters; use standard`
	tests := []struct {
		name    string
		rule    RuleConfig // Name and Period are filled in, and Limit 10 if unset
		cluster string     // "", "exact", "batched" or "share"
		want    []string   // errors; nil: compiles
		fine    bool
	}{
		{name: "default", rule: RuleConfig{}},
		{name: "standard", rule: RuleConfig{Precision: "standard"}},
		{name: "fine", rule: RuleConfig{Precision: "fine"}, fine: true},
		{name: "fine with count_blocked and mitigation", rule: RuleConfig{Precision: "fine", CountBlocked: true, MitigationTimeout: time.Minute}, fine: true},
		{name: "fine at the largest limit", rule: RuleConfig{Precision: "fine", Limit: MaxFineLimit}, fine: true},
		{name: "unknown", rule: RuleConfig{Precision: "exact"},
			want: []string{at + `precision: must be standard or fine, got "exact"`}},
		{name: "fine fixed window", rule: RuleConfig{Precision: "fine", Algorithm: "fixed_window"},
			want: []string{at + `precision: fine applies only to algorithm sliding_window, got fixed_window`}},
		{name: "fine token bucket", rule: RuleConfig{Precision: "fine", Algorithm: "token_bucket"},
			want: []string{at + `precision: fine applies only to algorithm sliding_window, got token_bucket`}},
		{name: "fine soft", rule: RuleConfig{Precision: "fine", Mode: "soft"},
			want: []string{at + `precision: fine counts a hard limit exactly: not valid with mode soft, which decides by the offered rate`}},
		{name: "fine over the largest limit", rule: RuleConfig{Precision: "fine", Limit: MaxFineLimit + 1},
			want: []string{at + `precision: fine keeps a log of a key's last limit requests: limit must be at most 65535, got 65536`}},
		{name: "fine with redis exact", rule: RuleConfig{Precision: "fine"}, cluster: "exact", want: []string{at + shared}},
		{name: "fine with redis batched", rule: RuleConfig{Precision: "fine"}, cluster: "batched", want: []string{at + shared}},
		{name: "fine with share", rule: RuleConfig{Precision: "fine"}, cluster: "share", want: []string{at + shared}},
		{name: "standard with redis", rule: RuleConfig{Precision: "standard"}, cluster: "exact"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			rc := tt.rule
			rc.Name, rc.Period = "r", time.Minute
			if rc.Limit == 0 {
				rc.Limit = 10
			}
			cfg.Domains[0].Rules = []RuleConfig{rc}
			switch tt.cluster {
			case "exact", "batched":
				cfg.Cluster.Store, cfg.Cluster.Sync = "redis", tt.cluster
				cfg.Cluster.Redis.Addresses = []string{"127.0.0.1:6379"}
			case "share":
				cfg.Cluster.Sync = "share"
				cfg.Cluster.Nodes = 2
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
			if got := tab.Domains[0].Rules[0].Precision == algorithm.Fine; got != tt.fine {
				t.Errorf("fine %v, want %v", got, tt.fine)
			}
		})
	}
}
