package proxy

import (
	"fmt"
	"strings"
	"time"

	"github.com/edgerate/edge/cluster"
	"github.com/edgerate/edge/rules"
)

// Counting shared by the nodes of a PoP through Redis (cluster.store:
// redis). The Proxy makes one cluster.Client when it starts and keeps it for
// its lifetime: a reload never makes another (changes to the cluster section
// need a restart), so reloads cannot leak Redis clients or their goroutines.
// Each configuration gives each domain with rules a cluster.Domain as its
// window.Counter, in place of the domain's own window.Store; a request
// its counter cannot decide is answered by unavailable (refuse.go).

// nodeShare is the limit this node's counters hold for rule r: r's limit,
// or with cluster.sync share the node's share of it (cluster/split.go).
// The share is computed from the cluster settings edge started with, as
// they need a restart. Fields still show r's limit, the PoP's, in
// RateLimit-Policy and X-RateLimit-Limit, and the node's own remaining
// share in r and X-RateLimit-Remaining.
func (p *Proxy) nodeShare(r *rules.Rule) int64 {
	c := p.started.Cluster
	switch {
	case c.Sync != rules.SyncShare || r.Algorithm.Bucket():
		// Buckets are refused with sync share; one can meet it only in a
		// reload that sets sync back, which waits for the restart.
		return r.Limit
	case c.Store == rules.StoreRedis:
		// The store holds the PoP's limit; the domain's cluster.Share
		// decides with the share of the nodes counted now.
		return r.Limit
	case c.Split == rules.SplitPoisson:
		return cluster.PoissonShare(r.Limit, c.Nodes, c.SplitConfidence)
	default:
		return cluster.EvenShare(r.Limit, c.Nodes)
	}
}

// nodeCapacity is what a key's counter on this node holds when full: the
// rule's capacity, or with cluster.sync share (windows and quotas only)
// the node's share.
func (rs *ruleState) nodeCapacity() int64 {
	if rs.live != nil {
		return rs.live.NodeShare(rs.Index)
	}
	if rs.share != rs.Limit {
		return rs.share
	}
	return rs.Capacity()
}

// newCluster makes the Proxy's Redis client for table t, or nil in local
// mode.
func (p *Proxy) newCluster(t *rules.Table, node string) (*cluster.Client, error) {
	if t.Cluster.Store != rules.StoreRedis {
		return nil, nil
	}
	c, err := cluster.New(cluster.Options{
		Config: t.Cluster,
		Pop:    t.Pop,
		Node:   node,
		Logger: p.log,
		OnRoundTrip: func(op string, took time.Duration, err error) {
			p.metrics.storeRoundTrip.WithLabelValues(op).Observe(took.Seconds())
			if err != nil {
				p.metrics.storeErrors.WithLabelValues(cluster.ErrorReason(err)).Inc()
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return c, nil
}

// sharedDomain makes d's shared counting, which counts each rule by the
// limit d.store counts it by, or with sync share by the node's share of
// it (cluster.Share). Caller has made d.store and d.rules.
func (p *Proxy) sharedDomain(d *domain) error {
	if p.cluster.Config().Sync == rules.SyncShare {
		limits := make([]int64, len(d.all))
		for i, r := range d.all {
			limits[i] = r.Limit
		}
		sh := p.cluster.Share(d.store, limits)
		d.counter = sh
		for i := range d.all {
			d.all[i].live = sh
		}
		return nil
	}
	rs := make([]cluster.Rule, len(d.all))
	for i, r := range d.all { // a plan is a rule of its own (plans.go)
		key := make([]string, len(r.Key))
		for j, k := range r.Key {
			key[j] = k.String()
		}
		rs[i] = cluster.Rule{Name: r.Name, Key: strings.Join(key, ","), Lease: r.Lease}
	}
	sd, err := p.cluster.Domain(d.Name, rs, d.store)
	if err != nil {
		return fmt.Errorf("proxy: domain %q: %w", d.Name, err)
	}
	d.counter = sd
	mode := p.cluster.Config().OnStoreFailure.String()
	d.requests.fallback = p.metrics.storeFallback.WithLabelValues(d.Name, mode)
	d.requests.unavailable = p.metrics.requests.WithLabelValues(d.Name, "unavailable")
	return nil
}

// closeShared retires the shared counting of every domain of st.
func (st *state) closeShared() {
	for _, d := range st.domains {
		if d == nil {
			continue
		}
		if c, ok := d.counter.(interface{ Close() }); ok {
			c.Close()
		}
	}
}

// Close releases what the Proxy holds beyond memory: the Redis client and
// its goroutines in cluster mode (flushing batched counts once more). Call
// it after the servers using the Proxy have shut down. It is safe to call
// more than once.
func (p *Proxy) Close() error {
	p.origins.Close()
	p.checks.Close()
	retireTLS(p.state.Load(), nil)
	p.closeAccessLog() // accesslog.go: what it holds is written out
	p.reloadMu.Lock()
	for url, r := range p.jwks {
		r.Stop()
		delete(p.jwks, url)
	}
	p.reloadMu.Unlock()
	if p.cluster == nil {
		return nil
	}
	p.state.Load().closeShared()
	return p.cluster.Close()
}

// Cluster returns the Proxy's Redis client, nil in local mode: other
// front doors onto the same counters (the rate limit service, package rls)
// share it, and the ACME state of a PoP goes through it (cluster.Storage). Its lifetime is the Proxy's; do not close it.
func (p *Proxy) Cluster() *cluster.Client { return p.cluster }
