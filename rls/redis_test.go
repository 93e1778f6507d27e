package rls

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/edgerate/edge/cluster"
	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
)

// node is one edge process of a PoP for these tests: a Service counting
// through its own cluster client, served over TCP.
func node(t *testing.T, addr string, sync rules.SyncMode, algo rules.Algorithm, name string) pb.RateLimitServiceClient {
	return nodeWith(t, addr, sync, algo, name, `domain: shop
descriptors:
  - key: user
    rate_limit: {unit: month, requests_per_unit: 3}
`)
}

func nodeWith(t *testing.T, addr string, sync rules.SyncMode, algo rules.Algorithm, name, lyft string) pb.RateLimitServiceClient {
	t.Helper()
	cc := rules.Cluster{
		Store: rules.StoreRedis, Addresses: []string{addr}, PoolSize: 4, DialTimeout: time.Second,
		Sync: sync, BatchInterval: 50 * time.Millisecond, Budget: 500 * time.Millisecond,
		OnStoreFailure: rules.FailClosed, HeartbeatInterval: 100 * time.Millisecond,
	}
	c, err := cluster.New(cluster.Options{Config: cc, Pop: "test", Node: name})
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
	for _, algo := range []rules.Algorithm{rules.SlidingWindow, rules.FixedWindow} {
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
// counts, node b refuses too.
func TestRedisBatched(t *testing.T) {
	srv := redistest.Start(t)
	a := node(t, srv.Addr, rules.SyncBatched, rules.SlidingWindow, "a")
	b := node(t, srv.Addr, rules.SyncBatched, rules.SlidingWindow, "b")
	ask := func(c pb.RateLimitServiceClient) pb.RateLimitResponse_Code {
		resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlspb.RateLimitDescriptor{desc("user=bob")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	for range 3 {
		if got := ask(a); got != ok {
			t.Fatalf("node a: got %v, want OK", got)
		}
	}
	// b's first request is its own, decided locally; its next ones see a's
	// counts once both have flushed and read back.
	wait.For(t, 10*time.Second, "node b to see node a's counts", func() bool { return ask(b) == over })
}

// TestRedisDownClosed: with on_store_failure closed and Redis gone, a call
// is answered UNAVAILABLE: Envoy then applies its failure_mode_deny.
func TestRedisDownClosed(t *testing.T) {
	srv := redistest.Start(t)
	a := node(t, srv.Addr, rules.SyncExact, rules.FixedWindow, "a")
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
			a := nodeWith(t, srv.Addr, sync, rules.SlidingWindow, "a", `domain: shop
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
