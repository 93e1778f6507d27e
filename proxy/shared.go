package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/edgerate/edge/cluster"
	"github.com/edgerate/edge/headers"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
)

// Counting shared by the nodes of a PoP through Redis (cluster.store:
// redis). The Proxy makes one cluster.Client when it starts and keeps it for
// its lifetime: a reload never makes another (changes to the cluster section
// need a restart), so reloads cannot leak Redis clients or their goroutines.
// Each configuration gives each domain with rules a cluster.Domain, which
// limit asks instead of the domain's window.Store; in local mode
// domain.shared is nil and limit is exactly what it was.

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

// sharedDomain makes d's shared counting. Caller has made d.store and
// d.rules.
func (p *Proxy) sharedDomain(d *domain) error {
	rs := make([]cluster.Rule, len(d.rules))
	for i, r := range d.rules {
		key := make([]string, len(r.Key))
		for j, k := range r.Key {
			key[j] = k.String()
		}
		rs[i] = cluster.Rule{
			Name: r.Name,
			Key:  strings.Join(key, ","),
			Limit: window.Limit{
				Limit:        r.Limit,
				Period:       r.Period,
				Mitigation:   r.MitigationTimeout,
				CountBlocked: r.CountBlocked,
			},
		}
	}
	sd, err := p.cluster.Domain(d.Name, rs, d.store)
	if err != nil {
		return fmt.Errorf("proxy: domain %q: %w", d.Name, err)
	}
	d.shared = sd
	mode := p.cluster.Config().OnStoreFailure.String()
	d.requests.fallback = p.metrics.storeFallback.WithLabelValues(d.Name, mode)
	d.requests.unavailable = p.metrics.requests.WithLabelValues(d.Name, "unavailable")
	return nil
}

// closeShared retires the shared counting of every domain of st.
func (st *state) closeShared() {
	for _, d := range st.domains {
		if d != nil && d.shared != nil {
			d.shared.Close()
		}
	}
}

// sharedDone ends a request's use of the shared store.
func (p *Proxy) sharedDone(d *domain, call *cluster.Call) {
	call.Close()
	if call.Fallback {
		d.requests.fallback.Inc()
	}
}

// refundShared gives back what the rules that do not count blocked requests
// counted for a request that is refused.
func refundShared(d *domain, vs []verdict, call *cluster.Call, now time.Time) {
	for i := range vs {
		if v := &vs[i]; !d.rules[v.rule].CountBlocked {
			v.Decision = d.shared.Refund(call, v.rule, v.key, v.Decision, now)
		}
	}
}

// unavailable answers a request that Redis could not decide under
// on_store_failure: closed: 503 with a Retry-After of the time until Redis
// is tried again (at least 1 s). What the request's earlier rules counted
// is given back where Redis still answers.
func (p *Proxy) unavailable(w http.ResponseWriter, r *http.Request, d *domain, vs []verdict, call *cluster.Call, now time.Time) {
	refundShared(d, vs, call, now)
	p.sharedDone(d, call)
	d.requests.unavailable.Inc()
	h := w.Header()
	headers.SetRetryAfter(h, call.RetryAfter)
	h["Cache-Control"] = []string{"no-store"}
	writeText(w, http.StatusServiceUnavailable, "rate limit store unavailable: retry in "+
		strconv.FormatInt(headers.RetryAfterSeconds(call.RetryAfter), 10)+"s\n")
}

// Close releases what the Proxy holds beyond memory: the Redis client and
// its goroutines in cluster mode (flushing batched counts once more). Call
// it after the servers using the Proxy have shut down. It is safe to call
// more than once.
func (p *Proxy) Close() error {
	if p.cluster == nil {
		return nil
	}
	p.state.Load().closeShared()
	return p.cluster.Close()
}
