package rules

import (
	"reflect"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
)

// intp returns a pointer to n, for RuleConfig.Cost.
func intp(n int) *int { return &n }

// TestCompileCountingErrors: every combination of algorithm, burst,
// max_delay, cost, cost_header and max_cost that makes no sense, or is not
// supported yet, is one error naming the key and the value.
func TestCompileCountingErrors(t *testing.T) {
	const at = "domains[0] (api).rules[0] (r)." // as messages name the rule
	const key = "domains[0].rules[0]."          // as Config.Given spells it
	redis := func(c *Config) {
		c.Cluster.Store = "redis"
		c.Cluster.Redis.Addresses = []string{"127.0.0.1:6379"}
	}
	tests := []struct {
		name string
		rule RuleConfig // Name, Limit and Period are filled in: limit 10 per minute
		more func(c *Config)
		want []string
	}{
		{name: "unknown algorithm", rule: RuleConfig{Algorithm: "gcra"},
			want: []string{at + `algorithm: must be sliding_window, fixed_window, token_bucket, leaky_bucket, quota or concurrency, got "gcra"`}},
		{name: "algorithm is case-sensitive", rule: RuleConfig{Algorithm: "Token_Bucket"},
			want: []string{at + `algorithm: must be sliding_window, fixed_window, token_bucket, leaky_bucket, quota or concurrency, got "Token_Bucket"`}},
		{name: "period on concurrency", rule: RuleConfig{Algorithm: "concurrency"},
			want: []string{at + `period: does not apply to algorithm concurrency, which counts the requests in flight`}},
		{name: "cost, mitigation and counting after on concurrency", more: noPeriod,
			rule: RuleConfig{Algorithm: "concurrency", Cost: intp(1), MitigationTimeout: time.Minute, CountBlocked: true, ResponseCostHeader: "X-Cost"},
			want: []string{
				at + `cost: does not apply to algorithm concurrency, which counts the requests in flight`,
				at + `mitigation_timeout: does not apply to algorithm concurrency, which counts the requests in flight`,
				at + `count_blocked: does not apply to algorithm concurrency, which counts the requests in flight`,
				at + `response_cost_header: does not apply to algorithm concurrency, which counts the requests in flight`,
			}},
		{name: "burst on concurrency", rule: RuleConfig{Algorithm: "concurrency", Burst: 5}, more: noPeriod,
			want: []string{at + `burst: applies only to algorithm token_bucket or leaky_bucket, got 5 with concurrency`}},
		{name: "concurrency with redis batched", rule: RuleConfig{Algorithm: "concurrency"},
			more: func(c *Config) { noPeriod(c); redis(c); c.Cluster.Sync = "batched" },
			want: []string{at + `algorithm: concurrency with cluster.store redis needs cluster.sync exact (slots are leases taken in Redis per request), got sync batched`}},
		{name: "lease on a sliding window", rule: RuleConfig{Lease: time.Minute},
			want: []string{at + `lease: applies only to algorithm concurrency, got 1m with sliding_window`}},
		{name: "lease too short", rule: RuleConfig{Algorithm: "concurrency", Lease: 999 * time.Millisecond}, more: noPeriod,
			want: []string{at + `lease: must be between 1s and 1h, got 999ms`}},
		{name: "lease too long", rule: RuleConfig{Algorithm: "concurrency", Lease: 2 * time.Hour}, more: noPeriod,
			want: []string{at + `lease: must be between 1s and 1h, got 2h`}},
		{name: "lease below a millisecond", rule: RuleConfig{Algorithm: "concurrency", Lease: time.Second + time.Microsecond}, more: noPeriod,
			want: []string{at + `lease: must be a whole number of milliseconds, got 1.000001s`}},
		{name: "period on a quota", rule: RuleConfig{Algorithm: "quota", Reset: "daily"},
			want: []string{at + `period: does not apply to algorithm quota, which resets by reset (daily, weekly or monthly), got 1m`}},
		{name: "quota reset missing", rule: RuleConfig{Algorithm: "quota"}, more: noPeriod,
			want: []string{at + `reset: required with algorithm quota`}},
		{name: "quota reset unknown", rule: RuleConfig{Algorithm: "quota", Reset: "yearly"}, more: noPeriod,
			want: []string{at + `reset: must be daily, weekly or monthly, got "yearly"`}},
		{name: "reset on a token bucket", rule: RuleConfig{Algorithm: "token_bucket", Reset: "daily"},
			want: []string{at + `reset: applies only to algorithm quota, got "daily" with token_bucket`}},
		{name: "timezone on the default algorithm", rule: RuleConfig{Timezone: "UTC"},
			want: []string{at + `timezone: applies only to algorithm quota, got "UTC" with sliding_window`}},
		{name: "unknown timezone", rule: RuleConfig{Algorithm: "quota", Reset: "monthly", Timezone: "Mars/Olympus_Mons"}, more: noPeriod,
			want: []string{at + `timezone: unknown time zone "Mars/Olympus_Mons"`}},
		{name: "timezone Local", rule: RuleConfig{Algorithm: "quota", Reset: "monthly", Timezone: "Local"}, more: noPeriod,
			want: []string{at + `timezone: must be an IANA time zone name such as Europe/Berlin, got "Local"`}},
		{name: "timezone a path", rule: RuleConfig{Algorithm: "quota", Reset: "monthly", Timezone: "../../etc/passwd"}, more: noPeriod,
			want: []string{at + `timezone: must be an IANA time zone name such as Europe/Berlin, got "../../etc/passwd"`}},
		{name: "burst on a quota", rule: RuleConfig{Algorithm: "quota", Reset: "daily", Burst: 5}, more: noPeriod,
			want: []string{at + `burst: applies only to algorithm token_bucket or leaky_bucket, got 5 with quota`}},
		{name: "max_delay on a quota", rule: RuleConfig{Algorithm: "quota", Reset: "daily", MaxDelay: time.Second}, more: noPeriod,
			want: []string{at + `max_delay: applies only to algorithm leaky_bucket, got 1s with quota`}},
		{name: "cost above a quota's limit", rule: RuleConfig{Algorithm: "quota", Reset: "daily", Cost: intp(11)}, more: noPeriod,
			want: []string{at + `cost: must be at most the rule's limit (10), got 11`}},
		{name: "burst on sliding window", rule: RuleConfig{Burst: 20},
			want: []string{at + `burst: applies only to algorithm token_bucket or leaky_bucket, got 20 with sliding_window`}},
		{name: "burst on fixed window", rule: RuleConfig{Algorithm: "fixed_window", Burst: 20},
			want: []string{at + `burst: applies only to algorithm token_bucket or leaky_bucket, got 20 with fixed_window`}},
		{name: "burst negative", rule: RuleConfig{Algorithm: "token_bucket", Burst: -1},
			want: []string{at + `burst: must be between 1 and 1000000000, got -1`}},
		{name: "burst too large", rule: RuleConfig{Algorithm: "leaky_bucket", Burst: 1_000_000_001},
			want: []string{at + `burst: must be between 1 and 1000000000, got 1000000001`}},
		{name: "burst takes too long to fill", rule: RuleConfig{Algorithm: "token_bucket", Limit: 1, Burst: 2},
			more: func(c *Config) { c.Domains[0].Rules[0].Period = 720 * time.Hour },
			want: []string{at + `burst: must be at most 1 with limit 1 per 720h (an empty bucket must fill within 1192h), got 2`}},
		{name: "burst fills in just over 1192h", rule: RuleConfig{Algorithm: "leaky_bucket", Limit: 60, Burst: 4291201},
			want: []string{at + `burst: must be at most 4291200 with limit 60 per 1m (an empty bucket must fill within 1192h), got 4291201`}},
		{name: "max_delay on token bucket", rule: RuleConfig{Algorithm: "token_bucket", MaxDelay: 2 * time.Second},
			want: []string{at + `max_delay: applies only to algorithm leaky_bucket, got 2s with token_bucket`}},
		{name: "max_delay on sliding window", rule: RuleConfig{MaxDelay: time.Minute},
			want: []string{at + `max_delay: applies only to algorithm leaky_bucket, got 1m with sliding_window`}},
		{name: "max_delay under 1ms", rule: RuleConfig{Algorithm: "leaky_bucket", MaxDelay: time.Microsecond},
			want: []string{at + `max_delay: must be 0 (a meter) or between 1ms and 1h, got 1µs`}},
		{name: "max_delay over 1h", rule: RuleConfig{Algorithm: "leaky_bucket", MaxDelay: time.Hour + time.Second},
			want: []string{at + `max_delay: must be 0 (a meter) or between 1ms and 1h, got 1h0m1s`}},
		{name: "queue with batched redis", rule: RuleConfig{Algorithm: "leaky_bucket", MaxDelay: 2 * time.Second},
			more: func(c *Config) { redis(c); c.Cluster.Sync = "batched" },
			want: []string{
				at + `max_delay: a leaky_bucket queue (max_delay above 0) is not supported with cluster.sync batched (use exact), got 2s`,
			}},
		{name: "max_queued negative", more: func(c *Config) { c.Domains[0].MaxQueued = -1 },
			want: []string{`domains[0] (api).max_queued: must be between 1 and 1000000, got -1`}},
		{name: "max_queued too large", more: func(c *Config) { c.Domains[0].MaxQueued = 1_000_001 },
			want: []string{`domains[0] (api).max_queued: must be between 1 and 1000000, got 1000001`}},
		{name: "max_delay negative", rule: RuleConfig{Algorithm: "leaky_bucket", MaxDelay: -time.Second},
			want: []string{at + `max_delay: must not be negative, got -1s`}},
		{name: "cost negative", rule: RuleConfig{Cost: intp(-1)},
			want: []string{at + `cost: must be between 0 and 1000000, got -1`}},
		{name: "cost too large", rule: RuleConfig{Limit: 1_000_000_000, Cost: intp(1_000_001)},
			want: []string{at + `cost: must be between 0 and 1000000, got 1000001`}},
		{name: "cost over limit", rule: RuleConfig{Cost: intp(11)},
			want: []string{at + `cost: must be at most the rule's limit (10), got 11`}},
		{name: "cost over burst", rule: RuleConfig{Algorithm: "token_bucket", Burst: 5, Cost: intp(6)},
			want: []string{at + `cost: must be at most the rule's burst (5), got 6`}},
		{name: "cost over default burst", rule: RuleConfig{Algorithm: "leaky_bucket", Cost: intp(11)},
			want: []string{at + `cost: must be at most the rule's limit (10), got 11`}},
		{name: "cost with an invalid limit is not compared", rule: RuleConfig{Limit: -1, Cost: intp(11)},
			want: []string{at + `limit: must be at least 1, got -1`}},
		{name: "cost with an invalid burst is not compared", rule: RuleConfig{Algorithm: "token_bucket", Burst: -1, Cost: intp(11)},
			want: []string{at + `burst: must be between 1 and 1000000000, got -1`}},
		{name: "cost_header not a token", rule: RuleConfig{CostHeader: "X Cost", MaxCost: 5},
			want: []string{at + `cost_header: must be a header name (an HTTP token), got "X Cost"`}},
		{name: "cost_header with a colon", rule: RuleConfig{CostHeader: "X-Cost:", MaxCost: 5},
			want: []string{at + `cost_header: must be a header name (an HTTP token), got "X-Cost:"`}},
		{name: "cost_header Host", rule: RuleConfig{CostHeader: "host", MaxCost: 5},
			want: []string{at + `cost_header: must not be Host, got "host"`}},
		{name: "cost_header without max_cost", rule: RuleConfig{CostHeader: "X-Cost"},
			want: []string{at + `max_cost: required with cost_header`}},
		{name: "cost_header with max_cost 0", rule: RuleConfig{CostHeader: "X-Cost"},
			more: func(c *Config) { c.Given = map[string]bool{key + "max_cost": true} },
			want: []string{at + `max_cost: must be between 1 and 1000000, got 0`}},
		{name: "max_cost without cost_header", rule: RuleConfig{MaxCost: 5},
			want: []string{at + `max_cost: applies only with cost_header, got 5`}},
		{name: "max_cost negative", rule: RuleConfig{CostHeader: "X-Cost", MaxCost: -5},
			want: []string{at + `max_cost: must be between 1 and 1000000, got -5`}},
		{name: "max_cost too large", rule: RuleConfig{Limit: 1_000_000_000, CostHeader: "X-Cost", MaxCost: 1_000_001},
			want: []string{at + `max_cost: must be between 1 and 1000000, got 1000001`}},
		{name: "max_cost over limit", rule: RuleConfig{Algorithm: "fixed_window", CostHeader: "X-Cost", MaxCost: 11},
			want: []string{at + `max_cost: must be at most the rule's limit (10), got 11`}},
		{name: "max_cost over burst", rule: RuleConfig{Algorithm: "token_bucket", Burst: 3, CostHeader: "X-Cost", MaxCost: 4},
			want: []string{at + `max_cost: must be at most the rule's burst (3), got 4`}},
		{name: "everything at once", rule: RuleConfig{Algorithm: "fixed_window", Burst: 2, MaxDelay: time.Second, Cost: intp(-3), MaxCost: 2},
			want: []string{
				at + `burst: applies only to algorithm token_bucket or leaky_bucket, got 2 with fixed_window`,
				at + `max_delay: applies only to algorithm leaky_bucket, got 1s with fixed_window`,
				at + `cost: must be between 0 and 1000000, got -3`,
				at + `max_cost: applies only with cost_header, got 2`,
			}},
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
			if tt.more != nil {
				tt.more(&cfg)
			}
			wantErrors(t, cfg, tt.want)
		})
	}
}

// TestCompileCounting: valid counting settings compile as configured,
// with their defaults.
func TestCompileCounting(t *testing.T) {
	tests := []struct {
		name string
		rule RuleConfig // Name and Period are filled in
		want Rule       // only the counting fields are compared
		cap  int64
		sync string // cluster.sync, with cluster.store redis; "": local counters
	}{
		{name: "defaults", rule: RuleConfig{Limit: 10},
			want: Rule{Algorithm: algorithm.SlidingWindow, Cost: 1}, cap: 10},
		{name: "sliding window named", rule: RuleConfig{Limit: 10, Algorithm: "sliding_window"},
			want: Rule{Algorithm: algorithm.SlidingWindow, Cost: 1}, cap: 10},
		{name: "fixed window", rule: RuleConfig{Limit: 10, Algorithm: "fixed_window"},
			want: Rule{Algorithm: algorithm.FixedWindow, Cost: 1}, cap: 10},
		{name: "token bucket, burst from limit", rule: RuleConfig{Limit: 10, Algorithm: "token_bucket"},
			want: Rule{Algorithm: algorithm.TokenBucket, Cost: 1}, cap: 10},
		{name: "token bucket with burst", rule: RuleConfig{Limit: 10, Algorithm: "token_bucket", Burst: 25},
			want: Rule{Algorithm: algorithm.TokenBucket, Burst: 25, Cost: 1}, cap: 25},
		{name: "leaky bucket meter", rule: RuleConfig{Limit: 10, Algorithm: "leaky_bucket", Burst: 4, MaxDelay: 0},
			want: Rule{Algorithm: algorithm.LeakyBucket, Burst: 4, Cost: 1}, cap: 4},
		{name: "leaky bucket queue", rule: RuleConfig{Limit: 10, Algorithm: "leaky_bucket", Burst: 1, MaxDelay: 2 * time.Second},
			want: Rule{Algorithm: algorithm.LeakyBucket, Burst: 1, MaxDelay: 2 * time.Second, Cost: 1}, cap: 1},
		{name: "leaky bucket queue of 1ms", rule: RuleConfig{Limit: 10, Algorithm: "leaky_bucket", MaxDelay: time.Millisecond},
			want: Rule{Algorithm: algorithm.LeakyBucket, MaxDelay: time.Millisecond, Cost: 1}, cap: 10},
		{name: "leaky bucket queue of an hour", rule: RuleConfig{Limit: 10, Algorithm: "leaky_bucket", MaxDelay: time.Hour},
			want: Rule{Algorithm: algorithm.LeakyBucket, MaxDelay: time.Hour, Cost: 1}, cap: 10},
		{name: "burst fills in 1192h", rule: RuleConfig{Limit: 60, Algorithm: "leaky_bucket", Burst: 4291200},
			want: Rule{Algorithm: algorithm.LeakyBucket, Burst: 4291200, Cost: 1}, cap: 4291200},
		{name: "cost 0", rule: RuleConfig{Limit: 10, Cost: intp(0)},
			want: Rule{Cost: 0}, cap: 10},
		{name: "cost up to the limit", rule: RuleConfig{Limit: 10, Cost: intp(10)},
			want: Rule{Cost: 10}, cap: 10},
		{name: "cost up to the burst", rule: RuleConfig{Limit: 10, Algorithm: "token_bucket", Burst: 50, Cost: intp(50)},
			want: Rule{Algorithm: algorithm.TokenBucket, Burst: 50, Cost: 50}, cap: 50},
		{name: "cost header canonical", rule: RuleConfig{Limit: 100, CostHeader: "x-query-COST", MaxCost: 100},
			want: Rule{Cost: 1, CostHeader: "X-Query-Cost", MaxCost: 100}, cap: 100},
		{name: "cost header with default cost 0", rule: RuleConfig{Limit: 100, Cost: intp(0), CostHeader: "X-Cost", MaxCost: 1},
			want: Rule{Cost: 0, CostHeader: "X-Cost", MaxCost: 1}, cap: 100},
		{name: "redis exact token bucket", rule: RuleConfig{Limit: 10, Algorithm: "token_bucket", Burst: 5, Cost: intp(2)}, sync: "exact",
			want: Rule{Algorithm: algorithm.TokenBucket, Burst: 5, Cost: 2}, cap: 5},
		{name: "redis exact fixed window with cost header", rule: RuleConfig{Limit: 10, Algorithm: "fixed_window", CostHeader: "X-Cost", MaxCost: 10}, sync: "exact",
			want: Rule{Algorithm: algorithm.FixedWindow, Cost: 1, CostHeader: "X-Cost", MaxCost: 10}, cap: 10},
		{name: "redis exact leaky bucket cost 0", rule: RuleConfig{Limit: 10, Algorithm: "leaky_bucket", Cost: intp(0)}, sync: "exact",
			want: Rule{Algorithm: algorithm.LeakyBucket, Cost: 0}, cap: 10},
		{name: "redis exact leaky bucket queue", rule: RuleConfig{Limit: 10, Algorithm: "leaky_bucket", MaxDelay: 2 * time.Second}, sync: "exact",
			want: Rule{Algorithm: algorithm.LeakyBucket, Cost: 1, MaxDelay: 2 * time.Second}, cap: 10},
		{name: "redis batched token bucket", rule: RuleConfig{Limit: 10, Algorithm: "token_bucket", Burst: 20, Cost: intp(2)}, sync: "batched",
			want: Rule{Algorithm: algorithm.TokenBucket, Burst: 20, Cost: 2}, cap: 20},
		{name: "redis batched fixed window", rule: RuleConfig{Limit: 10, Algorithm: "fixed_window"}, sync: "batched",
			want: Rule{Algorithm: algorithm.FixedWindow, Cost: 1}, cap: 10},
		{name: "redis batched leaky bucket", rule: RuleConfig{Limit: 10, Algorithm: "leaky_bucket"}, sync: "batched",
			want: Rule{Algorithm: algorithm.LeakyBucket, Cost: 1}, cap: 10},
		{name: "redis batched sliding window with cost", rule: RuleConfig{Limit: 10, Cost: intp(3), CostHeader: "X-Cost", MaxCost: 4}, sync: "batched",
			want: Rule{Cost: 3, CostHeader: "X-Cost", MaxCost: 4}, cap: 10},
		{name: "redis exact quota", rule: RuleConfig{Limit: 10, Algorithm: "quota", Reset: "monthly", Cost: intp(2)}, sync: "exact",
			want: Rule{Algorithm: algorithm.Quota, Cost: 2}, cap: 10},
		{name: "redis batched quota", rule: RuleConfig{Limit: 10, Algorithm: "quota", Reset: "daily"}, sync: "batched",
			want: Rule{Algorithm: algorithm.Quota, Cost: 1}, cap: 10},
		{name: "concurrency, lease by default", rule: RuleConfig{Limit: 2, Algorithm: "concurrency"},
			want: Rule{Algorithm: algorithm.Concurrency, Cost: 1, Lease: 30 * time.Second}, cap: 2},
		{name: "redis exact concurrency, shortest lease", rule: RuleConfig{Limit: 2, Algorithm: "concurrency", Lease: time.Second}, sync: "exact",
			want: Rule{Algorithm: algorithm.Concurrency, Cost: 1, Lease: time.Second}, cap: 2},
		{name: "redis share concurrency", rule: RuleConfig{Limit: 2, Algorithm: "concurrency"}, sync: "share",
			want: Rule{Algorithm: algorithm.Concurrency, Cost: 1, Lease: 30 * time.Second}, cap: 2},
		{name: "redis exact concurrency, longest lease", rule: RuleConfig{Limit: 2, Algorithm: "concurrency", Lease: time.Hour}, sync: "exact",
			want: Rule{Algorithm: algorithm.Concurrency, Cost: 1, Lease: time.Hour}, cap: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			rc := tt.rule
			rc.Name, rc.Period = "r", time.Minute
			if rc.Algorithm == "quota" || rc.Algorithm == "concurrency" {
				rc.Period = 0
			}
			cfg.Domains[0].Rules = []RuleConfig{rc}
			if tt.sync != "" {
				cfg.Cluster.Store, cfg.Cluster.Sync = "redis", tt.sync
				cfg.Cluster.Redis.Addresses = []string{"127.0.0.1:6379"}
			}
			tab, err := Compile(cfg)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			r := tab.Domains[0].Rules[0]
			got := Rule{Algorithm: r.Algorithm, Burst: r.Burst, MaxDelay: r.MaxDelay, Cost: r.Cost, CostHeader: r.CostHeader, MaxCost: r.MaxCost, Lease: r.Lease}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if got := r.Capacity(); got != tt.cap {
				t.Errorf("Capacity() = %d, want %d", got, tt.cap)
			}
		})
	}
}

func TestAlgorithmString(t *testing.T) {
	for a, want := range map[algorithm.Algorithm]string{
		algorithm.SlidingWindow: "sliding_window", algorithm.FixedWindow: "fixed_window",
		algorithm.TokenBucket: "token_bucket", algorithm.LeakyBucket: "leaky_bucket", 9: "Algorithm(9)",
	} {
		if got := a.String(); got != want {
			t.Errorf("Algorithm(%d).String() = %q, want %q", a, got, want)
		}
	}
}

// TestCompileMaxQueued: a domain's max_queued defaults to 1000 and is kept
// when valid.
func TestCompileMaxQueued(t *testing.T) {
	tests := []struct {
		name string
		set  int
		want int
	}{
		{"default", 0, DefaultMaxQueued},
		{"one", 1, 1},
		{"most", MaxQueued, MaxQueued},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.Domains[0].MaxQueued = tt.set
			tab, err := Compile(cfg)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			if got := tab.Domains[0].MaxQueued; got != tt.want {
				t.Errorf("got max_queued %d, want %d", got, tt.want)
			}
		})
	}
}

// TestCompileSharedCountsAfter: count_status (a decision of cost 0, then a
// charge) and response_cost_header are shared through Redis in both modes.
func TestCompileSharedCountsAfter(t *testing.T) {
	for _, sync := range []string{"exact", "batched"} {
		t.Run(sync, func(t *testing.T) {
			cfg := validConfig()
			cfg.Cluster.Store, cfg.Cluster.Sync = "redis", sync
			cfg.Cluster.Redis.Addresses = []string{"127.0.0.1:6379"}
			cfg.Domains[0].Rules = []RuleConfig{
				{Name: "logins", Limit: 5, Period: time.Minute, CountStatus: []int{401, 403}},
				{Name: "cpu", Limit: 1000, Period: time.Minute, Cost: intp(0), ResponseCostHeader: "X-Cpu-Ms"},
			}
			tab, err := Compile(cfg)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			rs := tab.Domains[0].Rules
			if got := [2]bool{rs[0].CountStatus != nil, rs[1].ResponseCostHeader != ""}; got != [2]bool{true, true} {
				t.Errorf("got count_status, response_cost_header compiled %v, want both", got)
			}
		})
	}
}
