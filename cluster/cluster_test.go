package cluster

import (
	"context"
	"math/big"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

// testConfig is a cluster section for tests: a budget roomy enough for the
// race detector on two cores, quick heartbeats and flushes.
func testConfig(addr string, sync rules.SyncMode, fail rules.FailureMode) rules.Cluster {
	return rules.Cluster{
		Store: rules.StoreRedis, Addresses: []string{addr}, PoolSize: 16, DialTimeout: time.Second,
		Sync: sync, BatchInterval: 50 * time.Millisecond, Budget: 50 * time.Millisecond,
		OnStoreFailure: fail, HeartbeatInterval: 100 * time.Millisecond,
	}
}

func newClient(t *testing.T, cfg rules.Cluster, node string) *Client {
	t.Helper()
	c, err := New(Options{Config: cfg, Pop: "test", Node: node})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newDomain returns a domain "site" with one rule "r" and its store.
func newDomain(t *testing.T, c *Client, l window.Limit) (*Domain, *window.Store) {
	t.Helper()
	store, err := window.New(window.Options{Capacity: 1024, Limits: []window.Limit{l}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Domain("site", []Rule{{Name: "r", Key: "ip"}}, store)
	if err != nil {
		t.Fatalf("Domain: %v", err)
	}
	t.Cleanup(d.Close)
	return d, store
}

// allow asks d for one request of client key.
func allow(d *Domain, store *window.Store, key string) (window.Decision, *tally) {
	call := d.Begin().(*tally)
	defer call.End()
	return call.Decide(id(store, key), 1, time.Now()), call
}

// id is client key's ID under rule 0 of store.
func id(store *window.Store, key string) window.ID {
	return window.ID{Key: store.KeyString(0, key), Name: []byte(key)}
}

// checkTTLs fails t if any key in srv has no TTL, and logs how many keys
// there are.
func checkTTLs(t *testing.T, srv *redistest.Server) {
	t.Helper()
	t.Logf("%d keys in redis, all with a TTL", srv.CheckTTLs(t))
}

func TestBreaker(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var b breaker
	b.probeFor = 50 * time.Millisecond
	var changes []string
	b.onChange = func(from, to State) { changes = append(changes, from.String()+">"+to.String()) }
	steps := []struct {
		name string
		do   func()
		want State
	}{
		{"two failures keep it closed", func() { b.failure(t0); b.failure(t0) }, Closed},
		{"a success resets the count", func() { b.success(); b.failure(t0); b.failure(t0) }, Closed},
		{"the third failure in a row opens it", func() { b.failure(t0) }, Open},
		{"no round trip while open", func() {
			if b.allow(t0.Add(50 * time.Millisecond)) {
				t.Error("allowed a round trip during the open spell")
			}
		}, Open},
		{"after the spell one probe goes", func() {
			if !b.allow(t0.Add(minOpen)) {
				t.Error("no probe after the open spell")
			}
			if b.allow(t0.Add(minOpen)) {
				t.Error("a second probe while the first is out")
			}
		}, HalfOpen},
		{"a failed probe opens it for longer", func() { b.failure(t0.Add(minOpen)) }, Open},
		{"still open after the first spell's length", func() {
			if b.allow(t0.Add(minOpen + minOpen)) {
				t.Error("the second spell was not longer")
			}
		}, Open},
		{"a probe that does not report is given up", func() {
			at := t0.Add(minOpen + 2*minOpen)
			if !b.allow(at) || !b.allow(at.Add(b.probeFor)) {
				t.Error("no new probe after the first was given up")
			}
		}, HalfOpen},
		{"a success closes it", func() {
			if !b.success() {
				t.Error("success did not report closing")
			}
		}, Closed},
	}
	for _, s := range steps {
		s.do()
		if got := b.State(); got != s.want {
			t.Fatalf("%s: state %v, want %v", s.name, got, s.want)
		}
	}
	if got, want := len(changes), 5; got != want {
		t.Errorf("state changes %v: got %d, want %d", changes, got, want)
	}
	for range 20 {
		b.failure(t0)
		b.allow(t0.Add(time.Hour))
		b.failure(t0)
		if d := b.untilProbe(t0); d > maxOpen {
			t.Fatalf("open spell %v, want at most %v", d, maxOpen)
		}
	}
}

// TestDecideScriptIsExact checks the Lua estimate against exact integer
// arithmetic where doubles would round: counts near 10⁹ and the longest
// period.
func TestDecideScriptIsExact(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, testConfig(srv.Addr, rules.SyncExact, rules.FailLocal), "n1")
	r := srv.Client()
	ctx := context.Background()
	const period = 720 * time.Hour
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 300 {
		limit := 1 + rng.Int64N(1_000_000_000)
		prev := rng.Int64N(2 * limit)
		curr := rng.Int64N(limit + 1)
		if i%3 == 0 {
			prev, curr = limit, limit/2 // near the threshold
		}
		prefix := "edge:test:site:r:2592000s:{" + strconv.Itoa(i) + "}"
		now, err := r.Do(ctx, r.B().Time().Build()).AsIntSlice() // seconds, microseconds
		if err != nil {
			t.Fatal(err)
		}
		start := now[0] / 2592000 * 2592000
		for k, v := range map[int64]int64{start: curr, start - 2592000: prev} {
			key, val := prefix+":"+strconv.FormatInt(k, 10), strconv.FormatInt(v, 10)
			if err := r.Do(ctx, r.B().Set().Key(key).Value(val).Ex(time.Hour).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		vals, err := c.exec(ctx, decideScript, []string{prefix}, []string{
			strconv.FormatInt(limit, 10), strconv.FormatInt(int64(period/time.Microsecond), 10), "0", "0"}).AsIntSlice()
		if err != nil {
			t.Fatal(err)
		}
		e := vals[4]
		// allowed iff prev×(P−e) < (limit−curr)×P, in exact integers.
		P := big.NewInt(int64(period / time.Microsecond))
		lhs := new(big.Int).Mul(big.NewInt(prev), new(big.Int).Sub(P, big.NewInt(e)))
		rhs := new(big.Int).Mul(big.NewInt(limit-curr), P)
		want := curr < limit && lhs.Cmp(rhs) < 0
		if got := vals[0] == 1; got != want {
			t.Fatalf("limit %d prev %d curr %d elapsed %dµs: script allowed=%v, exact arithmetic says %v", limit, prev, curr, e, got, want)
		}
	}
	checkTTLs(t, srv)
}

// TestExactResetIsWaitForMoreQuota: in exact mode a decision's Reset (the
// "t" of the RateLimit field) is the wait until the client's remaining quota
// grows by one, computed from the counts Redis judged by, as the store
// computes it from its own; a refund describes the quota without the
// request taken back.
func TestExactResetIsWaitForMoreQuota(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr, rules.SyncExact, rules.FailClosed)
	cfg.Budget = 250 * time.Millisecond // no fallback under -race
	c := newClient(t, cfg, "n1")
	wait.For(t, 2*time.Second, "scripts loaded", c.scriptsLoaded.Load)
	const period = time.Hour
	l := window.Limit{Limit: 3, Period: period}
	d, store := newDomain(t, c, l)
	// elapsed is how far into its period Redis counted the call's request.
	elapsed := func(call *tally) time.Duration {
		if len(call.counted) != 1 {
			t.Fatalf("call counted %d requests, want 1", len(call.counted))
		}
		return call.counted[0].counts.Elapsed
	}
	tests := []struct {
		name   string
		client string
		before int  // requests sent first
		refund bool // take the request back
		// want gives Remaining and Reset from the elapsed time of the
		// request's period (when it was counted).
		wantRemaining int64
		wantReset     func(e time.Duration) time.Duration
	}{
		// One request in the current period: counted at full weight
		// until the period ends, then it starts to drain.
		{"first request", "a", 0, false, 2, func(e time.Duration) time.Duration { return period - e + 1 }},
		{"last allowed, r=0", "b", 2, false, 0, func(e time.Duration) time.Duration { return period - e + 1 }},
		{"refunded, nothing left counted", "c", 0, true, 3, func(time.Duration) time.Duration { return 0 }},
		{"refunded, one left counted", "d", 1, true, 2, func(e time.Duration) time.Duration { return period - e + 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range tt.before {
				if dec, _ := allow(d, store, tt.client); !dec.Allowed || dec.Fallback {
					t.Fatalf("earlier request: got %+v, fallback %v", dec, dec.Fallback)
				}
			}
			call := d.Begin().(*tally)
			defer call.End()
			dec := call.Decide(id(store, tt.client), 1, time.Now())
			if !dec.Allowed || dec.Fallback {
				t.Fatalf("got %+v, fallback %v, want allowed by redis", dec, dec.Fallback)
			}
			e := elapsed(call)
			if tt.refund {
				dec = call.Refund(id(store, tt.client), dec, time.Now())
			}
			if dec.Remaining != tt.wantRemaining || dec.Reset != tt.wantReset(e) {
				t.Errorf("got Remaining %d, Reset %v; want %d, %v", dec.Remaining, dec.Reset, tt.wantRemaining, tt.wantReset(e))
			}
		})
	}
	t.Run("blocked", func(t *testing.T) {
		for range 3 {
			allow(d, store, "e")
		}
		dec, _ := allow(d, store, "e")
		if dec.Allowed || dec.Fallback {
			t.Fatalf("4th request: got %+v, fallback %v, want blocked by redis", dec, dec.Fallback)
		}
		if dec.Reset != dec.RetryAfter || dec.RetryAfter <= 0 || dec.RetryAfter > period+1 {
			t.Errorf("got Reset %v, RetryAfter %v: want them equal, in (0, %v]", dec.Reset, dec.RetryAfter, period+1)
		}
	})
	checkTTLs(t, srv)
}

// TestExactAcrossNodes: three nodes share one Redis; requests of one client
// spread over all three, concurrently, get exactly the limit through.
func TestExactAcrossNodes(t *testing.T) {
	srv := redistest.Start(t)
	l := window.Limit{Limit: 40, Period: time.Hour}
	var ds [3]*Domain
	var ss [3]*window.Store
	for i := range ds {
		cfg := testConfig(srv.Addr, rules.SyncExact, rules.FailClosed)
		cfg.Budget = 250 * time.Millisecond // this test is about counting, not latency: no fallback under -race
		c := newClient(t, cfg, "n"+strconv.Itoa(i))
		wait.For(t, 2*time.Second, "scripts loaded", c.scriptsLoaded.Load)
		ds[i], ss[i] = newDomain(t, c, l)
	}
	var allowed, fallback atomic.Int64
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			for range 10 {
				d, _ := allow(ds[g%3], ss[g%3], "198.51.100.7")
				if d.Fallback {
					fallback.Add(1)
				}
				if d.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if fallback.Load() != 0 {
		t.Fatalf("%d requests decided without redis", fallback.Load())
	}
	if got := allowed.Load(); got != l.Limit {
		t.Errorf("allowed %d of 120 requests over three nodes, want exactly the limit, %d", got, l.Limit)
	}
	checkTTLs(t, srv)
}

func TestNodesCount(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr, rules.SyncExact, rules.FailLocal)
	a := newClient(t, cfg, "a")
	b := newClient(t, cfg, "b")
	c := newClient(t, cfg, "c")
	wait.For(t, 2*time.Second, "three nodes", func() bool { return a.Nodes() == 3 && b.Nodes() == 3 && c.Nodes() == 3 })
	c.Close()
	wait.For(t, 2*time.Second, "two nodes after one left", func() bool { return a.Nodes() == 2 })
	checkTTLs(t, srv)
}

// TestBudgetAgainstStoppedRedis: a Redis that stops answering (SIGSTOP)
// costs a request at most the budget, then the circuit opens and requests
// cost nothing; when it answers again, shared counting resumes within 2 s.
func TestBudgetAgainstStoppedRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr, rules.SyncExact, rules.FailOpen)
	c := newClient(t, cfg, "n1")
	d, store := newDomain(t, c, window.Limit{Limit: 1000, Period: time.Minute})
	if dec, _ := allow(d, store, "warm"); dec.Fallback {
		t.Fatal("decided without redis before any fault")
	}
	srv.Stop()
	for i := range 10 {
		start := time.Now()
		dec, _ := allow(d, store, "client")
		took := time.Since(start)
		if !dec.Fallback || !dec.Allowed {
			t.Fatalf("request %d against a stopped redis: fallback %v allowed %v, want an open fallback", i, dec.Fallback, dec.Allowed)
		}
		if slack := 100 * time.Millisecond; took > cfg.Budget+slack {
			t.Fatalf("request %d took %v, want at most the budget %v (+%v)", i, took, cfg.Budget, slack)
		}
	}
	if c.State() != Open {
		t.Fatalf("circuit %v after 10 failures, want open", c.State())
	}
	srv.Cont()
	took := wait.For(t, 2*time.Second, "closed circuit", func() bool { return c.State() == Closed })
	t.Logf("circuit closed %v after redis resumed", took)
	if dec, _ := allow(d, store, "client"); dec.Fallback {
		t.Fatal("decided without redis after it resumed")
	}
}

// TestFlushAfterScriptFlush: in batched mode, a flush that meets NOSCRIPT
// (Redis lost its scripts) sends the script with EVAL in the same flush,
// without an error, and the counts reach Redis.
func TestFlushAfterScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	var flushes, failed atomic.Int64
	cfg := testConfig(srv.Addr, rules.SyncBatched, rules.FailLocal)
	cfg.HeartbeatInterval = time.Hour // no SCRIPT LOAD after the first heartbeat
	c, err := New(Options{Config: cfg, Pop: "test", Node: "n1", OnRoundTrip: flushCounter(&flushes, &failed)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	wait.For(t, 2*time.Second, "scripts loaded", c.scriptsLoaded.Load)
	d, store := newDomain(t, c, window.Limit{Limit: 100, Period: time.Minute})
	r := srv.Client()
	if err := r.Do(t.Context(), r.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		allow(d, store, "a")
		allow(d, store, "b")
	}
	wait.For(t, time.Second, "a flush", func() bool { return flushes.Load() > 0 })
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d flushes failed after SCRIPT FLUSH", n)
	}
	if c.scriptsLoaded.Load() {
		t.Error("NOSCRIPT did not mark the scripts for loading")
	}
	if n := srv.CheckTTLs(t); n != 3 {
		t.Errorf("%d keys in redis after the flush, want 3 (two counters and the node registry)", n)
	}
}

// TestClientStopsItsGoroutines: Close stops the heartbeat and the flusher,
// in each mode, whether or not Redis is up.
func TestClientStopsItsGoroutines(t *testing.T) {
	srv := redistest.Start(t)
	for _, tt := range []struct {
		name string
		addr string
		sync rules.SyncMode
	}{
		{"exact", srv.Addr, rules.SyncExact},
		{"batched", srv.Addr, rules.SyncBatched},
		{"batched, redis absent", redistest.RefusingAddr(t), rules.SyncBatched},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			var heartbeats, flushes atomic.Int64
			count := func(op string, _ time.Duration, _ error) {
				switch op {
				case "heartbeat":
					heartbeats.Add(1)
				case "flush":
					flushes.Add(1)
				}
			}
			c, err := New(Options{Config: testConfig(tt.addr, tt.sync, rules.FailLocal), Pop: "test", OnRoundTrip: count})
			if err != nil {
				t.Fatal(err)
			}
			d, store := newDomain(t, c, window.Limit{Limit: 10, Period: time.Minute})
			for range 5 {
				allow(d, store, "client")
			}
			// Close while both goroutines are at work.
			wait.For(t, 5*time.Second, "a heartbeat", func() bool { return heartbeats.Load() > 0 })
			if tt.sync == rules.SyncBatched {
				wait.For(t, 5*time.Second, "a flush", func() bool { return flushes.Load() > 0 })
			}
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := c.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			goleak.VerifyNone(t, ignore)
		})
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts Options
	}{
		{"local store", Options{Config: rules.Cluster{Store: rules.StoreLocal}, Pop: "p"}},
		{"no pop", Options{Config: testConfig("127.0.0.1:1", rules.SyncExact, rules.FailLocal)}},
		{"zero budget", Options{Config: func() rules.Cluster {
			c := testConfig("127.0.0.1:1", rules.SyncExact, rules.FailLocal)
			c.Budget = 0
			return c
		}(), Pop: "p"}},
	} {
		if c, err := New(tt.opts); err == nil {
			c.Close()
			t.Errorf("%s: New succeeded, want an error", tt.name)
		}
	}
}

// TestErrorReason classifies errors as rueidis reports them: error replies
// from a real Redis (a script's redis.error_reply), a refused connection,
// a closed client and the budget running out.
func TestErrorReason(t *testing.T) {
	srv := redistest.Start(t)
	r := srv.Client()
	ctx := context.Background()
	reply := func(msg string) error {
		err := r.Do(ctx, r.B().Eval().Script("return redis.error_reply(ARGV[1])").Numkeys(0).Arg(msg).Build()).Error()
		if _, ok := rueidis.IsRedisErr(err); !ok {
			t.Fatalf("error reply %q came back as %v, not a *rueidis.RedisError", msg, err)
		}
		return err
	}
	refused := func() error {
		cfg := testConfig(redistest.RefusingAddr(t), rules.SyncExact, rules.FailLocal)
		c, err := New(Options{Config: cfg, Pop: "test"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.exec(ctx, forgetScript, []string{"k"}, []string{"1", "2"}).Error()
	}
	closed := func() error {
		c := redistest.NewClient(t, srv.Addr)
		c.Close()
		return c.Do(ctx, c.B().Ping().Build()).Error()
	}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{context.DeadlineExceeded, "timeout"},
		{rueidis.ErrClosing, "connection"},
		{closed(), "connection"},
		{refused(), "connection"},
		{errNotConnected, "connection"},
		{reply("LOADING Redis is loading the dataset in memory"), "loading"},
		{reply("READONLY You can't write against a read only replica."), "readonly"},
		{reply("OOM command not allowed when used memory > 'maxmemory'."), "oom"},
		{reply("BUSY Redis is busy running a script."), "busy"},
		{reply("ERR unknown command"), "reply"},
		{rueidis.Nil, "reply"},
	} {
		if got := ErrorReason(tt.err); got != tt.want {
			t.Errorf("ErrorReason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// flushCounter returns an OnRoundTrip hook that counts flushes and the
// ones that failed.
func flushCounter(flushes, failed *atomic.Int64) func(string, time.Duration, error) {
	return func(op string, _ time.Duration, err error) {
		if op == "flush" {
			flushes.Add(1)
			if err != nil {
				failed.Add(1)
			}
		}
	}
}

// TestCharge: units charged after the fact reach Redis with the next flush
// in both modes (batched mode counts them in the node's store at once), and
// later decisions count them.
func TestCharge(t *testing.T) {
	srv := redistest.Start(t)
	tests := []struct {
		name      string
		sync      rules.SyncMode
		wantLocal int64 // the node's store's count right after the charge
	}{
		{"exact", rules.SyncExact, 0},
		{"batched", rules.SyncBatched, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(srv.Addr, tt.sync, rules.FailClosed)
			cfg.Budget = 250 * time.Millisecond // no fallback under -race
			c := newClient(t, cfg, "n-"+tt.name)
			wait.For(t, 2*time.Second, "scripts loaded", c.scriptsLoaded.Load)
			d, store := newDomain(t, c, window.Limit{Limit: 10, Period: time.Hour})
			client := "charged-" + tt.name
			tally := d.Begin()
			now := time.Now()
			if dec := tally.Decide(id(store, client), 1, now); !dec.Allowed || dec.Fallback {
				t.Fatalf("first request: got %+v, want allowed by redis", dec)
			}
			tally.Charge(id(store, client), 4, now)
			tally.Charge(id(store, client), 0, now) // nothing
			tally.Release(id(store, client), now)   // holds nothing
			tally.End()
			if got := store.Peek(store.KeyString(0, client), now).Current; got != tt.wantLocal {
				t.Errorf("node's count after the charge: got %d, want %d", got, tt.wantLocal)
			}
			key := d.rules[0].prefix([]byte(client)) + ":" + strconv.FormatInt(d.rules[0].periodStart(now), 10)
			rdb := srv.Client()
			wait.For(t, 2*time.Second, "the charge in redis", func() bool {
				n, err := rdb.Do(context.Background(), rdb.B().Get().Key(key).Build()).AsInt64()
				return err == nil && n == 5
			})
			allowed := 0
			for range 10 {
				if dec, _ := allow(d, store, client); dec.Allowed {
					allowed++
				}
			}
			if tt.sync == rules.SyncExact && allowed != 5 {
				t.Errorf("allowed %d of 10 after 5 counted, want 5", allowed)
			}
			if tt.sync == rules.SyncBatched && allowed > 5 {
				t.Errorf("allowed %d of 10 after 5 counted, want at most 5", allowed)
			}
		})
	}
}
