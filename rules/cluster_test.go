package rules

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCompileClusterDefaults(t *testing.T) {
	tab, err := Compile(validConfig())
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	want := Cluster{
		Store: StoreLocal, PoolSize: 32, DialTimeout: time.Second,
		Sync: SyncExact, BatchInterval: 100 * time.Millisecond, Budget: 20 * time.Millisecond,
		OnStoreFailure: FailLocal, HeartbeatInterval: time.Second,
	}
	if !reflect.DeepEqual(tab.Cluster, want) {
		t.Errorf("cluster defaults: got %+v, want %+v", tab.Cluster, want)
	}
	cfg := validConfig()
	cfg.Cluster = ClusterConfig{
		Store: "redis", Sync: "batched", OnStoreFailure: "closed", Budget: 5 * time.Millisecond,
		Redis: RedisConfig{Addresses: []string{"10.0.0.1:6379", "10.0.0.2:6379"}, Cluster: true, Password: "secret"},
	}
	tab, err = Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	c := tab.Cluster
	if c.Store != StoreRedis || c.Sync != SyncBatched || c.OnStoreFailure != FailClosed || c.Budget != 5*time.Millisecond ||
		!c.RedisCluster || !slices.Equal(c.Addresses, []string{"10.0.0.1:6379", "10.0.0.2:6379"}) || c.Password != "secret" {
		t.Errorf("cluster: got %+v", c)
	}
	if !c.Equal(c) || c.Equal(want) {
		t.Errorf("Equal: a setting must equal itself and differ from another")
	}
}

func TestCompileClusterShare(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ClusterConfig
		want Cluster
	}{
		{"even by default", ClusterConfig{Sync: "share", Nodes: 3}, Cluster{Nodes: 3, Split: SplitEven, SplitConfidence: 0.95}},
		{"poisson", ClusterConfig{Sync: "share", Nodes: 10, Split: "poisson", SplitConfidence: 0.99},
			Cluster{Nodes: 10, Split: SplitPoisson, SplitConfidence: 0.99}},
		{"store redis: nodes from the heartbeats", ClusterConfig{Store: "redis", Redis: RedisConfig{Addresses: []string{"127.0.0.1:6379"}}, Sync: "share", Split: "poisson"},
			Cluster{Store: StoreRedis, Nodes: 0, Split: SplitPoisson, SplitConfidence: 0.95}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.Cluster = tc.cfg
			tab, err := Compile(cfg)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			c := tab.Cluster
			if c.Store != tc.want.Store || c.Sync != SyncShare || c.Nodes != tc.want.Nodes || c.Split != tc.want.Split || c.SplitConfidence != tc.want.SplitConfidence {
				t.Errorf("got %+v, want nodes %d, split %v, confidence %v", c, tc.want.Nodes, tc.want.Split, tc.want.SplitConfidence)
			}
		})
	}
}

func TestCompileClusterErrors(t *testing.T) {
	redis := func(c *Config) { c.Cluster.Store = "redis"; c.Cluster.Redis.Addresses = []string{"127.0.0.1:6379"} }
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string
	}{
		{"unknown store", func(c *Config) { c.Cluster.Store = "memcached" },
			[]string{`cluster.store: must be local or redis, got "memcached"`}},
		{"redis without addresses", func(c *Config) { c.Cluster.Store = "redis" },
			[]string{`cluster.redis.addresses: required with store redis`}},
		{"redis with an empty list of addresses", func(c *Config) {
			c.Cluster.Store, c.Given = "redis", map[string]bool{"cluster.redis.addresses": true}
		}, []string{`cluster.redis.addresses: must list the Redis server (host:port) with store redis`}},
		{"two servers without cluster", func(c *Config) {
			redis(c)
			c.Cluster.Redis.Addresses = append(c.Cluster.Redis.Addresses, "127.0.0.2:6379")
		}, []string{`cluster.redis.addresses: must list exactly one server unless cluster is true, got 2`}},
		{"bad addresses", func(c *Config) {
			redis(c)
			c.Cluster.Redis.Cluster = true
			c.Cluster.Redis.Addresses = []string{"redis", ":6379", "redis:0"}
		}, []string{
			`cluster.redis.addresses[0]: must be host:port, got "redis"`,
			`cluster.redis.addresses[1]: must name a host, got ":6379"`,
			`cluster.redis.addresses[2]: port must be from 1 to 65535, got "redis:0"`,
		}},
		{"unknown sync", func(c *Config) { redis(c); c.Cluster.Sync = "eventual" },
			[]string{`cluster.sync: must be exact, batched or share, got "eventual"`}},
		{"share without nodes", func(c *Config) { c.Cluster.Sync = "share" },
			[]string{`cluster.nodes: required with sync share`}},
		{"share with nodes and confidence out of range", func(c *Config) {
			c.Cluster.Sync, c.Cluster.Nodes, c.Cluster.Split, c.Cluster.SplitConfidence = "share", 10001, "poisson", 1
		}, []string{
			`cluster.nodes: must be between 1 and 10000 with sync share, got 10001`,
			`cluster.split_confidence: must be above 0 and below 1, got 1`,
		}},
		{"unknown split", func(c *Config) { c.Cluster.Sync, c.Cluster.Nodes, c.Cluster.Split = "share", 3, "random" },
			[]string{`cluster.split: must be even or poisson, got "random"`}},
		{"share keys without sync share", func(c *Config) {
			c.Cluster.Nodes, c.Cluster.Split, c.Cluster.SplitConfidence = 3, "even", 0.9
		}, []string{
			`cluster.nodes: applies only with cluster.sync share, got sync "exact"`,
			`cluster.split: applies only with cluster.sync share, got sync "exact"`,
			`cluster.split_confidence: applies only with cluster.sync share, got sync "exact"`,
		}},
		{"split_confidence with split even", func(c *Config) {
			c.Cluster.Sync, c.Cluster.Nodes, c.Cluster.SplitConfidence = "share", 3, 0.9
		}, []string{`cluster.split_confidence: applies only with cluster.split poisson, got 0.9 with split even`}},
		{"share with store redis and nodes", func(c *Config) { redis(c); c.Cluster.Sync, c.Cluster.Nodes = "share", 3 },
			[]string{`cluster.nodes: applies only with store local (with store redis the node count comes from the heartbeats), got 3`}},
		{"share with a bucket", func(c *Config) {
			c.Cluster.Sync, c.Cluster.Nodes = "share", 3
			c.Domains[0].Rules[0].Algorithm = "token_bucket"
		}, []string{`domains[0] (api).rules[0] (all).algorithm: is not supported yet with cluster.sync share (windows, quotas and concurrency are; a bucket's rate and burst are not split), got "token_bucket"`}},
		{"unknown failure mode", func(c *Config) { redis(c); c.Cluster.OnStoreFailure = "retry" },
			[]string{`cluster.on_store_failure: must be local, open or closed, got "retry"`}},
		{"durations out of range", func(c *Config) {
			redis(c)
			c.Cluster.BatchInterval = time.Millisecond
			c.Cluster.Budget = 2 * time.Second
			c.Cluster.HeartbeatInterval = -time.Second
			c.Cluster.Redis.DialTimeout = time.Hour
		}, []string{
			`cluster.batch_interval: must be between 10ms and 10s, got 1ms`,
			`cluster.budget: must be between 1ms and 1s, got 2s`,
			`cluster.heartbeat_interval: must be between 100ms and 1m, got -1s`,
			`cluster.redis.dial_timeout: must be between 1ms and 30s, got 1h`,
		}},
		{"pool size", func(c *Config) { redis(c); c.Cluster.Redis.PoolSize = -1 },
			[]string{`cluster.redis.pool_size: must be between 1 and 10000, got -1`}},
		{"redis settings are checked with store local too", func(c *Config) { c.Cluster.Redis.Addresses = []string{"nohost"} },
			[]string{`cluster.redis.addresses[0]: must be host:port, got "nohost"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			tt.mutate(&cfg)
			_, err := Compile(cfg)
			if err == nil {
				t.Fatalf("Compile = nil error, want %q", tt.want)
			}
			if got := errorLines(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("got errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestClusterEnumStrings(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{StoreLocal.String(), "local"}, {StoreRedis.String(), "redis"}, {StoreKind(9).String(), "StoreKind(9)"},
		{SyncExact.String(), "exact"}, {SyncBatched.String(), "batched"}, {SyncShare.String(), "share"}, {SyncMode(9).String(), "SyncMode(9)"},
		{SplitEven.String(), "even"}, {SplitPoisson.String(), "poisson"},
		{FailLocal.String(), "local"}, {FailOpen.String(), "open"}, {FailClosed.String(), "closed"},
		{FailureMode(9).String(), "FailureMode(9)"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
