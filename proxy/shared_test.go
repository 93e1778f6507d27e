package proxy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/cluster"
	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/rueidis"
)

// The tests here run edge nodes (Proxy values in this process, on the real
// clock, as Redis's clock is real) against real redis-server processes.

// testBudget is the store budget in these tests, and budgetSlack what a
// request may take beyond it under the race detector on two cores. The
// budget is ten times the default (20ms): at 50ms a node's first calls to a
// healthy Redis missed it under the race detector on a busy machine, and
// the tests that count through Redis read that as Redis failing.
const (
	testBudget  = 200 * time.Millisecond
	budgetSlack = 100 * time.Millisecond
)

func sharedConfig(addr, sync, fail string, r rules.RuleConfig) rules.Config {
	return rules.Config{
		Pop: "test", Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1",
		Cluster: rules.ClusterConfig{
			Store: "redis", Redis: rules.RedisConfig{Addresses: []string{addr}},
			Sync: sync, OnStoreFailure: fail, Budget: testBudget,
			BatchInterval: 100 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond,
		},
		Domains: []rules.DomainConfig{{
			Name: "site", Hosts: []string{"site.test"},
			Respond: &rules.ResponseConfig{Body: "ok"},
			Rules:   []rules.RuleConfig{r},
		}},
	}
}

// newNodes starts n edge nodes of one PoP and waits until each knows of
// all n (when Redis is up) and has sent its scripts.
func newNodes(t *testing.T, n int, cfg rules.Config, redisUp bool) []*Proxy {
	t.Helper()
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	ps := make([]*Proxy, n)
	for i := range ps {
		ps[i], err = New(Options{Table: table, Registerer: prometheus.NewRegistry(), Version: "test", Node: "node" + strconv.Itoa(i)})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { ps[i].Close() })
	}
	if redisUp {
		for _, p := range ps {
			wait.For(t, 2*time.Second, "every node registered", func() bool { return p.cluster.Nodes() == n })
			waitScripts(t, p)
		}
	}
	return ps
}

// waitScripts waits until p has loaded its scripts into Redis, so that its
// first requests do not pay EVAL: the first heartbeat Redis answers is
// followed by loading them, so once a second heartbeat is seen that is
// done.
func waitScripts(t testing.TB, p *Proxy) {
	t.Helper()
	wait.For(t, 2*time.Second, "a second heartbeat", func() bool { return roundTrips(t, p, "heartbeat") >= 2 })
}

// roundTrips is how many round trips to Redis for op ("heartbeat",
// "flush", ...) p has made, read from its edge_store_round_trip_seconds.
func roundTrips(t testing.TB, p *Proxy, op string) uint64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(p.metrics.storeRoundTrip); err != nil {
		t.Fatalf("registering the round trip histogram: %v", err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// hit sends one request from ip to p and returns its response and how long
// edge took.
func hit(p *Proxy, ip string) (*httptest.ResponseRecorder, time.Duration) {
	req := httptest.NewRequest("GET", "http://site.test/", nil)
	req.RemoteAddr = ip + ":40000"
	w := httptest.NewRecorder()
	start := time.Now()
	p.ServeHTTP(w, req)
	return w, time.Since(start)
}

// fallbacks is p's count of requests decided without Redis.
func fallbacks(p *Proxy) int {
	mode := p.cluster.Config().OnStoreFailure.String()
	return int(testutil.ToFloat64(p.metrics.storeFallback.WithLabelValues("site", mode)))
}

// TestSharedExactThreeNodes: one client's requests, concurrent and spread
// over three nodes, get exactly the limit through in exact mode.
func TestSharedExactThreeNodes(t *testing.T) {
	srv := redistest.Start(t)
	ps := newNodes(t, 3, sharedConfig(srv.Addr, "exact", "closed", rule("per-ip", 30, time.Hour)), true)
	var ok, limited, other atomic.Int64
	var wg sync.WaitGroup
	for g := range 9 {
		wg.Go(func() {
			for range 10 {
				w, _ := hit(ps[g%3], "198.51.100.7")
				switch w.Code {
				case 200:
					ok.Add(1)
				case 429:
					limited.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != 30 || limited.Load() != 60 || other.Load() != 0 {
		t.Errorf("90 requests over three nodes, limit 30: got %d allowed, %d limited, %d other; want 30, 60, 0",
			ok.Load(), limited.Load(), other.Load())
	}
	for i, p := range ps {
		if n := fallbacks(p); n != 0 {
			t.Errorf("node %d decided %d requests without redis", i, n)
		}
	}
	t.Logf("%d keys in redis, all with a TTL", srv.CheckTTLs(t))
}

// TestSharedExactMitigation: a mitigation started on one node blocks the
// client on every node, with Retry-After of the mitigation's length.
func TestSharedExactMitigation(t *testing.T) {
	srv := redistest.Start(t)
	r := rule("per-ip", 3, time.Minute)
	r.MitigationTimeout = time.Hour
	ps := newNodes(t, 2, sharedConfig(srv.Addr, "exact", "closed", r), true)
	for i := range 3 {
		if w, _ := hit(ps[i%2], "203.0.113.5"); w.Code != 200 {
			t.Fatalf("request %d: status %d, want 200", i, w.Code)
		}
	}
	for i, p := range ps {
		w, _ := hit(p, "203.0.113.5")
		ra, _ := strconv.Atoi(w.Header().Get("Retry-After"))
		// The mitigation ends on a whole millisecond, rounded up, as in a
		// node's own store: 3600 s and up to 1 ms, 3601 once rounded up.
		if w.Code != 429 || ra < 3599 || ra > 3601 {
			t.Errorf("node %d after the limit: status %d Retry-After %q, want 429 and 3600 or 3601 (the mitigation)", i, w.Code, w.Header().Get("Retry-After"))
		}
	}
	if n := srv.CheckTTLs(t); n == 0 {
		t.Error("no keys in redis")
	}
}

// TestSharedBatchedOvershoot: batched nodes share counts every 100 ms; a
// client sending steadily over three nodes gets the limit through, plus at
// most what it sends in two intervals (a node learns what the others counted
// at its own next flush after theirs).
func TestSharedBatchedOvershoot(t *testing.T) {
	srv := redistest.Start(t)
	const limit, rate = 60, 200 // requests per hour; requests per second
	ps := newNodes(t, 3, sharedConfig(srv.Addr, "batched", "local", rule("per-ip", limit, time.Hour)), true)
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	allowed := 0
	for i := range 2 * rate {
		<-tick.C
		if w, _ := hit(ps[i%3], "192.0.2.44"); w.Code == 200 {
			allowed++
		}
	}
	bound := limit + 2*rate*100/1000
	t.Logf("batched, 3 nodes, limit %d, %d requests/s for 2s: %d allowed (bound %d; each node alone would allow %d)",
		limit, rate, allowed, bound, 3*limit)
	if allowed < limit || allowed > bound {
		t.Errorf("allowed %d, want from %d to %d", allowed, limit, bound)
	}
	srv.CheckTTLs(t)
}

// TestSharedRedisAbsentAtStart: edge starts and serves while Redis is down
// (by its failure mode), and uses Redis within 2 s of its coming up.
func TestSharedRedisAbsentAtStart(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	ps := newNodes(t, 1, sharedConfig(srv.Addr, "exact", "closed", rule("per-ip", 5, time.Hour)), false)
	for i := range 5 {
		w, took := hit(ps[0], "198.51.100.9")
		if w.Code != 503 || took > testBudget+budgetSlack {
			t.Fatalf("request %d with redis absent: status %d after %v, want 503 within the budget", i, w.Code, took)
		}
		if ra, _ := strconv.Atoi(w.Header().Get("Retry-After")); ra < 1 {
			t.Fatalf("request %d: Retry-After %q, want at least 1", i, w.Header().Get("Retry-After"))
		}
	}
	if n := fallbacks(ps[0]); n != 5 {
		t.Errorf("fallback requests %d, want 5", n)
	}
	since := time.Now()
	srv.Restart()
	wait.For(t, 2*time.Second, "closed circuit", func() bool { return ps[0].cluster.State() == cluster.Closed })
	t.Logf("redis in use %v after it came up", time.Since(since).Round(time.Millisecond))
	if w, _ := hit(ps[0], "198.51.100.9"); w.Code != http.StatusOK {
		t.Errorf("after redis came up: status %d, want 200", w.Code)
	}
	srv.CheckTTLs(t)
}

// TestSharedReloadKeepsOneClient: reloads reuse the Proxy's Redis client
// (no new client or goroutine per reload) and report cluster changes as
// needing a restart.
func TestSharedReloadKeepsOneClient(t *testing.T) {
	srv := redistest.Start(t)
	cfg := sharedConfig(srv.Addr, "batched", "local", rule("per-ip", 5, time.Hour))
	ps := newNodes(t, 1, cfg, true)
	p := ps[0]
	c := p.cluster
	for i := range 20 {
		cfg.Domains[0].Rules[0].Limit = 5 + i
		if i == 19 {
			cfg.Cluster.OnStoreFailure = "open"
		}
		table, err := rules.Compile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Reload(table, "h"+strconv.Itoa(i))
		if err != nil {
			t.Fatalf("Reload: %v", err)
		}
		if i == 19 && !slices.Equal(res.RestartRequired, []string{"cluster.on_store_failure"}) {
			t.Errorf("restart_required got %v, want [cluster.on_store_failure]", res.RestartRequired)
		}
		hit(p, "192.0.2.9")
	}
	if p.cluster != c {
		t.Fatal("a reload replaced the Redis client")
	}
	c.Close()
	// Only the running configuration's batch is left registered.
	if w, _ := hit(p, "192.0.2.9"); w.Code != 200 && w.Code != 429 {
		t.Fatalf("status %d", w.Code)
	}
}

// TestSharedAdminGetKey: in exact mode the admin API's GET shows the PoP's
// counters, read from Redis, on a node that decided none of the client's
// requests; a mitigation started elsewhere shows too. With Redis gone the
// GET answers 503 instead of this node's empty store. In batched mode it
// shows the node's store, which holds the merged counts.
func TestSharedAdminGetKey(t *testing.T) {
	get := func(t *testing.T, p *Proxy, key string) (int, keyState) {
		t.Helper()
		w := httptest.NewRecorder()
		p.AdminHandler().ServeHTTP(w, httptest.NewRequest("GET", "/v1/keys/site/per-ip/"+key, nil))
		var ks keyState
		if w.Code == 200 {
			if err := json.Unmarshal(w.Body.Bytes(), &ks); err != nil {
				t.Fatalf("GET %s: %v in %s", key, err, w.Body)
			}
		}
		return w.Code, ks
	}
	t.Run("exact", func(t *testing.T) {
		srv := redistest.Start(t)
		r := rule("per-ip", 3, time.Hour)
		r.MitigationTimeout = 2 * time.Hour
		ps := newNodes(t, 2, sharedConfig(srv.Addr, "exact", "closed", r), true)
		for range 2 {
			hit(ps[0], "203.0.113.5")
		}
		code, ks := get(t, ps[1], "203.0.113.5")
		if code != 200 || ks.Source != "redis" || ks.Current != 2 || ks.Remaining != 1 || ks.MitigatedUntil != nil {
			t.Fatalf("GET on the other node after 2 requests: %d %+v, want 200 from redis, 2 counted, 1 remaining", code, ks)
		}
		for range 2 {
			hit(ps[0], "203.0.113.5") // the limit, then a block that starts the mitigation
		}
		code, ks = get(t, ps[1], "203.0.113.5")
		// A mitigation ends on a whole millisecond, rounded up, in Redis as
		// in a node's own store: up to 1ms past 2h.
		if code != 200 || ks.Current != 3 || ks.Remaining != 0 || ks.MitigatedUntil == nil || ks.RetryAfter < 7199 || ks.RetryAfter > 7200.001 {
			t.Fatalf("GET on the other node after the block: %d %+v, want 3 counted, mitigated for 2h", code, ks)
		}
		if code, ks := get(t, ps[1], "192.0.2.1"); code != 404 {
			t.Fatalf("GET of a key redis does not hold: %d %+v, want 404", code, ks)
		}
		srv.Kill()
		if code, _ := get(t, ps[1], "203.0.113.5"); code != 503 {
			t.Fatalf("GET with redis gone: %d, want 503", code)
		}
	})
	t.Run("batched", func(t *testing.T) {
		srv := redistest.Start(t)
		ps := newNodes(t, 1, sharedConfig(srv.Addr, "batched", "closed", rule("per-ip", 30, time.Hour)), true)
		for range 4 {
			hit(ps[0], "203.0.113.5")
		}
		if code, ks := get(t, ps[0], "203.0.113.5"); code != 200 || ks.Source != "node" || ks.Current != 4 {
			t.Fatalf("GET in batched mode: %d %+v, want 200 from the node, 4 counted", code, ks)
		}
	})
}

// maxCounter is the largest request counter in the Redis server of c (keys
// named "<prefix>:<period start>"), 0 if none.
func maxCounter(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	keys, err := c.Do(t.Context(), c.B().Keys().Pattern("edge:*}:[0-9]*").Build()).AsStrSlice()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	var most int64
	for _, k := range keys {
		n, err := c.Do(t.Context(), c.B().Get().Key(k).Build()).AsInt64()
		if err != nil {
			t.Fatalf("GET %s: %v", k, err)
		}
		most = max(most, n)
	}
	return most
}

// TestSharedResponseCost: a cost the origin reports on one node reaches
// Redis with the node's next flush and refuses the client on another node,
// in exact and in batched mode. Batched nodes read back the PoP's counts
// only of keys they touched, so there the other node sees the client
// first.
func TestSharedResponseCost(t *testing.T) {
	srv := redistest.Start(t)
	origin := newCostOrigin(t)
	for _, sync := range []string{"exact", "batched"} {
		t.Run(sync, func(t *testing.T) {
			r := rule("cpu-"+sync, 10, time.Hour)
			r.ResponseCostHeader = "X-Edge-Cost"
			cfg := sharedConfig(srv.Addr, sync, "local", r)
			cfg.Domains[0].Respond, cfg.Domains[0].Origin = nil, origin.URL
			ps := newNodes(t, 2, cfg, true)
			get := func(p *Proxy, target string) int {
				req := httptest.NewRequest("GET", "http://site.test"+target, nil)
				req.RemoteAddr = "192.0.2.70:40000"
				w := httptest.NewRecorder()
				p.ServeHTTP(w, req)
				if v := w.Header().Get("X-Edge-Cost"); v != "" {
					t.Errorf("client saw X-Edge-Cost %q", v)
				}
				return w.Code
			}
			steps := []struct {
				node   int
				target string
				want   int
			}{
				{1, "/", 200},        // 1 counted
				{0, "/?cost=8", 200}, // 1 + 8: 10 once shared
			}
			for _, s := range steps {
				if got := get(ps[s.node], s.target); got != s.want {
					t.Fatalf("node %d %s: got %d, want %d", s.node, s.target, got, s.want)
				}
			}
			// Node 0's next flush carries the charge to Redis, where
			// node 1 decides (exact), or from where node 1's next flush
			// brings it back for a key node 1 touched (batched). Without
			// the charge node 1 would be allowed 8 more requests: a few
			// attempts tell the two apart, and cover a flush that was
			// under way as the charge was made.
			flusher := ps[0]
			if sync == "batched" {
				flusher = ps[1]
			}
			for attempt := 1; ; attempt++ {
				f := roundTrips(t, flusher, "flush")
				if sync == "batched" {
					get(ps[1], "/")
				}
				wait.For(t, 2*time.Second, "a flush", func() bool { return roundTrips(t, flusher, "flush") > f })
				if get(ps[1], "/") == 429 {
					break
				}
				if attempt == 3 {
					t.Fatalf("node 1 still allowed after %d flushes: the charge did not reach it", attempt)
				}
			}
			srv.CheckTTLs(t)
		})
	}
}

// TestSharedExactAlgorithms: in exact mode every algorithm is shared, with
// any cost: two nodes answer one client as one node would, whichever node
// a request reaches. count_status decides at cost 0 and charges a counted
// status to the shared bucket at once.
func TestSharedExactAlgorithms(t *testing.T) {
	srv := redistest.Start(t)
	origin := newCostOrigin(t)
	three := 3
	type step struct {
		node   int
		target string
		cost   string // X-Cost, if any
		want   int
	}
	tests := []struct {
		name  string
		rule  rules.RuleConfig
		steps []step
	}{
		{"token bucket count_status",
			rules.RuleConfig{Name: "logins", Algorithm: "token_bucket", Limit: 3, Period: time.Hour, CountStatus: []int{401}},
			[]step{{0, "/?status=401", "", 401}, {1, "/?status=401", "", 401}, {0, "/", "", 200}, {1, "/?status=401", "", 401}, {0, "/", "", 429}}},
		{"leaky bucket cost_header",
			rules.RuleConfig{Name: "meter", Algorithm: "leaky_bucket", Limit: 2, Period: time.Hour, Burst: 3, CostHeader: "X-Cost", MaxCost: 3},
			[]step{{0, "/", "2", 200}, {1, "/", "2", 429}, {1, "/", "1", 200}, {0, "/", "0", 429}}},
		{"fixed window cost",
			rules.RuleConfig{Name: "fixed", Algorithm: "fixed_window", Limit: 7, Period: time.Hour, Cost: &three},
			[]step{{0, "/", "", 200}, {1, "/", "", 200}, {0, "/", "", 429}, {1, "/", "", 429}}},
		{"sliding window cost_header",
			rules.RuleConfig{Name: "sliding", Limit: 5, Period: time.Hour, CostHeader: "X-Cost", MaxCost: 5},
			[]step{{0, "/", "4", 200}, {1, "/", "2", 429}, {1, "/", "1", 200}, {0, "/", "0", 429}}},
		{"quota cost_header",
			rules.RuleConfig{Name: "plan", Algorithm: "quota", Limit: 4, Reset: "monthly", Timezone: "Europe/Berlin", CostHeader: "X-Cost", MaxCost: 4},
			[]step{{0, "/", "3", 200}, {1, "/", "2", 429}, {1, "/", "1", 200}, {0, "/", "0", 429}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := sharedConfig(srv.Addr, "exact", "closed", tt.rule)
			cfg.Domains[0].Respond, cfg.Domains[0].Origin = nil, origin.URL
			ps := newNodes(t, 2, cfg, true)
			for i, s := range tt.steps {
				req := httptest.NewRequest("GET", "http://site.test"+s.target, nil)
				req.RemoteAddr = "192.0.2.80:40000"
				if s.cost != "" {
					req.Header.Set("X-Cost", s.cost)
				}
				w := httptest.NewRecorder()
				ps[s.node].ServeHTTP(w, req)
				if w.Code != s.want {
					t.Fatalf("step %d, node %d %s cost %q: got %d, want %d", i, s.node, s.target, s.cost, w.Code, s.want)
				}
			}
			for i, p := range ps {
				if n := fallbacks(p); n != 0 {
					t.Errorf("node %d decided %d requests without redis", i, n)
				}
			}
			srv.CheckTTLs(t)
		})
	}
}

// TestSharedExactQueue: a leaky bucket queue in exact mode takes every
// turn from the one level in Redis, so that two nodes space one client's
// requests as one queue would. Limit 20 a second (a turn every 50ms),
// burst 1, max_delay 200ms: of ten requests sent at once, five to each
// node, the first is forwarded at once and four more at their turns, 50ms
// apart (each node queueing on its own level would forward all ten); those
// whose turn is more than 200ms away are refused. The test runs on the
// real clock, as Redis's is real: a request is answered no earlier than its
// turn, and within a bound of it.
func TestSharedExactQueue(t *testing.T) {
	srv := redistest.Start(t)
	r := rule("q", 20, time.Second)
	r.Algorithm, r.Burst, r.MaxDelay = "leaky_bucket", 1, 200*time.Millisecond
	ps := newNodes(t, 2, sharedConfig(srv.Addr, "exact", "closed", r), true)
	type answer struct {
		node, status int
		at           time.Duration // after the first request was sent
	}
	answers := make([]answer, 10)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range answers {
		wg.Go(func() {
			w, _ := hit(ps[i%2], "192.0.2.90")
			answers[i] = answer{i % 2, w.Code, time.Since(t0)}
		})
	}
	wg.Wait()
	var forwarded []answer
	for _, a := range answers {
		switch a.status {
		case 200:
			forwarded = append(forwarded, a)
		case 429:
		default:
			t.Errorf("node %d answered %d, want 200 or 429", a.node, a.status)
		}
	}
	slices.SortFunc(forwarded, func(a, b answer) int { return int(a.at - b.at) })
	// Five turns; a sixth only if deciding the ten took a whole turn.
	if n := len(forwarded); n < 5 || n > 6 {
		t.Fatalf("got %d forwarded (%+v), want 5 (or 6 on a slow machine)", n, forwarded)
	}
	const turn, late = 50 * time.Millisecond, 300 * time.Millisecond
	for k, a := range forwarded {
		// Its turn comes k turns after the first request's decision, which
		// is after t0; Redis's clock and ours are the machine's, in µs.
		if earliest := time.Duration(k)*turn - time.Millisecond; a.at < earliest || a.at > time.Duration(k)*turn+late {
			t.Errorf("forwarded request %d (node %d): answered after %v, want in [%v, %v]",
				k, a.node, a.at, earliest, time.Duration(k)*turn+late)
		}
	}
	for i, p := range ps {
		if n := fallbacks(p); n != 0 {
			t.Errorf("node %d decided %d requests without redis", i, n)
		}
	}
	srv.CheckTTLs(t)
}
