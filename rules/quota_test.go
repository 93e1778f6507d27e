package rules

import (
	"reflect"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, wherever the tests run

	"github.com/edgerate/edge/internal/algorithm"
)

// noPeriod leaves out the period TestCompileCountingErrors fills in, as a
// quota's configuration does.
func noPeriod(c *Config) { c.Domains[0].Rules[0].Period = 0 }

// TestCompileQuota: a quota compiles with its reset and zone (UTC by
// default) and no period; other algorithms have no zone.
func TestCompileQuota(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		rule RuleConfig // Name and Limit 10 are filled in
		want Rule       // only the calendar fields are compared
	}{
		{name: "monthly in UTC by default", rule: RuleConfig{Algorithm: "quota", Reset: "monthly"},
			want: Rule{Algorithm: algorithm.Quota, Reset: algorithm.Monthly, Location: time.UTC}},
		{name: "daily in Berlin", rule: RuleConfig{Algorithm: "quota", Reset: "daily", Timezone: "Europe/Berlin"},
			want: Rule{Algorithm: algorithm.Quota, Reset: algorithm.Daily, Location: berlin}},
		{name: "weekly", rule: RuleConfig{Algorithm: "quota", Reset: "weekly", Timezone: "UTC"},
			want: Rule{Algorithm: algorithm.Quota, Reset: algorithm.Weekly, Location: time.UTC}},
		{name: "a window has no zone", rule: RuleConfig{Period: time.Minute},
			want: Rule{Period: time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			rc := tt.rule
			rc.Name, rc.Limit = "r", 10
			cfg.Domains[0].Rules = []RuleConfig{rc}
			tab, err := Compile(cfg)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			r := tab.Domains[0].Rules[0]
			got := Rule{Algorithm: r.Algorithm, Reset: r.Reset, Location: r.Location, Period: r.Period}
			if got.Location.String() != tt.want.Location.String() || got.Location == nil != (tt.want.Location == nil) {
				t.Fatalf("got location %v, want %v", got.Location, tt.want.Location)
			}
			got.Location, tt.want.Location = nil, nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
