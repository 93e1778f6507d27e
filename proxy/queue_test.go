package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgerate/edge/rules"
)

// memoryOrigin is an origin in memory: it answers 200 and counts what
// reaches it. A real listener would keep a synctest bubble from ever
// being idle, so the waits are tested against this fake.
type memoryOrigin struct{ n atomic.Int64 }

func (o *memoryOrigin) RoundTrip(r *http.Request) (*http.Response, error) {
	o.n.Add(1)
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
}

// queueProxy is a proxy of one domain whose rules are rs, on the bubble's
// clock, forwarding to a memoryOrigin.
func queueProxy(t *testing.T, maxQueued int, rs ...rules.RuleConfig) (*Proxy, *memoryOrigin) {
	t.Helper()
	cfg := oneDomain("http://origin.test", rs...)
	cfg.Domains[0].MaxQueued = maxQueued
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	origin := &memoryOrigin{}
	p, err := New(Options{Table: table, Transport: origin, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p, origin
}

// queueRule is a leaky bucket of 10 a second, burst 1, that queues
// requests up to maxDelay: nginx's limit_req rate=10r/s burst=maxDelay/100ms.
func queueRule(maxDelay time.Duration) rules.RuleConfig {
	r := rule("q", 10, time.Second)
	r.Algorithm, r.Burst, r.MaxDelay = "leaky_bucket", 1, maxDelay
	return r
}

// queueAnswer is one request's response and when it came, after the start.
type queueAnswer struct {
	status int
	retry  string
	after  time.Duration
}

// start serves n requests at once, each in its own goroutine (as net/http
// would), each once the one before it waits or has been answered, so that
// they are decided in order. The function it returns waits for their
// answers, in the order they were sent.
func start(p *Proxy, n int, ctx context.Context) func() []queueAnswer {
	t0 := time.Now()
	out := make([]queueAnswer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req := httptest.NewRequestWithContext(ctx, "GET", "http://api.example.com/", nil)
			rec := httptest.NewRecorder()
			if serveOrAbort(p, rec, req) {
				out[i] = queueAnswer{0, "", time.Since(t0)} // connection closed, no response
				return
			}
			out[i] = queueAnswer{rec.Code, rec.Header().Get("Retry-After"), time.Since(t0)}
		})
		synctest.Wait()
	}
	return func() []queueAnswer {
		wg.Wait()
		return out
	}
}

// serveOrAbort serves req as net/http would, reporting whether the handler
// aborted the connection (panic(http.ErrAbortHandler)) instead of answering.
func serveOrAbort(p *Proxy, w http.ResponseWriter, req *http.Request) (aborted bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				panic(v)
			}
			aborted = true
		}
	}()
	p.ServeHTTP(w, req)
	return false
}

// send serves n requests as start does and returns their answers.
func send(p *Proxy, n int, ctx context.Context) []queueAnswer { return start(p, n, ctx)() }

// TestQueueWaitsForTurn: a burst of requests to a queue of 10 a second
// with max_delay 500ms is forwarded 100ms apart, as nginx's limit_req
// rate=10r/s burst=5 does; the two past max_delay are refused with the
// wait until the queue takes them again (100ms, rounded up to 1s).
func TestQueueWaitsForTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, origin := queueProxy(t, 0, queueRule(500*time.Millisecond))
		const ms = time.Millisecond
		want := []queueAnswer{
			{200, "", 0}, {200, "", 100 * ms}, {200, "", 200 * ms}, {200, "", 300 * ms},
			{200, "", 400 * ms}, {200, "", 500 * ms}, {429, "1", 0}, {429, "1", 0},
		}
		got := send(p, len(want), t.Context())
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("request %d: got %+v, want %+v", i, got[i], want[i])
			}
		}
		if got := origin.n.Load(); got != 6 {
			t.Errorf("origin saw %d requests, want 6", got)
		}
		if got := testutil.ToFloat64(p.metrics.queued.WithLabelValues("api.example.com")); got != 0 {
			t.Errorf("edge_requests_queued after: got %v, want 0", got)
		}
	})
}

// TestQueueFull: with max_queued 2, the third request that would wait is
// refused, counted as queue_full, and its turn is given back.
func TestQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, origin := queueProxy(t, 2, queueRule(time.Second))
		ctx := t.Context()
		wait := start(p, 5, ctx)
		// Requests 1 and 2 wait; 3 and 4 found the queue full.
		if got := testutil.ToFloat64(p.metrics.queued.WithLabelValues("api.example.com")); got != 2 {
			t.Errorf("edge_requests_queued while waiting: got %v, want 2", got)
		}
		rec := httptest.NewRecorder()
		p.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/v1/config", nil))
		var view struct {
			Domains []struct {
				MaxQueued int   `json:"max_queued"`
				Queued    int64 `json:"queued"`
				Rules     []struct {
					MaxDelay string `json:"max_delay"`
				} `json:"rules"`
			} `json:"domains"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &view); err != nil || len(view.Domains) != 1 || len(view.Domains[0].Rules) != 1 {
			t.Fatalf("/v1/config: %v in %s", err, rec.Body.String())
		}
		if d := view.Domains[0]; d.MaxQueued != 2 || d.Queued != 2 || d.Rules[0].MaxDelay != "1s" {
			t.Errorf("/v1/config while waiting: got max_queued %d, queued %d, max_delay %q; want 2, 2, 1s",
				d.MaxQueued, d.Queued, d.Rules[0].MaxDelay)
		}
		got := wait()
		want := []queueAnswer{{200, "", 0}, {200, "", 100 * time.Millisecond}, {200, "", 200 * time.Millisecond}, {429, "1", 0}, {429, "1", 0}}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("request %d: got %+v, want %+v", i, got[i], want[i])
			}
		}
		if got := testutil.ToFloat64(p.metrics.blocked.WithLabelValues("api.example.com", "queue_full")); got != 2 {
			t.Errorf("queue_full refusals: got %v, want 2", got)
		}
		if got := origin.n.Load(); got != 3 {
			t.Errorf("origin saw %d requests, want 3", got)
		}
		// The refused turns were given back: at 200ms the bucket holds
		// just the last forwarded request, so one more waits 100ms.
		if got := send(p, 1, ctx); got[0] != (queueAnswer{200, "", 100 * time.Millisecond}) {
			t.Errorf("after: got %+v, want 200 after 100ms", got[0])
		}
	})
}

// TestQueueClientGone: a client that goes away while it waits is not
// forwarded and gets its connection closed, never an empty 200; its turn
// stays used: the next request waits behind it.
func TestQueueClientGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, origin := queueProxy(t, 0, queueRule(time.Second))
		send(p, 1, t.Context())
		ctx, cancel := context.WithCancel(t.Context())
		wait := start(p, 1, ctx)
		time.Sleep(50 * time.Millisecond)
		cancel()
		gone := wait()
		// Never an invented queueAnswer: the connection is closed at once.
		if gone[0].status != 0 || gone[0].after != 50*time.Millisecond {
			t.Errorf("gone client: got %+v, want the connection closed (status 0) after 50ms", gone[0])
		}
		if got := origin.n.Load(); got != 1 {
			t.Errorf("origin saw %d requests, want 1", got)
		}
		// At 50ms the bucket holds the first request's unit (half drained)
		// and the gone one's: the next waits 150ms.
		if got := send(p, 1, t.Context()); got[0] != (queueAnswer{200, "", 150 * time.Millisecond}) {
			t.Errorf("next: got %+v, want 200 after 150ms", got[0])
		}
		if got := testutil.ToFloat64(p.metrics.queued.WithLabelValues("api.example.com")); got != 0 {
			t.Errorf("edge_requests_queued after: got %v, want 0", got)
		}
	})
}

// TestQueueWithOtherRules: a request waits for the longest delay of the
// queues that hold it, and only if no other rule refuses it; one refused
// by another rule gives its turns back and is not held.
func TestQueueWithOtherRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := queueRule(time.Second)
		slow.Name, slow.Limit = "slow", 5 // a turn every 200ms
		fast := queueRule(time.Second)
		fast.Name = "fast"
		window := rule("window", 3, time.Minute)
		p, origin := queueProxy(t, 0, fast, slow, window)
		got := send(p, 4, t.Context())
		want := []queueAnswer{{200, "", 0}, {200, "", 200 * time.Millisecond}, {200, "", 400 * time.Millisecond}, {429, "", 0}}
		for i := range want {
			got[i].retry = ""
			if got[i] != want[i] {
				t.Errorf("request %d: got %+v, want %+v", i, got[i], want[i])
			}
		}
		if got := origin.n.Load(); got != 3 {
			t.Errorf("origin saw %d requests, want 3", got)
		}
	})
}

// TestQueueReload: changing max_delay keeps the bucket's level (the rule
// is reported changed, its key carried) and the new delay applies at once;
// max_queued takes effect on reload.
func TestQueueReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, origin := queueProxy(t, 0, queueRule(100*time.Millisecond))
		got := send(p, 3, t.Context())
		if got[2].status != 429 {
			t.Fatalf("third request: got %d, want 429", got[2].status)
		}
		// 100ms later the bucket holds the second request's unit.
		cfg := oneDomain("http://origin.test", queueRule(300*time.Millisecond))
		cfg.Domains[0].MaxQueued = 1
		table, err := rules.Compile(cfg)
		if err != nil {
			t.Fatalf("Compile: %v", err)
		}
		res, err := p.Reload(table, "test")
		if err != nil {
			t.Fatalf("Reload: %v", err)
		}
		if !slices.Equal(res.RulesChanged, []string{"api.example.com/q"}) || res.KeysCarried != 1 {
			t.Errorf("reload: rules_changed %v, keys_carried %d; want [api.example.com/q], 1", res.RulesChanged, res.KeysCarried)
		}
		got = send(p, 3, t.Context())
		want := []queueAnswer{{200, "", 100 * time.Millisecond}, {429, "1", 0}, {429, "1", 0}}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("after reload, request %d: got %+v, want %+v", i, got[i], want[i])
			}
		}
		if got := origin.n.Load(); got != 3 {
			t.Errorf("origin saw %d requests, want 3", got)
		}
	})
}
