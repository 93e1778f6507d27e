package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/cluster"
	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/rules"
)

// TestEveryAlgorithmHasAnExample: configs/ has one example per algorithm
// edge implements, named after it (configs/token-bucket.yaml), whose rules
// all use it; TestEveryConfigLoads loads them.
func TestEveryAlgorithmHasAnExample(t *testing.T) {
	for _, a := range []algorithm.Algorithm{algorithm.SlidingWindow, algorithm.FixedWindow, algorithm.TokenBucket, algorithm.LeakyBucket, algorithm.Quota} {
		path := "../../configs/" + strings.ReplaceAll(a.String(), "_", "-") + ".yaml"
		t.Run(a.String(), func(t *testing.T) {
			table, _, err := loadConfig(path)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			n := 0
			for _, d := range table.Domains {
				for _, r := range d.Rules {
					n++
					if r.Algorithm != a {
						t.Errorf("%s: rule %s counts with %s, want %s", path, r.Name, r.Algorithm, a)
					}
				}
			}
			if n == 0 {
				t.Errorf("%s has no rules", path)
			}
		})
	}
}

// TestCountingKeysDecode: the counting keys as a file spells them: cost 0
// is a cost, not the default; integers and durations follow the file's
// rules; what is not supported yet says so, naming the key.
func TestCountingKeysDecode(t *testing.T) {
	const head = "domains: [{hosts: [\"*\"], respond: {body: ok}, rules: [{name: a, limit: 10, period: 1m, "
	tests := []struct {
		name string
		rule string
		want string // an error, or "" for none
		cost int64
	}{
		{name: "cost left out is 1", rule: "", cost: 1},
		{name: "cost 0 is 0", rule: "cost: 0", cost: 0},
		{name: "cost 7", rule: "cost: 7", cost: 7},
		{name: "cost as a string of digits", rule: `cost: "3"`, cost: 3},
		{name: "cost fraction", rule: "cost: 1.5",
			want: "domains[0] (_).rules[0] (a).cost: must be a whole number, got 1.5"},
		{name: "cost word", rule: "cost: cheap",
			want: `domains[0] (_).rules[0] (a).cost: must be a whole number, got "cheap"`},
		{name: "max_delay without unit", rule: "algorithm: leaky_bucket, max_delay: 2",
			want: "domains[0] (_).rules[0] (a).max_delay: a duration needs a unit, such as 30s or 1m; got 2"},
		{name: "max_delay 0 without unit", rule: "algorithm: leaky_bucket, max_delay: 0", cost: 1},
		{name: "max_delay queue", rule: "algorithm: leaky_bucket, max_delay: 2s", cost: 1},
		{name: "max_delay queue too long", rule: "algorithm: leaky_bucket, max_delay: 2h",
			want: "domains[0] (_).rules[0] (a).max_delay: must be 0 (a meter) or between 1ms and 1h, got 2h"},
		{name: "quota takes no period", rule: "algorithm: quota, reset: daily",
			want: "domains[0] (_).rules[0] (a).period: does not apply to algorithm quota, which resets by reset (daily, weekly or monthly), got 1m"},
		{name: "burst fraction", rule: "algorithm: token_bucket, burst: 2.5",
			want: "domains[0] (_).rules[0] (a).burst: must be a whole number, got 2.5"},
		{name: "max_cost 0 written", rule: "cost_header: X-Cost, max_cost: 0",
			want: "domains[0] (_).rules[0] (a).max_cost: must be between 1 and 1000000, got 0"},
		{name: "max_cost left out", rule: "cost_header: X-Cost",
			want: "domains[0] (_).rules[0] (a).max_cost: required with cost_header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := parseConfig([]byte(head + tt.rule + "}]}]\n"))
			switch {
			case tt.want != "":
				if err == nil || err.Error() != tt.want {
					t.Errorf("got error %v, want %q", err, tt.want)
				}
			case err != nil:
				t.Errorf("got error %v, want none", err)
			default:
				if got := table.Domains[0].Rules[0].Cost; got != tt.cost {
					t.Errorf("cost = %d, want %d", got, tt.cost)
				}
			}
		})
	}
}

// TestDocsAlgorithmsExample: the rules docs/algorithms.md's "Algorithms" shows load,
// and RateLimit-Policy is as docs/algorithms.md says for its token bucket.
func TestDocsAlgorithmsExample(t *testing.T) {
	section := docSection(t, "docs/algorithms.md", "Algorithms")
	example := docYAML(t, "docs/algorithms.md", "Algorithms", section)
	cfg := "domains:\n  - hosts: [\"*\"]\n    respond: {body: ok}\n" + indent(example, "    ")
	table, err := parseConfig([]byte(cfg))
	if err != nil {
		t.Fatalf("docs/algorithms.md's Algorithms example: %v\n%s", err, cfg)
	}
	got := []algorithm.Algorithm{}
	for _, r := range table.Domains[0].Rules {
		got = append(got, r.Algorithm)
	}
	if want := []algorithm.Algorithm{algorithm.TokenBucket, algorithm.LeakyBucket}; !slices.Equal(got, want) {
		t.Errorf("docs/algorithms.md's example rules count with %v, want %v", got, want)
	}
	if !strings.Contains(section, "`limit: 100`, `period: 1m`, `burst: 20` is sent as `\"api\";q=20;w=12`") {
		t.Error("docs/algorithms.md's Algorithms no longer shows the token bucket's policy as checked by proxy's TestPolicyOf")
	}
}

// indent puts prefix before every non-empty line of s.
func indent(s, prefix string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "\n")
}

// TestDocsQuotaExample: the quota example in docs/algorithms.md's "Algorithms"
// (the last yaml block before "Concurrency") loads as a throttle beside a
// monthly quota in Berlin.
func TestDocsQuotaExample(t *testing.T) {
	section, _, _ := strings.Cut(docSection(t, "docs/algorithms.md", "Algorithms"), "### Concurrency")
	i := strings.LastIndex(section, "```yaml\n")
	if i < 0 || !strings.Contains(section[i:], "algorithm: quota") {
		t.Fatal("docs/algorithms.md's Algorithms has no quota example last")
	}
	example, _, _ := strings.Cut(section[i+len("```yaml\n"):], "```")
	cfg := "domains:\n  - hosts: [\"*\"]\n    respond: {body: ok}\n" + indent(example, "    ")
	table, err := parseConfig([]byte(cfg))
	if err != nil {
		t.Fatalf("docs/algorithms.md's quota example: %v\n%s", err, cfg)
	}
	rs := table.Domains[0].Rules
	if len(rs) != 2 || rs[1].Algorithm != algorithm.Quota || rs[1].Reset != algorithm.Monthly || rs[1].Location.String() != "Europe/Berlin" {
		t.Errorf("docs/algorithms.md's quota example: got %d rules, the second %v, want a monthly quota in Europe/Berlin second", len(rs), rs[len(rs)-1])
	}
}

// TestDocsConcurrencyExample: the example in docs/algorithms.md's "Concurrency" (the
// last yaml block of "Algorithms") loads as a concurrency limit beside a
// token bucket.
func TestDocsConcurrencyExample(t *testing.T) {
	_, section, ok := strings.Cut(docSection(t, "docs/algorithms.md", "Algorithms"), "### Concurrency")
	i := strings.LastIndex(section, "```yaml\n")
	if !ok || i < 0 {
		t.Fatal("docs/algorithms.md's Algorithms has no Concurrency example")
	}
	example, _, _ := strings.Cut(section[i+len("```yaml\n"):], "```")
	cfg := "domains:\n  - hosts: [\"*\"]\n    respond: {body: ok}\n" + indent(example, "    ")
	table, err := parseConfig([]byte(cfg))
	if err != nil {
		t.Fatalf("docs/algorithms.md's concurrency example: %v\n%s", err, cfg)
	}
	rs := table.Domains[0].Rules
	if len(rs) != 2 || rs[0].Algorithm != algorithm.Concurrency || rs[0].Limit != 20 || rs[0].Period != 0 || rs[1].Algorithm != algorithm.TokenBucket {
		t.Errorf("docs/algorithms.md's concurrency example: got %d rules, want a concurrency limit of 20 then a token bucket", len(rs))
	}
}

// TestDocsConcurrencyRedisExample: docs/algorithms.md's example of a concurrency
// limit shared through Redis, and configs/concurrency-redis.yaml, compile
// to what their comments say: slots leased in Redis in exact mode, with
// the lease given or the default 30s.
func TestDocsConcurrencyRedisExample(t *testing.T) {
	_, section, _ := strings.Cut(docSection(t, "docs/algorithms.md", "Algorithms"), "### Concurrency")
	_, example, ok := strings.Cut(section, "```yaml\ncluster:")
	if !ok {
		t.Fatal("docs/algorithms.md's Concurrency has no example with a cluster section")
	}
	example, _, _ = strings.Cut(example, "```")
	readme, err := parseConfig([]byte("origin: \"http://127.0.0.1:9001\"\ncluster:" + example))
	if err != nil {
		t.Fatalf("docs/algorithms.md's concurrency example over Redis: %v", err)
	}
	file, _, err := loadConfig("../../configs/concurrency-redis.yaml")
	if err != nil {
		t.Fatalf("configs/concurrency-redis.yaml: %v", err)
	}
	tests := []struct {
		name   string
		table  *rules.Table
		leases []time.Duration
	}{
		{"docs/algorithms.md", readme, []time.Duration{10 * time.Second}},
		{"configs/concurrency-redis.yaml", file, []time.Duration{10 * time.Second, 30 * time.Second}},
	}
	for _, tt := range tests {
		c := tt.table.Cluster
		if c.Store != rules.StoreRedis || c.Sync != rules.SyncExact {
			t.Errorf("%s: store %s sync %s, want redis exact", tt.name, c.Store, c.Sync)
		}
		var got []time.Duration
		for _, r := range tt.table.Domains[0].Rules {
			if r.Algorithm != algorithm.Concurrency {
				t.Errorf("%s: rule %s is %s, want concurrency", tt.name, r.Name, r.Algorithm)
			}
			got = append(got, r.Lease)
		}
		if !slices.Equal(got, tt.leases) {
			t.Errorf("%s: leases %v, want %v", tt.name, got, tt.leases)
		}
	}
}

// TestDocsShareExamples: docs/cluster.md's examples of sync share, and
// configs/share-redis.yaml, compile to what their comments say: 364 a
// minute on each of three nodes; over Redis no fixed node count, and a
// Poisson share of 1000 that is the whole limit on a node alone, 537 on
// each of two, 364 on each of three.
func TestDocsShareExamples(t *testing.T) {
	section := docSection(t, "docs/cluster.md", "Limits without coordination (`sync: share`)")
	var blocks []string
	for rest := section; ; {
		_, after, found := strings.Cut(rest, "```yaml\n")
		if !found {
			break
		}
		block, tail, _ := strings.Cut(after, "```")
		blocks, rest = append(blocks, block), tail
	}
	if len(blocks) != 2 {
		t.Fatalf("docs/cluster.md's Limits without coordination has %d YAML examples, want 2", len(blocks))
	}
	local, err := parseConfig([]byte("origin: \"http://127.0.0.1:9001\"\n" + blocks[0]))
	if err != nil {
		t.Fatalf("docs/cluster.md's share example: %v", err)
	}
	if c := local.Cluster; c.Store != rules.StoreLocal || c.Nodes != 3 {
		t.Errorf("docs/cluster.md's share example: store %s, nodes %d; want local, 3", c.Store, c.Nodes)
	}
	if got := cluster.NodeShare(local.Cluster, local.Domains[0].Rules[0].Limit, 3); got != 364 {
		t.Errorf("docs/cluster.md's share example: a node's share %d, want 364 as its comment says", got)
	}
	redis, err := parseConfig([]byte("origin: \"http://127.0.0.1:9001\"\n" + blocks[1] +
		"domains: [{hosts: [\"*\"], rules: [{name: r, limit: 10, period: 1m}]}]\n"))
	if err != nil {
		t.Fatalf("docs/cluster.md's share example over Redis: %v", err)
	}
	if c := redis.Cluster; c.Store != rules.StoreRedis || c.Sync != rules.SyncShare || c.Nodes != 0 || c.Split != rules.SplitPoisson {
		t.Errorf("docs/cluster.md's share example over Redis: %+v, want store redis, sync share, no nodes, split poisson", c)
	}
	file, _, err := loadConfig("../../configs/share-redis.yaml")
	if err != nil {
		t.Fatalf("configs/share-redis.yaml: %v", err)
	}
	for nodes, want := range map[int]int64{1: 1000, 2: 537, 3: 364} {
		if got := cluster.NodeShare(file.Cluster, file.Domains[0].Rules[0].Limit, nodes); got != want {
			t.Errorf("configs/share-redis.yaml: share on each of %d nodes %d, want %d as its comment says", nodes, got, want)
		}
	}
}

// TestSoftRedisExample: configs/soft-redis.yaml is a soft limit shared in
// exact mode with a hard backstop, as its comments say.
func TestSoftRedisExample(t *testing.T) {
	table, _, err := loadConfig("../../configs/soft-redis.yaml")
	if err != nil {
		t.Fatalf("configs/soft-redis.yaml: %v", err)
	}
	rs := table.Domains[0].Rules
	if c := table.Cluster; c.Store != rules.StoreRedis || c.Sync != rules.SyncExact {
		t.Errorf("store %s sync %s, want redis exact", c.Store, c.Sync)
	}
	if len(rs) != 2 || !rs[0].Soft || rs[0].Limit != 1000 || rs[1].Soft {
		t.Errorf("want a soft rule of 1000 then a hard one, got %d rules", len(rs))
	}
}
