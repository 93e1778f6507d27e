package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/rueidis"
)

// slotsInRedis is the number of unexpired leases of concurrency rules in
// the Redis server of c (sorted sets named "<prefix>:s").
func slotsInRedis(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	keys, err := c.Do(t.Context(), c.B().Keys().Pattern("edge:*}:s").Build()).AsStrSlice()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	var n int64
	for _, k := range keys {
		m, err := c.Do(t.Context(), c.B().Zcard().Key(k).Build()).AsInt64()
		if err != nil {
			t.Fatalf("ZCARD %s: %v", k, err)
		}
		n += m
	}
	return n
}

// TestSharedConcurrency: a concurrency limit of 2 over two nodes sharing
// Redis (exact): of five parallel slow requests of one key, spread over
// both nodes, two reach the origin and three get 429 at once; a slot is
// given back in Redis when its request completes, when its client goes
// away (found once the origin answers or times out), and when the origin
// fails (502), so the key gets its two slots back each time.
func TestSharedConcurrency(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	arrived := make(chan string, 16)
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	hang, proceed := make(chan struct{}), make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.URL.Path
		switch r.URL.Path {
		case "/fail":
			panic(http.ErrAbortHandler) // the origin drops the connection: 502
		case "/slow":
			<-release
		case "/held":
			<-proceed
		case "/hang":
			<-hang
		}
		io.WriteString(w, "done")
	}))

	t.Cleanup(origin.Close)
	t.Cleanup(free)
	t.Cleanup(func() { close(hang) }) // before origin.Close, which waits for /hang

	cfg := sharedConfig(srv.Addr, "exact", "closed", rules.RuleConfig{Name: "parallel", Limit: 2, Algorithm: "concurrency", Lease: rules.MinLease})
	cfg.Domains[0].Respond, cfg.Domains[0].Origin = nil, origin.URL
	// A client gone while edge waits for the origin is found by the first
	// write to it (newForwarder), at the latest when the upstream times
	// out, here soon.
	cfg.Timeouts.Upstream = 2 * time.Second
	ps := newNodes(t, 2, cfg, true)
	srvs := make([]*httptest.Server, len(ps))
	for i, p := range ps {
		srvs[i] = httptest.NewServer(p)
		t.Cleanup(srvs[i].Close)
	}
	get := func(node int, path string) (*http.Response, error) {
		req, _ := http.NewRequest("GET", srvs[node].URL+path, nil)
		req.Host = "site.test"
		resp, err := srvs[node].Client().Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}

	type result struct {
		status int
		header http.Header
	}
	results := make(chan result, 5)
	for i := range 5 {
		go func() {
			resp, err := get(i%2, "/slow")
			if err != nil {
				results <- result{}
				return
			}
			results <- result{resp.StatusCode, resp.Header}
		}()
	}
	for range 3 {
		r := <-results
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("a request came back with %d before the origin answered, want 429", r.status)
		}
		if got := r.header.Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After: %q, want 1", got)
		}
		if got, want := r.header.Get("RateLimit-Policy"), `"parallel";q=2;qu="concurrent-requests"`; got != want {
			t.Errorf("RateLimit-Policy: %q, want %q", got, want)
		}
	}
	<-arrived
	<-arrived
	if got := slotsInRedis(t, rdb); got != 2 {
		t.Errorf("leases in Redis while two requests are held: %d, want 2", got)
	}
	var held float64
	for _, p := range ps {
		held += slotsGauge(t, p)
	}
	if held != 2 {
		t.Errorf("edge_concurrency_slots_in_use over the two nodes: %v, want 2", held)
	}
	free()
	for range 2 {
		if r := <-results; r.status != http.StatusOK {
			t.Errorf("held request: %d, want 200", r.status)
		}
	}
	if len(arrived) != 0 {
		t.Fatalf("%d more requests reached the origin", len(arrived))
	}
	wait.For(t, 5*time.Second, "the slots given back in Redis", func() bool { return slotsInRedis(t, rdb) == 0 })

	tests := []struct {
		name string
		run  func() int
		want int
	}{
		{"completed", func() int {
			resp, err := get(0, "/")
			if err != nil {
				t.Fatal(err)
			}
			return resp.StatusCode
		}, 200},
		{"origin fails", func() int {
			resp, err := get(1, "/fail")
			if err != nil {
				t.Fatal(err)
			}
			return resp.StatusCode
		}, 502},
		{"client gone before the answer", func() int {
			c, err := net.Dial("tcp", srvs[0].Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "GET /hang HTTP/1.1\r\nHost: site.test\r\n\r\n")
			select {
			case <-arrived:
			case <-time.After(5 * time.Second):
				resp, _ := http.ReadResponse(bufio.NewReader(c), nil)
				t.Fatalf("the request did not reach the origin: %v", resp)
			}
			if got := slotsInRedis(t, rdb); got != 1 {
				t.Errorf("leases in Redis while the request waits: %d, want 1", got)
			}
			c.Close()
			return 0
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.run(); got != tt.want {
				t.Errorf("status: got %d, want %d", got, tt.want)
			}
			wait.For(t, 5*time.Second, "the slot given back in Redis", func() bool { return slotsInRedis(t, rdb) == 0 })
			for len(arrived) > 0 {
				<-arrived
			}
			// Both slots are free: two requests held at once on the
			// two nodes both reach the origin.
			done := make(chan int, 2)
			for i := range 2 {
				go func() {
					resp, err := get(i, "/held")
					if err != nil {
						done <- 0
						return
					}
					done <- resp.StatusCode
				}()
			}
			for range 2 {
				select {
				case <-arrived:
				case code := <-done:
					t.Fatalf("a request came back with %d before the origin answered, want both at the origin", code)
				}
			}
			proceed <- struct{}{}
			proceed <- struct{}{}
			for range 2 {
				if code := <-done; code != 200 {
					t.Errorf("held request: %d, want 200", code)
				}
			}
			wait.For(t, 5*time.Second, "both slots given back", func() bool { return slotsInRedis(t, rdb) == 0 })
		})
	}
	rec := httptest.NewRecorder()
	ps[0].AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/v1/config", nil))
	if want := `"lease": "1s"`; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("/v1/config lacks %s: %s", want, rec.Body.String())
	}
	for i, p := range ps {
		if n := fallbacks(p); n != 0 {
			t.Errorf("node %d decided %d requests without redis", i, n)
		}
		if n := p.cluster.Leases(); n != 0 {
			t.Errorf("node %d still renews %d leases", i, n)
		}
	}
	t.Logf("%d keys in redis, all with a TTL", srv.CheckTTLs(t))
}

// slotsGauge is p's edge_concurrency_slots_in_use for rule "parallel" of
// domain "site".
func slotsGauge(t *testing.T, p *Proxy) float64 {
	t.Helper()
	const want = `
# HELP edge_concurrency_slots_in_use Requests in flight holding a slot of a concurrency rule, by domain and rule.
# TYPE edge_concurrency_slots_in_use gauge
edge_concurrency_slots_in_use{domain="site",rule="parallel"} %d
`
	for n := range 6 {
		if testutil.CollectAndCompare(storeCollector{p.metrics}, strings.NewReader(fmt.Sprintf(want, n)), "edge_concurrency_slots_in_use") == nil {
			return float64(n)
		}
	}
	t.Fatalf("edge_concurrency_slots_in_use of rule parallel not between 0 and 5")
	return 0
}

// TestSharedSoft: a soft rule shared through Redis in exact mode thins a
// client over its limit on every node with 429s of Retry-After 1, counted
// as soft_limited, never deciding without Redis.
func TestSharedSoft(t *testing.T) {
	srv := redistest.Start(t)
	cfg := sharedConfig(srv.Addr, "exact", "closed", rules.RuleConfig{Name: "soft", Mode: "soft", Limit: 10, Period: time.Hour})
	ps := newNodes(t, 2, cfg, true)
	allowed, refused := 0, 0
	for i := range 60 {
		w, _ := hit(ps[i%2], "198.51.100.9")
		switch w.Code {
		case 200:
			allowed++
		case 429:
			refused++
			if got := w.Header().Get("Retry-After"); got != "1" {
				t.Errorf("Retry-After %q, want 1", got)
			}
		default:
			t.Fatalf("request %d: %d", i, w.Code)
		}
	}
	soft := 0.0
	for _, p := range ps {
		soft += testutil.ToFloat64(p.metrics.decisions.WithLabelValues("site", "soft", "block", "soft_limited"))
		if n := fallbacks(p); n != 0 {
			t.Errorf("%d requests decided without Redis", n)
		}
	}
	t.Logf("60 requests at once over two nodes, soft limit 10 an hour: %d allowed, %d refused", allowed, refused)
	if refused == 0 || allowed == 0 || allowed > 30 {
		t.Errorf("%d allowed, %d refused: want the client thinned toward 10, some through", allowed, refused)
	}
	if int(soft) != refused {
		t.Errorf("soft_limited decisions %v, want %d", soft, refused)
	}
}
