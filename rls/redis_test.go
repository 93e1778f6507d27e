package rls

import (
	"context"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/edgerate/edge/cluster"
	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
)

// node is one edge process of a PoP for these tests: a Service counting
// through its own cluster client, served over TCP.
func node(t *testing.T, addr string, sync rules.SyncMode, algo algorithm.Algorithm, name string) pb.RateLimitServiceClient {
	return nodeWith(t, addr, sync, algo, name, `domain: shop
descriptors:
  - key: user
    rate_limit: {unit: month, requests_per_unit: 3}
`)
}

func nodeWith(t *testing.T, addr string, sync rules.SyncMode, algo algorithm.Algorithm, name, lyft string) pb.RateLimitServiceClient {
	t.Helper()
	return nodeOpts(t, testCluster(addr, sync), algo, cluster.Options{Pop: "test", Node: name}, lyft)
}

func testCluster(addr string, sync rules.SyncMode) rules.Cluster {
	return rules.Cluster{
		Store: rules.StoreRedis, Addresses: []string{addr}, PoolSize: 4, DialTimeout: time.Second,
		Sync: sync, BatchInterval: 50 * time.Millisecond, Budget: 500 * time.Millisecond,
		OnStoreFailure: rules.FailClosed, HeartbeatInterval: 100 * time.Millisecond,
	}
}

// nodeOpts is a node counting through a cluster client of cc and opts.
func nodeOpts(t *testing.T, cc rules.Cluster, algo algorithm.Algorithm, opts cluster.Options, lyft string) pb.RateLimitServiceClient {
	t.Helper()
	opts.Config = cc
	c, err := cluster.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse([]File{{Name: "shop.yaml", Data: []byte(lyft)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(Options{Table: &rules.Table{MaxKeys: 1000, Cluster: cc, RLS: rules.RLS{Algorithm: algo}}, Config: cfg, Cluster: c})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	svc.Register(g)
	done := make(chan struct{})
	go func() { defer close(done); g.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		<-done
		svc.Close()
		c.Close()
	})
	return pb.NewRateLimitServiceClient(conn)
}

// TestRedisExact: two nodes counting through one real redis-server in
// exact mode enforce one limit between them, under both algorithms, and
// keep their keys under the rls. prefix of the domain.
func TestRedisExact(t *testing.T) {
	for _, algo := range []algorithm.Algorithm{algorithm.SlidingWindow, algorithm.FixedWindow} {
		t.Run(algo.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			a := node(t, srv.Addr, rules.SyncExact, algo, "a")
			b := node(t, srv.Addr, rules.SyncExact, algo, "b")
			var codes []string
			for i := range 5 {
				client := a
				if i%2 == 1 {
					client = b
				}
				resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlspb.RateLimitDescriptor{desc("user=ann")}})
				if err != nil {
					t.Fatal(err)
				}
				codes = append(codes, resp.OverallCode.String())
			}
			if got, want := strings.Join(codes, " "), "OK OK OK OVER_LIMIT OVER_LIMIT"; got != want {
				t.Errorf("got %s, want %s", got, want)
			}
			keys, err := srv.Client().Do(context.Background(), srv.Client().B().Keys().Pattern("edge:test:rls.shop:*").Build()).AsStrSlice()
			if err != nil || len(keys) == 0 {
				t.Errorf("keys under edge:test:rls.shop: got %v, %v; want some", keys, err)
			}
			srv.CheckTTLs(t)
		})
	}
}

// TestRedisBatched: in batched mode each node decides locally and shares
// its counts every batch interval: once a flush has carried node a's
// counts, node b refuses too (b's own requests could not refuse it this
// side of 1000 of them).
func TestRedisBatched(t *testing.T) {
	srv := redistest.Start(t)
	const lyft = "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: month, requests_per_unit: 1000}\n"
	a := nodeWith(t, srv.Addr, rules.SyncBatched, algorithm.SlidingWindow, "a", lyft)
	b := nodeWith(t, srv.Addr, rules.SyncBatched, algorithm.SlidingWindow, "b", lyft)
	ask := func(c pb.RateLimitServiceClient, hits uint32) pb.RateLimitResponse_Code {
		resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop", HitsAddend: hits, Descriptors: []*rlspb.RateLimitDescriptor{desc("user=bob")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	if got := ask(a, 1000); got != ok {
		t.Fatalf("node a: got %v, want OK", got)
	}
	// b's first request is its own, decided locally; its next ones see a's
	// counts once both have flushed and read back.
	wait.For(t, 10*time.Second, "node b to see node a's counts", func() bool { return ask(b, 1) == over })
}

// TestRedisDownClosed: with on_store_failure closed and Redis gone, a call
// is answered UNAVAILABLE: Envoy then applies its failure_mode_deny.
func TestRedisDownClosed(t *testing.T) {
	srv := redistest.Start(t)
	a := node(t, srv.Addr, rules.SyncExact, algorithm.FixedWindow, "a")
	if _, err := a.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlspb.RateLimitDescriptor{desc("user=cy")}}); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	_, err := a.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlspb.RateLimitDescriptor{desc("user=cy")}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("got %v, want Unavailable", err)
	}
}

// TestRedisRefundSharedRule: a refused call gives back what each of its
// other descriptors counted, also when several share one limit (one rule
// of the domain's store) with different values, in both Redis modes.
func TestRedisRefundSharedRule(t *testing.T) {
	for _, sync := range []rules.SyncMode{rules.SyncExact, rules.SyncBatched} {
		t.Run(sync.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			a := nodeWith(t, srv.Addr, sync, algorithm.SlidingWindow, "a", `domain: shop
descriptors:
  - key: user
    rate_limit: {unit: month, requests_per_unit: 3}
  - key: closed
    rate_limit: {unit: month, requests_per_unit: 0}
`)
			ask := func(ds ...*rlspb.RateLimitDescriptor) *pb.RateLimitResponse {
				resp, err := a.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop", Descriptors: ds})
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			if got := ask(desc("user=a"), desc("user=b"), desc("closed=x")).OverallCode; got != over {
				t.Fatalf("got %v, want over", got)
			}
			for _, user := range []string{"user=a", "user=b"} {
				var codes []string
				for range 4 {
					codes = append(codes, ask(desc(user)).OverallCode.String())
				}
				if got, want := strings.Join(codes, " "), "OK OK OK OVER_LIMIT"; got != want {
					t.Errorf("%s after the refund: got %s, want %s", user, got, want)
				}
			}
		})
	}
}

// TestRedisYear: a limit per year, counted through a real redis-server by
// two nodes, in exact mode under both algorithms and in batched mode:
// once node a has counted the year's limit, node b refuses, the keys are those of Lyft's
// year (period start (now ÷ 31536000) × 31536000, Unix seconds) and
// expire when that year's counts stop mattering, and a fixed window
// resets when Lyft's would.
func TestRedisYear(t *testing.T) {
	const divider = 365 * 24 * 60 * 60 // Lyft's UnitToDivider(YEAR)
	const lyft = `domain: shop
descriptors:
  - key: license
    rate_limit: {unit: year, requests_per_unit: 1000}
`
	for _, tc := range []struct {
		sync rules.SyncMode
		algo algorithm.Algorithm
	}{
		{rules.SyncExact, algorithm.SlidingWindow},
		{rules.SyncExact, algorithm.FixedWindow},
		{rules.SyncBatched, algorithm.SlidingWindow},
	} {
		t.Run(tc.sync.String()+"/"+tc.algo.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			a := nodeWith(t, srv.Addr, tc.sync, tc.algo, "a", lyft)
			b := nodeWith(t, srv.Addr, tc.sync, tc.algo, "b", lyft)
			ask := func(c pb.RateLimitServiceClient, hits uint32) *pb.RateLimitResponse_DescriptorStatus {
				resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop", HitsAddend: hits, Descriptors: []*rlspb.RateLimitDescriptor{desc("license=l1")}})
				if err != nil {
					t.Fatal(err)
				}
				return resp.Statuses[0]
			}
			ctx := context.Background()
			suffix := ":" + strconv.FormatInt(time.Now().Unix()/divider*divider, 10)
			// The year's whole limit on node a, at once (hits_addend).
			if st := ask(a, 1000); st.Code != ok {
				t.Fatalf("node a: %v, want OK", st)
			}
			if tc.sync == rules.SyncBatched {
				// b decides alone until a flush has brought it a's 1000:
				// its own requests could not refuse it this side of 1000
				// of them.
				wait.For(t, 10*time.Second, "node b to see node a's counts", func() bool { return ask(b, 1).Code == over })
			}
			st := ask(b, 1)
			now := time.Now()
			if st.Code != over {
				t.Fatalf("node b, after the year's limit: %v, want OVER_LIMIT", st)
			}
			end := time.Duration(divider-now.Unix()%divider) * time.Second // Lyft's reset
			got := st.DurationUntilReset.AsDuration()
			switch {
			case tc.algo == algorithm.FixedWindow && (got > end+time.Second || got < end-2*time.Second):
				t.Errorf("reset: got %v, want Lyft's %v", got, end)
			case tc.algo == algorithm.SlidingWindow && (got < end-2*time.Second || got > end+365*24*time.Hour+time.Second):
				t.Errorf("reset: got %v, want after the year's end (%v), within a year of it", got, end)
			}
			keys, err := srv.Client().Do(ctx, srv.Client().B().Keys().Pattern("edge:test:rls.shop:*").Build()).AsStrSlice()
			if err != nil || len(keys) == 0 {
				t.Fatalf("keys: %v, %v; want some", keys, err)
			}
			counted := false
			for _, k := range keys {
				if !strings.HasSuffix(k, suffix) {
					continue
				}
				counted = true
				ttl, err := srv.Client().Do(ctx, srv.Client().B().Pttl().Key(k).Build()).AsInt64()
				lives := 2 * 365 * 24 * time.Hour // a sliding window's count, two periods
				if tc.algo == algorithm.FixedWindow {
					lives = 365 * 24 * time.Hour
				}
				if err != nil || ttl <= 0 || time.Duration(ttl)*time.Millisecond > lives {
					t.Errorf("PTTL %s: %dms, %v; want in (0, %v]", k, ttl, err, lives)
				}
			}
			if !counted {
				t.Errorf("keys %v: none counts Lyft's year (ending %s)", keys, suffix)
			}
			srv.CheckTTLs(t)
		})
	}
}

// TestRedisOneRoundTrip: in exact mode a call's descriptors are decided in
// one pipelined round trip to Redis, not one each (a call of many
// descriptors held Redis for as many round trips), and a refused call
// gives back what it counted in a second one. Counted by the client's
// round-trip hook, and by Redis itself: each descriptor is one EVALSHA
// (INFO commandstats), all read in about one read of the connection
// (INFO stats total_reads_processed, which also counts the INFO asking).
func TestRedisOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	var mu sync.Mutex
	trips := map[string]int{}
	cc := testCluster(srv.Addr, rules.SyncExact)
	cc.HeartbeatInterval = time.Hour // no heartbeat while counting
	a := nodeOpts(t, cc, algorithm.SlidingWindow, cluster.Options{Pop: "test", Node: "a", OnRoundTrip: func(op string, _ time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			trips[op]++
		}
	}}, `domain: shop
descriptors:
  - key: user
    rate_limit: {unit: month, requests_per_unit: 3}
  - key: closed
    rate_limit: {unit: month, requests_per_unit: 1}
`)
	const n = 64 // rls.max_descriptors' default
	users := func(prefix string) []*rlspb.RateLimitDescriptor {
		ds := make([]*rlspb.RateLimitDescriptor, n)
		for i := range ds {
			ds[i] = desc("user=" + prefix + strconv.Itoa(i))
		}
		return ds
	}
	ask := func(ds []*rlspb.RateLimitDescriptor) pb.RateLimitResponse_Code {
		t.Helper()
		resp, err := a.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	r := srv.Client()
	info := func(section, field string) int {
		t.Helper()
		s, err := r.Do(context.Background(), r.B().Info().Section(section).Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(s) {
			if v, found := strings.CutPrefix(strings.TrimSpace(line), field); found {
				v, _, _ = strings.Cut(v, ",")
				got, _ := strconv.Atoi(v)
				return got
			}
		}
		return 0
	}
	counts := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		got := maps.Clone(trips)
		clear(trips)
		return got
	}
	ask(users("warm")) // the scripts are in Redis's cache from here on
	counts()

	evalsha, reads := info("commandstats", "cmdstat_evalsha:calls="), info("stats", "total_reads_processed:")
	if got := ask(users("u")); got != ok {
		t.Fatalf("%d new users: got %v, want OK", n, got)
	}
	if got, want := counts(), map[string]int{"decide": 1}; !maps.Equal(got, want) {
		t.Errorf("round trips of a call of %d descriptors: got %v, want %v", n, got, want)
	}
	if got := info("commandstats", "cmdstat_evalsha:calls=") - evalsha; got != n {
		t.Errorf("EVALSHA in Redis: got %d, want %d, one per descriptor", got, n)
	}
	// Reads: the pipeline's (one, or a few if Redis read it in parts),
	// this INFO's, and the PINGs rueidis sends on idle connections, more
	// of them on a slow machine; one round trip per descriptor is n reads.
	if got := info("stats", "total_reads_processed:") - reads; got >= n/4 {
		t.Errorf("reads Redis made for a call of %d descriptors: got %d, want fewer than %d", n, got, n/4)
	}

	// Refused by its last descriptor: what the others counted is given
	// back, in one more round trip.
	ask([]*rlspb.RateLimitDescriptor{desc("closed=x")})
	counts()
	if got := ask(append(users("v"), desc("closed=x"))[1:]); got != over {
		t.Fatalf("with a descriptor over its limit: got %v, want OVER_LIMIT", got)
	}
	if got, want := counts(), map[string]int{"decide": 1, "refund": 1}; !maps.Equal(got, want) {
		t.Errorf("round trips of a refused call: got %v, want %v", got, want)
	}
	if got := ask(users("v")[1:]); got != ok {
		t.Errorf("the refused call's users again: got %v, want OK (their counts given back)", got)
	}
}
