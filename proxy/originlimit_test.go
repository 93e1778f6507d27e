package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// gateOrigin is a slow origin: each request it gets is announced on
// arrived (its query) and answered 200 "ok" only once a token is sent on
// release (or its client leaves).
type gateOrigin struct {
	*httptest.Server
	arrived chan string
	release chan struct{}
}

func startGateOrigin(t *testing.T) *gateOrigin {
	o := &gateOrigin{arrived: make(chan string, 100), release: make(chan struct{}, 100)}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.arrived <- r.URL.RawQuery
		select {
		case <-o.release:
			io.WriteString(w, "ok")
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(o.Close)
	t.Cleanup(func() { close(o.release) }) // before Close: no handler stays blocked
	return o
}

// next returns the query of the next request to arrive.
func (o *gateOrigin) next(t *testing.T) string {
	t.Helper()
	select {
	case q := <-o.arrived:
		return q
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the origin")
		return ""
	}
}

// none fails t if a request reaches the origin within a moment.
func (o *gateOrigin) none(t *testing.T) {
	t.Helper()
	select {
	case q := <-o.arrived:
		t.Fatalf("request %q reached the origin, want none", q)
	case <-time.After(50 * time.Millisecond):
	}
}

// result is a response's status, Retry-After and body.
type result struct {
	status     int
	retryAfter string
	body       string
	err        error
}

// sendAsync sends GET /x?query to api.example.com on the listener at
// addr with ctx, and returns the result on a channel.
func (ge *groupEnv) sendAsync(ctx context.Context, addr, query string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/x?"+query, nil)
		req.Host = "api.example.com"
		resp, err := ge.client.RoundTrip(req)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		ch <- result{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b)}
	}()
	return ch
}

func (ge *groupEnv) getResult(t *testing.T, addr, query string) result {
	t.Helper()
	r := <-ge.sendAsync(context.Background(), addr, query)
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r
}

func (r result) busy() bool {
	return r.status == http.StatusServiceUnavailable && r.retryAfter == "1" &&
		strings.Contains(r.body, "every origin server is at its limit of requests in flight")
}

// TestGroupMaxInFlightRefusedAtOnce: on both paths, with max_in_flight 2
// and no wait (origin_queue.timeout 0, the default), the third request
// while two are at a slow origin is refused at once with 503 and
// Retry-After 1 (counted origin_busy), and a slot given back takes the
// next; the metrics and GET /v1/origins show the limit.
func TestGroupMaxInFlightRefusedAtOnce(t *testing.T) {
	o := startGateOrigin(t)
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: []rules.OriginConfig{{URL: o.URL, MaxInFlight: 2}}}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	ge.paths(t, func(t *testing.T, addr string) {
		a, b := ge.sendAsync(t.Context(), addr, "a"), ge.sendAsync(t.Context(), addr, "b")
		o.next(t)
		o.next(t)
		fastBefore := ge.fastAnswered.Load()
		if r := ge.getResult(t, addr, "c"); !r.busy() {
			t.Errorf("the third request: got %d Retry-After %q %q, want 503, 1, busy", r.status, r.retryAfter, r.body)
		}
		if addr == ge.fast && ge.fastAnswered.Load() != fastBefore+1 {
			t.Error("the fast path did not answer the refusal itself")
		}
		o.none(t)
		o.release <- struct{}{}
		o.release <- struct{}{}
		for _, ch := range []<-chan result{a, b} {
			if r := <-ch; r.status != 200 {
				t.Fatalf("a request that had a slot: got %+v, want 200", r)
			}
		}
		o.release <- struct{}{} // for the next request: the slots are free
		if r := ge.getResult(t, addr, "d"); r.status != 200 {
			t.Errorf("the request after the slots were given back: got %+v, want 200", r)
		}
		o.next(t)
	})
	if n := testutil.ToFloat64(ge.proxy.metrics.requests.WithLabelValues("api", "origin_busy")); n != 2 {
		t.Errorf("edge_requests_total origin_busy %v, want 2", n)
	}
	body := metricsBody(t, ge.env)
	for _, want := range []string{
		`edge_origin_busy_total{domain="api",reason="full"} 2`,
		`edge_origin_busy_total{domain="api",reason="timeout"} 0`,
		fmt.Sprintf(`edge_origin_max_in_flight{domain="api",route="",server=%q} 2`, o.URL),
		`edge_origin_queued{domain="api"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	rec := httptest.NewRecorder()
	ge.proxy.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/origins", nil))
	var v originsView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || len(v.Domains) != 1 {
		t.Fatalf("GET /v1/origins: %v\n%s", err, rec.Body)
	}
	dv := v.Domains[0]
	if dv.Servers[0].MaxInFlight != 2 || dv.Queue == nil || *dv.Queue != (originQueueView{Max: 1000}) {
		t.Errorf("GET /v1/origins: max_in_flight %d, queue %+v, want 2 and {max 1000, timeout 0}", dv.Servers[0].MaxInFlight, dv.Queue)
	}
	if !strings.Contains(rec.Body.String(), `"max_in_flight": 2,`) {
		t.Errorf("GET /v1/origins lacks \"max_in_flight\": 2:\n%s", rec.Body)
	}
}

// TestGroupOriginQueueFIFO: with max_in_flight 1 and a queue of 2 that
// waits, two requests wait behind the one at the origin and a third is
// refused at once (the queue's max + 1th); each slot given back admits
// the oldest waiter. The fast path hands a domain whose requests may
// wait to net/http, whose request context ends a wait: its listener
// behaves alike.
func TestGroupOriginQueueFIFO(t *testing.T) {
	o := startGateOrigin(t)
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: []rules.OriginConfig{{URL: o.URL, MaxInFlight: 1}}},
		OriginQueue: &rules.OriginQueueConfig{Max: 2, Timeout: time.Minute}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	q := ge.proxy.state.Load().domains[0].originQueue
	ge.paths(t, func(t *testing.T, addr string) {
		var answers []<-chan result
		answers = append(answers, ge.sendAsync(t.Context(), addr, "0"))
		o.next(t)
		for i := 1; i <= 2; i++ {
			answers = append(answers, ge.sendAsync(t.Context(), addr, fmt.Sprint(i)))
			wait.For(t, 10*time.Second, "the request to wait", func() bool { return q.Waiting() == int64(i) })
		}
		if body := metricsBody(t, ge.env); !strings.Contains(body, `edge_origin_queued{domain="api"} 2`) {
			t.Error("metrics lack edge_origin_queued 2")
		}
		if r := ge.getResult(t, addr, "3"); !r.busy() {
			t.Errorf("past the queue's max: got %d Retry-After %q %q, want 503, 1, busy", r.status, r.retryAfter, r.body)
		}
		for i, ch := range answers {
			o.release <- struct{}{}
			if r := <-ch; r.status != 200 {
				t.Fatalf("request %d: got %+v, want 200", i, r)
			}
			if i+1 < len(answers) {
				if got, want := o.next(t), fmt.Sprint(i+1); got != want {
					t.Errorf("the slot went to request %s, want the oldest waiter, %s", got, want)
				}
			}
		}
		if n := q.Waiting(); n != 0 {
			t.Errorf("waiting %d at the end, want 0", n)
		}
	})
	if n := ge.fastAnswered.Load(); n != 0 {
		t.Errorf("the fast path answered %d requests of a domain whose requests may wait, want 0", n)
	}
	if n := testutil.ToFloat64(ge.proxy.metrics.originBusy.WithLabelValues("api", "full")); n != 2 {
		t.Errorf("edge_origin_busy_total full %v, want 2", n)
	}
}

// TestGroupOriginQueueTimeout: a request that waits origin_queue.timeout
// is refused with 503 and Retry-After 1, counted as a timeout. (The
// wait's length is origin's TestQueueTimeout, in synthetic time.)
func TestGroupOriginQueueTimeout(t *testing.T) {
	o := startGateOrigin(t)
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: []rules.OriginConfig{{URL: o.URL, MaxInFlight: 1}}},
		OriginQueue: &rules.OriginQueueConfig{Timeout: 50 * time.Millisecond}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	held := ge.sendAsync(t.Context(), ge.slow, "held")
	o.next(t)
	if r := ge.getResult(t, ge.slow, "late"); !r.busy() {
		t.Errorf("got %d Retry-After %q %q, want 503, 1, busy", r.status, r.retryAfter, r.body)
	}
	if n := testutil.ToFloat64(ge.proxy.metrics.originBusy.WithLabelValues("api", "timeout")); n != 1 {
		t.Errorf("edge_origin_busy_total timeout %v, want 1", n)
	}
	o.release <- struct{}{}
	if r := <-held; r.status != 200 {
		t.Errorf("the request at the origin: got %+v, want 200", r)
	}
}

// TestGroupOriginQueueClientLeaves: a waiting request whose client goes
// away leaves the queue at once, never reaches the origin, and the slot
// given back goes to the waiter behind it.
func TestGroupOriginQueueClientLeaves(t *testing.T) {
	o := startGateOrigin(t)
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: []rules.OriginConfig{{URL: o.URL, MaxInFlight: 1}}},
		OriginQueue: &rules.OriginQueueConfig{Timeout: time.Minute}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	q := ge.proxy.state.Load().domains[0].originQueue
	held := ge.sendAsync(t.Context(), ge.slow, "held")
	o.next(t)
	ctx, cancel := context.WithCancel(t.Context())
	gone := ge.sendAsync(ctx, ge.slow, "gone")
	wait.For(t, 10*time.Second, "the request to wait", func() bool { return q.Waiting() == 1 })
	behind := ge.sendAsync(t.Context(), ge.slow, "behind")
	wait.For(t, 10*time.Second, "the second to wait", func() bool { return q.Waiting() == 2 })
	cancel()
	if r := <-gone; r.err == nil {
		t.Errorf("the client that left got %+v", r)
	}
	wait.For(t, 10*time.Second, "the request whose client left to leave the queue", func() bool { return q.Waiting() == 1 })
	o.release <- struct{}{}
	<-held
	if got := o.next(t); got != "behind" {
		t.Errorf("the slot went to %q, want behind", got)
	}
	o.release <- struct{}{}
	if r := <-behind; r.status != 200 {
		t.Errorf("behind: got %+v, want 200", r)
	}
}

// TestGroupRetryRespectsMaxInFlight: a request retried after a connect
// error is not sent to a server at its max_in_flight: with none free, it
// is refused origin_busy, on both paths.
func TestGroupRetryRespectsMaxInFlight(t *testing.T) {
	o := startGateOrigin(t)
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{
		Origins: []rules.OriginConfig{{URL: deadURL(t)}, {URL: o.URL, MaxInFlight: 1}},
		Passive: &rules.PassiveConfig{Enabled: new(bool)}, Retries: &rules.RetriesConfig{Budget: "100%"}}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	ge.paths(t, func(t *testing.T, addr string) {
		held := ge.sendAsync(t.Context(), addr, "held") // at the origin, after a retry or not
		o.next(t)
		for i := range 3 {
			if r := ge.getResult(t, addr, fmt.Sprint(i)); !r.busy() {
				t.Errorf("request %d: got %d %q, want 503 busy (the dead server, then a retry refused)", i, r.status, r.body)
			}
		}
		o.none(t)
		o.release <- struct{}{}
		if r := <-held; r.status != 200 {
			t.Errorf("held: got %+v, want 200", r)
		}
	})
}

// TestAccessLogOriginBusy: a request refused for max_in_flight is logged
// with outcome origin_busy.
func TestAccessLogOriginBusy(t *testing.T) {
	o := startGateOrigin(t)
	cfg := oneDomain("", rule("all", 1000, time.Minute))
	cfg.Domains[0].Origins = []rules.OriginConfig{{URL: o.URL, MaxInFlight: 1}}
	p, out, _ := newLogProxy(t, cfg, "json", 0)
	srv := httptest.NewServer(p)
	defer srv.Close()
	held := make(chan struct{})
	go func() {
		defer close(held)
		getThrough(t, srv.URL+"/held", "api.example.com")
	}()
	o.next(t)
	getThrough(t, srv.URL+"/refused", "api.example.com")
	o.release <- struct{}{}
	<-held
	lines := out.lines(p)
	found := false
	for _, l := range lines {
		found = found || strings.Contains(l, `"/refused"`) && strings.Contains(l, `"outcome":"origin_busy"`) && strings.Contains(l, `"status":503`)
	}
	if !found {
		t.Errorf("no line of /refused with outcome origin_busy and status 503:\n%s", strings.Join(lines, "\n"))
	}
}

// TestStatusPageMaxInFlight: the status page lists a lone server with a
// max_in_flight under Origins, with its limit beside its requests in
// flight.
func TestStatusPageMaxInFlight(t *testing.T) {
	o := startGateOrigin(t)
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: []rules.OriginConfig{{URL: o.URL, MaxInFlight: 7}}}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	rec := httptest.NewRecorder()
	ge.proxy.StatusPage(StatusPageOptions{TokenRequired: func() bool { return false }, Ready: func() bool { return true }}).
		ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	for _, want := range []string{`<h2 id="h-origins">Origins</h2>`, "<td>" + o.URL + "</td>", "<td>0 of 7</td>"} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("status page lacks %s", want)
		}
	}
}

// TestRouteMaxInFlight: a route's server with max_in_flight 1 refuses
// the route's second request while its first is at the origin, 503
// origin_busy, on both paths, while the domain's own servers take the
// rest; the route's limit shows under its route label.
func TestRouteMaxInFlight(t *testing.T) {
	o, rest := startGateOrigin(t), startGroupOrigin(t, "rest")
	dc := rules.DomainConfig{
		UpstreamConfig: rules.UpstreamConfig{Origins: origins(rest.URL)},
		Routes: []rules.RouteConfig{{Name: "x", Match: &rules.RouteMatchConfig{PathPrefix: "/x"},
			UpstreamConfig: rules.UpstreamConfig{Origins: []rules.OriginConfig{{URL: o.URL, MaxInFlight: 1}}}}},
	}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	ge.paths(t, func(t *testing.T, addr string) {
		first := ge.sendAsync(t.Context(), addr, "first")
		o.next(t)
		if r := ge.getResult(t, addr, "second"); !r.busy() {
			t.Errorf("the route's second request: got %d Retry-After %q %q, want 503, 1, busy", r.status, r.retryAfter, r.body)
		}
		if st, body := ge.get(addr, "/other"); st != 200 || body != "rest" {
			t.Errorf("/other: %d %q, want 200 from the domain's own server", st, body)
		}
		o.release <- struct{}{}
		if r := <-first; r.status != 200 {
			t.Errorf("the route's first request: %+v, want 200", r)
		}
	})
	if body := metricsBody(t, ge.env); !strings.Contains(body, fmt.Sprintf(`edge_origin_max_in_flight{domain="api",route="x",server=%q} 1`, o.URL)) {
		t.Errorf("metrics lack the route's edge_origin_max_in_flight")
	}
}
