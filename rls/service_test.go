package rls

import (
	"context"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/rules"
)

// clock is an injected clock, moved by tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// start is the date tests begin at: one second into a period of every
// unit (2024-01-01 is a Monday, not the start of an epoch week; the tests
// stay well inside every period they use).
var start = time.Date(2024, 1, 1, 0, 0, 1, 0, time.UTC)

type fixture struct {
	svc    *Service
	client pb.RateLimitServiceClient
	conn   *grpc.ClientConn
	clock  *clock
	reg    *prometheus.Registry
}

// serve runs a Service over TCP on loopback with the test files and
// returns a client of it, made with go-control-plane's types.
func serve(t *testing.T, rc rules.RLS) *fixture {
	t.Helper()
	cfg, err := Load("testdata", []string{"lyft/*.yaml"}, true)
	if err != nil {
		t.Fatal(err)
	}
	return serveConfig(t, rc, cfg)
}

func serveConfig(t *testing.T, rc rules.RLS, cfg *Config) *fixture {
	t.Helper()
	f := &fixture{clock: &clock{t: start}, reg: prometheus.NewRegistry()}
	var err error
	f.svc, err = New(Options{Table: &rules.Table{MaxKeys: 1000, RLS: rc}, Config: cfg, Registerer: f.reg, Now: f.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	f.svc.Register(g)
	done := make(chan struct{})
	go func() { defer close(done); g.Serve(ln) }()
	f.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	f.client = pb.NewRateLimitServiceClient(f.conn)
	t.Cleanup(func() {
		f.conn.Close()
		g.Stop()
		<-done
		f.svc.Close()
	})
	return f
}

// desc builds a descriptor from "key=value" pairs ("key=" for an empty value).
func desc(kvs ...string) *rlspb.RateLimitDescriptor {
	d := &rlspb.RateLimitDescriptor{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &rlspb.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func (f *fixture) ask(t *testing.T, domain string, hits uint32, ds ...*rlspb.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := f.client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("got %d statuses, want %d", len(resp.Statuses), len(ds))
	}
	return resp
}

const (
	ok   = pb.RateLimitResponse_OK
	over = pb.RateLimitResponse_OVER_LIMIT
)

// TestConformance follows the examples of Lyft's documentation with the
// test files' shop domain: each case is a sequence of calls, with the
// answer each must get, under both algorithms (each case starts from empty
// counters and stays in one period, where the two agree).
func TestConformance(t *testing.T) {
	type call struct {
		descs []*rlspb.RateLimitDescriptor
		hits  uint32
		want  pb.RateLimitResponse_Code
		// per descriptor: its code, and its limit (0: no current_limit)
		codes  []pb.RateLimitResponse_Code
		limits []uint32
	}
	repeat := func(n int, c call) []call {
		out := make([]call, n)
		for i := range out {
			out[i] = c
		}
		return out
	}
	one := func(d *rlspb.RateLimitDescriptor, want pb.RateLimitResponse_Code, limit uint32) call {
		return call{descs: []*rlspb.RateLimitDescriptor{d}, want: want, codes: []pb.RateLimitResponse_Code{want}, limits: []uint32{limit}}
	}
	cat := func(cs ...[]call) []call {
		var out []call
		for _, c := range cs {
			out = append(out, c...)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		calls []call
	}{
		{"nested key/value beats key-only", cat(
			repeat(2, one(desc("client=mobile", "path=/checkout"), ok, 2)),
			repeat(1, one(desc("client=mobile", "path=/checkout"), over, 2)))},
		{"nested key-only fallback", cat(
			repeat(5, one(desc("client=mobile", "path=/cart"), ok, 5)),
			repeat(1, one(desc("client=mobile", "path=/cart"), over, 5)),
			// another value has its own counter under the same entry
			repeat(1, one(desc("client=mobile", "path=/home"), ok, 5)))},
		{"parent without limit limits nothing", repeat(10, one(desc("client=mobile"), ok, 0))},
		{"unknown parent value", repeat(10, one(desc("client=desktop", "path=/cart"), ok, 0))},
		{"request deeper than config", repeat(10, one(desc("remote_address=1.1.1.1", "path=/"), ok, 0))},
		{"key-only default", cat(
			repeat(3, one(desc("remote_address=1.2.3.4"), ok, 3)),
			repeat(1, one(desc("remote_address=1.2.3.4"), over, 3)))},
		{"specific value", cat(
			repeat(6, one(desc("remote_address=10.0.0.1"), ok, 6)),
			repeat(1, one(desc("remote_address=10.0.0.1"), over, 6)))},
		{"whitelisted value", repeat(20, one(desc("remote_address=10.0.0.2"), ok, 0))},
		{"unlimited", repeat(20, one(desc("internal=yes"), ok, 0))},
		{"shadow mode answers OK", repeat(5, one(desc("tier=free"), ok, 2))},
		{"replaces drops the named limit", cat(
			repeat(3, call{descs: []*rlspb.RateLimitDescriptor{desc("plan=gold"), desc("user=ann")}, want: ok,
				codes: []pb.RateLimitResponse_Code{ok, ok}, limits: []uint32{100, 0}}),
			repeat(1, one(desc("user=ann"), ok, 1)),
			repeat(1, one(desc("user=ann"), over, 1)))},
		{"hits_addend is the cost", []call{
			{descs: []*rlspb.RateLimitDescriptor{desc("remote_address=5.5.5.5")}, hits: 3, want: ok, codes: []pb.RateLimitResponse_Code{ok}, limits: []uint32{3}},
			one(desc("remote_address=5.5.5.5"), over, 3),
		}},
		{"cost above the limit", []call{
			{descs: []*rlspb.RateLimitDescriptor{desc("remote_address=6.6.6.6")}, hits: 4, want: over, codes: []pb.RateLimitResponse_Code{over}, limits: []uint32{3}},
		}},
		{"wildcard with share_threshold shares one counter", cat(
			repeat(1, one(desc("tenant=acme-1"), ok, 3)),
			repeat(1, one(desc("tenant=acme-2"), ok, 3)),
			repeat(1, one(desc("tenant=acme-3"), ok, 3)),
			repeat(1, one(desc("tenant=acme-4"), over, 3)),
			repeat(1, one(desc("tenant=other"), ok, 0)))},
		{"wildcard in the middle", cat(
			repeat(2, one(desc("bucket=img7.png"), ok, 2)),
			repeat(1, one(desc("bucket=img7.png"), over, 2)),
			repeat(1, one(desc("bucket=img8.png"), ok, 2)),
			repeat(1, one(desc("bucket=img7.jpg"), ok, 0)))},
		{"zero requests per unit", repeat(2, one(desc("blocked=x"), over, 0))},
		{"a year", cat(
			repeat(2, one(desc("license=l1"), ok, 2)),
			repeat(1, one(desc("license=l1"), over, 2)))},
		{"quota mode: every quota descriptor over", cat(
			repeat(1, one(desc("quota=q"), ok, 1)),
			repeat(1, one(desc("quota=q"), over, 1)))},
		{"several descriptors: one over is over", cat(
			repeat(3, one(desc("remote_address=9.9.9.9"), ok, 3)),
			[]call{{descs: []*rlspb.RateLimitDescriptor{desc("internal=1"), desc("remote_address=9.9.9.9")}, want: over,
				codes: []pb.RateLimitResponse_Code{ok, over}, limits: []uint32{0, 3}}})},
		{"unknown domain", []call{{descs: []*rlspb.RateLimitDescriptor{desc("remote_address=1.1.1.1")}, want: ok, codes: []pb.RateLimitResponse_Code{ok}, limits: []uint32{0}, hits: 0}}},
	} {
		for _, algo := range []algorithm.Algorithm{algorithm.SlidingWindow, algorithm.FixedWindow} {
			t.Run(tc.name+"/"+algo.String(), func(t *testing.T) {
				f := serve(t, rules.RLS{Algorithm: algo})
				domain := "shop"
				if tc.name == "unknown domain" {
					domain = "nowhere"
				}
				for i, c := range tc.calls {
					resp := f.ask(t, domain, c.hits, c.descs...)
					if resp.OverallCode != c.want {
						t.Fatalf("call %d: overall code %v, want %v (%v)", i, resp.OverallCode, c.want, resp)
					}
					for j, st := range resp.Statuses {
						if st.Code != c.codes[j] {
							t.Errorf("call %d, descriptor %d: code %v, want %v", i, j, st.Code, c.codes[j])
						}
						var got uint32
						if st.CurrentLimit != nil {
							got = st.CurrentLimit.RequestsPerUnit
						}
						if got != c.limits[j] && !(c.limits[j] == 0 && st.CurrentLimit != nil && st.CurrentLimit.RequestsPerUnit == 0) {
							t.Errorf("call %d, descriptor %d: limit %d, want %d", i, j, got, c.limits[j])
						}
					}
				}
			})
		}
	}
}

func TestStatusFields(t *testing.T) {
	f := serve(t, rules.RLS{})
	resp := f.ask(t, "shop", 0, desc("remote_address=1.2.3.4"), desc("internal=1"), desc("nothing=1"))
	st := resp.Statuses[0]
	if st.CurrentLimit.Unit != pb.RateLimitResponse_RateLimit_MINUTE || st.LimitRemaining != 2 {
		t.Errorf("got %v, want 3 per minute with 2 remaining", st)
	}
	if got := resp.Statuses[1].LimitRemaining; got != math.MaxUint32 {
		t.Errorf("unlimited: remaining %d, want %d", got, uint32(math.MaxUint32))
	}
	if resp.Statuses[2].CurrentLimit != nil {
		t.Errorf("no limit: got %v, want no current_limit", resp.Statuses[2])
	}
	f.ask(t, "shop", 0, desc("remote_address=1.2.3.4"))
	f.ask(t, "shop", 0, desc("remote_address=1.2.3.4"))
	resp = f.ask(t, "shop", 0, desc("remote_address=1.2.3.4"))
	st = resp.Statuses[0]
	// Sliding window: three at 00:00:01 within a minute; the estimate
	// falls under the limit when the first third of them slides out of
	// the previous minute, but they are all in the current one: the wait
	// is until 00:01:00 plus a third of a minute.
	if d := st.DurationUntilReset.AsDuration(); st.Code != over || d <= 0 || d > 2*time.Minute {
		t.Errorf("over: got %v, want OVER_LIMIT with a reset within two minutes", st)
	}
}

// TestYear: a limit per year counts Lyft's years, 365 days aligned to
// the epoch (period k starts at Unix second k×31536000), at their edges:
// a fixed window refuses to the last second of the year and starts afresh
// at its end, resetting when Lyft's would; a sliding window still counts
// the past year at the edge, and frees it as it slides out.
func TestYear(t *testing.T) {
	const divider = 365 * 24 * 60 * 60 // Lyft's UnitToDivider(YEAR)
	lyftReset := func(now time.Time) time.Duration {
		return time.Duration(divider-now.Unix()%divider) * time.Second
	}
	for _, algo := range []algorithm.Algorithm{algorithm.SlidingWindow, algorithm.FixedWindow} {
		t.Run(algo.String(), func(t *testing.T) {
			f := serve(t, rules.RLS{Algorithm: algo, ResponseHeaders: true})
			ask := func() *pb.RateLimitResponse_DescriptorStatus {
				return f.ask(t, "shop", 0, desc("license=l1")).Statuses[0]
			}
			for i := range 2 {
				if st := ask(); st.Code != ok || st.LimitRemaining != uint32(1-i) {
					t.Fatalf("request %d: %v, want OK with %d left", i, st, 1-i)
				}
			}
			resp := f.ask(t, "shop", 0, desc("license=l1"))
			st := resp.Statuses[0]
			if st.Code != over || st.CurrentLimit.Unit != pb.RateLimitResponse_RateLimit_YEAR {
				t.Fatalf("third request: %v, want OVER_LIMIT of a limit per YEAR", st)
			}
			var policy string
			for _, h := range resp.ResponseHeadersToAdd {
				if strings.EqualFold(h.Key, "RateLimit-Policy") {
					policy = h.Value
				}
			}
			if !strings.Contains(policy, ";w=31536000") {
				t.Errorf("RateLimit-Policy %q, want a window of 31536000 seconds", policy)
			}
			end := lyftReset(f.clock.now()) // to the end of Lyft's year
			if algo == algorithm.FixedWindow {
				if got := st.DurationUntilReset.AsDuration(); got != end {
					t.Errorf("reset: got %v, want Lyft's %v", got, end)
				}
			} else if got := st.DurationUntilReset.AsDuration(); got <= end || got > end+365*24*time.Hour {
				t.Errorf("reset: got %v, want after the year's end (%v), within a year of it", got, end)
			}
			f.clock.add(end - time.Second) // the year's last second
			if st := ask(); st.Code != over || (algo == algorithm.FixedWindow && st.DurationUntilReset.AsDuration() != time.Second) {
				t.Fatalf("in the year's last second: %v, want OVER_LIMIT", st)
			}
			f.clock.add(time.Second) // the next year's first
			if now := f.clock.now(); now.Unix()%divider != 0 {
				t.Fatalf("the clock is at %v, not at the start of a Lyft year", now)
			}
			st = ask()
			if algo == algorithm.FixedWindow {
				if st.Code != ok || st.LimitRemaining != 1 || st.DurationUntilReset.AsDuration() != 365*24*time.Hour {
					t.Fatalf("the next year's first request: %v, want OK, 1 left, reset in 365 days", st)
				}
				return
			}
			if st.Code != over {
				t.Fatalf("the next year's first request: %v, want OVER_LIMIT (the past year still counts)", st)
			}
			f.clock.add(365 * 24 * time.Hour / 2) // half of the past year slid out: 1 of 2 left
			if st := ask(); st.Code != ok {
				t.Fatalf("half a year on: %v, want OK", st)
			}
		})
	}
}

// TestAlgorithms: where the two algorithms differ.
func TestAlgorithms(t *testing.T) {
	t.Run("fixed window starts afresh at the period's end", func(t *testing.T) {
		f := serve(t, rules.RLS{Algorithm: algorithm.FixedWindow})
		for range 3 {
			f.ask(t, "shop", 0, desc("remote_address=1.2.3.4"))
		}
		resp := f.ask(t, "shop", 0, desc("remote_address=1.2.3.4"))
		if resp.OverallCode != over {
			t.Fatalf("got %v, want over", resp.OverallCode)
		}
		if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d != 59*time.Second {
			t.Errorf("reset: got %v, want 59s (to the minute's end, as Lyft)", d)
		}
		f.clock.add(59 * time.Second)
		if resp := f.ask(t, "shop", 0, desc("remote_address=1.2.3.4")); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 2 {
			t.Errorf("next minute: got %v, want OK with 2 remaining", resp)
		}
	})
	t.Run("sliding window remembers the previous period", func(t *testing.T) {
		f := serve(t, rules.RLS{Algorithm: algorithm.SlidingWindow})
		for range 3 {
			f.ask(t, "shop", 0, desc("remote_address=1.2.3.4"))
		}
		f.clock.add(59 * time.Second) // 00:01:00: all three still count in full
		if resp := f.ask(t, "shop", 0, desc("remote_address=1.2.3.4")); resp.OverallCode != over {
			t.Errorf("at the edge: got %v, want over", resp.OverallCode)
		}
		f.clock.add(30 * time.Second) // halfway: 1.5 of them left
		if resp := f.ask(t, "shop", 0, desc("remote_address=1.2.3.4")); resp.OverallCode != ok {
			t.Errorf("halfway: got %v, want ok", resp.OverallCode)
		}
	})
	for _, tc := range []struct {
		algo algorithm.Algorithm
		left int // requests of 1.2.3.4 still allowed after a refused pair
	}{
		// edge: a refused request counts nowhere, so the other descriptor's
		// count is given back.
		{algorithm.SlidingWindow, 3},
		// Lyft: every descriptor of the request was counted.
		{algorithm.FixedWindow, 2},
	} {
		t.Run("refused request with "+tc.algo.String(), func(t *testing.T) {
			f := serve(t, rules.RLS{Algorithm: tc.algo})
			if resp := f.ask(t, "shop", 0, desc("remote_address=1.2.3.4"), desc("blocked=x")); resp.OverallCode != over {
				t.Fatalf("got %v, want over", resp.OverallCode)
			}
			n := 0
			for range 5 {
				if f.ask(t, "shop", 0, desc("remote_address=1.2.3.4")).OverallCode == ok {
					n++
				}
			}
			if n != tc.left {
				t.Errorf("allowed afterwards: got %d, want %d", n, tc.left)
			}
		})
	}
}

func TestDescriptorHitsAddend(t *testing.T) {
	f := serve(t, rules.RLS{})
	d := desc("remote_address=1.2.3.4")
	d.HitsAddend = wrapperspb.UInt64(2)
	resp := f.ask(t, "shop", 1, d)
	if resp.Statuses[0].LimitRemaining != 1 {
		t.Errorf("got %v, want 1 remaining after a descriptor's hits_addend of 2", resp.Statuses[0])
	}
}

func TestResponseHeaders(t *testing.T) {
	f := serve(t, rules.RLS{ResponseHeaders: true})
	resp := f.ask(t, "shop", 0, desc("remote_address=1.2.3.4"), desc("remote_address=10.0.0.1"))
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	want := map[string]string{
		"X-Ratelimit-Limit":     "3",
		"X-Ratelimit-Remaining": "2",
		"Ratelimit-Policy":      `"rls";q=3;w=60`,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if !strings.HasPrefix(got["Ratelimit"], `"rls";r=2;t=`) || got["X-Ratelimit-Reset"] == "" {
		t.Errorf("got %v, want RateLimit and X-RateLimit-Reset", got)
	}
	f = serve(t, rules.RLS{})
	if resp := f.ask(t, "shop", 0, desc("remote_address=1.2.3.4")); len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("without response_headers: got %v, want none", resp.ResponseHeadersToAdd)
	}
}

func TestBadRequests(t *testing.T) {
	f := serve(t, rules.RLS{})
	for _, req := range []*pb.RateLimitRequest{
		{Descriptors: []*rlspb.RateLimitDescriptor{desc("a=b")}},
		{Domain: "shop"},
	} {
		_, err := f.client.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: got %v, want InvalidArgument", req, err)
		}
	}
}

// TestMaxDescriptors: a call of more descriptors than rls.max_descriptors
// (64 unless set) is refused INVALID_ARGUMENT, counts nothing and is
// counted as edge_rls_requests_total{code="invalid_argument"}, under its
// domain if a file names it, else under unknown; a call of exactly the
// maximum is decided.
func TestMaxDescriptors(t *testing.T) {
	many := func(n int, key string) []*rlspb.RateLimitDescriptor {
		ds := make([]*rlspb.RateLimitDescriptor, n)
		for i := range ds {
			ds[i] = desc(key)
		}
		return ds
	}
	for _, tc := range []struct {
		name string
		max  int // rls.max_descriptors as compiled; 0 for a table made without it
		want int
	}{
		{"default", 0, 64},
		{"set", 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := serve(t, rules.RLS{MaxDescriptors: tc.max})
			invalid := func(domain string) float64 {
				return testutil.ToFloat64(f.svc.metrics.requests.WithLabelValues(domain, "invalid_argument"))
			}
			for _, domain := range []string{"shop", "no-such-domain"} {
				_, err := f.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: domain, Descriptors: many(tc.want+1, "remote_address=10.0.0.9")})
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "rls.max_descriptors") {
					t.Errorf("%s, %d descriptors: got %v, want InvalidArgument naming rls.max_descriptors", domain, tc.want+1, err)
				}
			}
			if got, unknown := invalid("shop"), invalid("unknown"); got != 1 || unknown != 1 {
				t.Errorf(`edge_rls_requests_total{code="invalid_argument"}: got shop %v, unknown %v; want 1 each`, got, unknown)
			}
			f.ask(t, "shop", 0, many(tc.want, "nothing=here")...) // the maximum is decided
			// The refused call counted nothing: remote_address allows 3 a
			// minute.
			if resp := f.ask(t, "shop", 0, desc("remote_address=10.0.0.9")); resp.OverallCode != ok {
				t.Errorf("after the refused call: got %v, want OK (it counted nothing)", resp.OverallCode)
			}
		})
	}
}

// TestHitsAddendAboveMaxCost: a hits_addend above what one decision can
// count (window.MaxCost, 1,000,000), the request's or a descriptor's, is
// refused INVALID_ARGUMENT and counted, rather than answered OVER_LIMIT
// whatever the limit (which a limit above it would not be); at the
// maximum it is charged as given.
func TestHitsAddendAboveMaxCost(t *testing.T) {
	cfg, err := Parse([]File{{Name: "big.yaml", Data: []byte(`domain: big
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 3000000000}
`)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	f := serveConfig(t, rules.RLS{}, cfg)
	d := desc("tenant=t1")
	d.HitsAddend = wrapperspb.UInt64(1_000_001)
	for _, req := range []*pb.RateLimitRequest{
		{Domain: "big", HitsAddend: 1_000_001, Descriptors: []*rlspb.RateLimitDescriptor{desc("tenant=t1")}},
		{Domain: "big", Descriptors: []*rlspb.RateLimitDescriptor{d}},
	} {
		resp, err := f.client.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "hits_addend 1000001") {
			t.Errorf("%v: got %v, %v; want InvalidArgument naming hits_addend", req, resp.GetOverallCode(), err)
		}
	}
	if got := testutil.ToFloat64(f.svc.metrics.requests.WithLabelValues("big", "invalid_argument")); got != 2 {
		t.Errorf(`edge_rls_requests_total{domain="big",code="invalid_argument"}: got %v, want 2`, got)
	}
	resp := f.ask(t, "big", 1_000_000, desc("tenant=t1"))
	if resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 2_999_000_000 {
		t.Errorf("hits_addend 1000000: got %v, want OK with 2999000000 remaining", resp.Statuses[0])
	}
}

func TestHealth(t *testing.T) {
	f := serve(t, rules.RLS{})
	h := healthpb.NewHealthClient(f.conn)
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		resp, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%q: got %v, %v; want SERVING", svc, resp, err)
		}
	}
	f.svc.Shutdown()
	resp, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("after Shutdown: got %v, %v; want NOT_SERVING", resp, err)
	}
}

// TestMetricsLabelsFromConfig: the descriptor label is the entry's path as
// configured, never the value the client sent.
func TestMetricsLabelsFromConfig(t *testing.T) {
	f := serve(t, rules.RLS{})
	f.ask(t, "shop", 0, desc("remote_address=203.0.113.9"))
	f.ask(t, "shop", 0, desc("tenant=acme-secret"))
	for range 3 {
		f.ask(t, "shop", 0, desc("tier=free"))
	}
	f.ask(t, "shop", 0, desc("nothing=here"))
	f.ask(t, "client-chosen-domain", 0, desc("a=b"))
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"shop", "remote_address", "ok"}, 1},
		{[]string{"shop", "tenant_acme-*", "ok"}, 1},
		{[]string{"shop", "tier_free", "ok"}, 2},
		{[]string{"shop", "tier_free", "shadow_over_limit"}, 1},
		{[]string{"shop", "", "no_limit"}, 1},
	} {
		if got := testutil.ToFloat64(f.svc.metrics.descriptors.WithLabelValues(c.labels...)); got != c.want {
			t.Errorf("%v: got %v, want %v", c.labels, got, c.want)
		}
	}
	if got := testutil.ToFloat64(f.svc.metrics.requests.WithLabelValues("unknown", "ok")); got != 1 {
		t.Errorf("unknown domain: got %v, want 1", got)
	}
	out, err := testutil.CollectAndFormat(f.svc.metrics.descriptors, expfmt.TypeTextPlain)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"203.0.113.9", "acme-secret", "client-chosen-domain", "here"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("metrics name the client's value %q:\n%s", secret, out)
		}
	}
}

// TestReloadKeepsCounters: a domain whose limits are unchanged keeps
// counting across a reload; one whose limits change starts afresh.
func TestReloadKeepsCounters(t *testing.T) {
	parse := func(limit string) *Config {
		c, err := Parse([]File{{Name: "x.yaml", Data: []byte("domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: " + limit + "}\n")}}, false)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	f := serveConfig(t, rules.RLS{}, parse("2"))
	f.ask(t, "x", 0, desc("k=1"))
	f.ask(t, "x", 0, desc("k=1"))
	if err := f.svc.Reload(&rules.Table{MaxKeys: 1000}, parse("2")); err != nil {
		t.Fatal(err)
	}
	if got := f.ask(t, "x", 0, desc("k=1")).OverallCode; got != over {
		t.Errorf("same limits: got %v, want over (counters kept)", got)
	}
	if err := f.svc.Reload(&rules.Table{MaxKeys: 1000}, parse("3")); err != nil {
		t.Fatal(err)
	}
	if got := f.ask(t, "x", 0, desc("k=1")); got.OverallCode != ok || got.Statuses[0].CurrentLimit.RequestsPerUnit != 3 {
		t.Errorf("new limit: got %v, want OK under 3 per minute", got)
	}
}
