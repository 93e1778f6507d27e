package rules

import (
	"fmt"
	"slices"
	"time"
)

// Defaults of the cluster section, applied by [Compile].
const (
	DefaultBatchInterval     = 100 * time.Millisecond
	DefaultStoreBudget       = 20 * time.Millisecond
	DefaultHeartbeatInterval = time.Second
	DefaultRedisPoolSize     = 32
	DefaultRedisDialTimeout  = time.Second
)

// Cluster is a compiled [ClusterConfig]: how the nodes of a PoP share their
// counters. With Store == StoreLocal only Sync == SyncShare and its keys
// apply.
type Cluster struct {
	Store StoreKind

	Addresses    []string // host:port; exactly one unless RedisCluster
	RedisCluster bool
	Username     string
	Password     string // never shown by the admin API
	PoolSize     int
	DialTimeout  time.Duration

	Sync              SyncMode
	BatchInterval     time.Duration
	Budget            time.Duration
	OnStoreFailure    FailureMode
	HeartbeatInterval time.Duration

	// With Sync == SyncShare: how many nodes share each limit (with
	// StoreLocal; with StoreRedis the heartbeats count them and Nodes is
	// 0) and how each node's share is computed (cluster.EvenShare,
	// cluster.PoissonShare).
	Nodes           int
	Split           SplitMode
	SplitConfidence float64
}

// Equal reports whether two cluster settings are the same.
func (c Cluster) Equal(o Cluster) bool {
	return c.Store == o.Store && slices.Equal(c.Addresses, o.Addresses) && c.RedisCluster == o.RedisCluster &&
		c.Username == o.Username && c.Password == o.Password && c.PoolSize == o.PoolSize &&
		c.DialTimeout == o.DialTimeout && c.Sync == o.Sync && c.BatchInterval == o.BatchInterval &&
		c.Budget == o.Budget && c.OnStoreFailure == o.OnStoreFailure && c.HeartbeatInterval == o.HeartbeatInterval &&
		c.Nodes == o.Nodes && c.Split == o.Split && c.SplitConfidence == o.SplitConfidence
}

// StoreKind says where counters live. The zero value is StoreLocal.
type StoreKind uint8

const (
	StoreLocal StoreKind = iota // in each node's memory only
	StoreRedis                  // shared by the PoP's nodes through Redis
)

// String returns the config spelling, "local" or "redis".
func (s StoreKind) String() string { return storeSpelling.name(s) }

// SyncMode says how a node shares counts through Redis. The zero value is
// SyncExact.
type SyncMode uint8

const (
	SyncExact   SyncMode = iota // one atomic round trip per decision
	SyncBatched                 // local decisions, counts shared every batch interval
	SyncShare                   // each node decides alone with its share of each limit
)

// String returns the config spelling, "exact", "batched" or "share".
func (m SyncMode) String() string { return syncSpelling.name(m) }

// SplitMode says how a limit is split between the nodes with SyncShare.
// The zero value is SplitEven.
type SplitMode uint8

const (
	SplitEven    SplitMode = iota // limit ÷ nodes, rounded up
	SplitPoisson                  // the SplitConfidence quantile of Poisson(limit ÷ nodes)
)

// String returns the config spelling, "even" or "poisson".
func (m SplitMode) String() string { return splitSpelling.name(m) }

// DefaultSplitConfidence is cluster.split_confidence's default: each node
// wrongly refuses a client at the limit in at most 5% of windows.
const DefaultSplitConfidence = 0.95

// FailureMode says how requests are decided while Redis cannot answer. The
// zero value is FailLocal.
type FailureMode uint8

const (
	FailLocal  FailureMode = iota // node-local counters, each limit divided by the live nodes
	FailOpen                      // allow
	FailClosed                    // answer 503
)

// String returns the config spelling, "local", "open" or "closed".
func (m FailureMode) String() string { return failureSpelling.name(m) }

func compileCluster(p *problems, c ClusterConfig) Cluster {
	out := Cluster{
		Addresses:         c.Redis.Addresses,
		RedisCluster:      c.Redis.Cluster,
		Username:          c.Redis.Username,
		Password:          c.Redis.Password,
		PoolSize:          c.Redis.PoolSize,
		DialTimeout:       c.Redis.DialTimeout,
		BatchInterval:     c.BatchInterval,
		Budget:            c.Budget,
		HeartbeatInterval: c.HeartbeatInterval,
	}
	out.Store = storeSpelling.parse(p, "cluster.store", c.Store)
	out.Sync = syncSpelling.parse(p, "cluster.sync", c.Sync)
	out.OnStoreFailure = failureSpelling.parse(p, "cluster.on_store_failure", c.OnStoreFailure)
	for _, f := range []struct {
		path     string
		v        *time.Duration
		def      time.Duration
		min, max time.Duration
	}{
		{"cluster.batch_interval", &out.BatchInterval, DefaultBatchInterval, 10 * time.Millisecond, 10 * time.Second},
		{"cluster.budget", &out.Budget, DefaultStoreBudget, time.Millisecond, time.Second},
		{"cluster.heartbeat_interval", &out.HeartbeatInterval, DefaultHeartbeatInterval, 100 * time.Millisecond, time.Minute},
		{"cluster.redis.dial_timeout", &out.DialTimeout, DefaultRedisDialTimeout, time.Millisecond, 30 * time.Second},
	} {
		checkDuration(p, f.path, *f.v, f.min, f.max, false)
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if out.PoolSize == 0 {
		out.PoolSize = DefaultRedisPoolSize
	}
	if out.PoolSize < 1 || out.PoolSize > 10000 {
		p.add("cluster.redis.pool_size", "must be between 1 and 10000, got %d", out.PoolSize)
	}
	for i, a := range out.Addresses {
		path := fmt.Sprintf("cluster.redis.addresses[%d]", i)
		host, port, ok := checkAddr(p, path, a)
		switch {
		case !ok:
		case host == "":
			p.add(path, "must name a host, got %q", a)
		case port == 0:
			p.add(path, "port must be from 1 to 65535, got %q", a)
		}
	}
	if out.Store == StoreRedis {
		switch n := len(out.Addresses); {
		case n == 0:
			p.missing("cluster.redis.addresses", "with store redis", "must list the Redis server (host:port) with store redis")
		case n > 1 && !out.RedisCluster:
			p.add("cluster.redis.addresses", "must list exactly one server unless cluster is true, got %d", n)
		}
	}
	compileShare(p, c, &out)
	return out
}

// compileShare checks and compiles the keys of sync share, refused
// without it. With store local the node count is the fixed nodes; with
// store redis it is the live nodes the heartbeats count, and nodes is
// refused.
func compileShare(p *problems, c ClusterConfig, out *Cluster) {
	out.Nodes, out.SplitConfidence = c.Nodes, c.SplitConfidence
	out.Split = splitSpelling.parse(p, "cluster.split", c.Split)
	if out.Sync != SyncShare {
		for _, k := range []struct {
			path string
			set  bool
		}{
			{"cluster.nodes", c.Nodes != 0},
			{"cluster.split", c.Split != ""},
			{"cluster.split_confidence", c.SplitConfidence != 0},
		} {
			if k.set {
				p.add(k.path, "applies only with cluster.sync share, got sync %q", out.Sync.String())
			}
		}
		return
	}
	switch {
	case out.Store == StoreRedis:
		// The count is the live nodes the heartbeats find in Redis.
		if c.Nodes != 0 {
			p.add("cluster.nodes", "applies only with store local (with store redis the node count comes from the heartbeats), got %d", c.Nodes)
		}
	case c.Nodes == 0:
		p.missing("cluster.nodes", "with sync share", "must be between 1 and 10000 with sync share, got 0")
	case c.Nodes < 1 || c.Nodes > 10000:
		p.add("cluster.nodes", "must be between 1 and 10000 with sync share, got %d", c.Nodes)
	}
	if c.SplitConfidence != 0 && out.Split != SplitPoisson {
		// An even split takes no quantile: the value would be ignored.
		p.add("cluster.split_confidence", "applies only with cluster.split poisson, got %v with split %s", c.SplitConfidence, out.Split)
	}
	if out.SplitConfidence == 0 {
		out.SplitConfidence = DefaultSplitConfidence
	}
	if !(out.SplitConfidence > 0 && out.SplitConfidence < 1) {
		p.add("cluster.split_confidence", "must be above 0 and below 1, got %v", c.SplitConfidence)
	}
}
