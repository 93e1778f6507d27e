package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
)

// slowOrigin is an origin that reports each request's arrival and answers
// only once release is closed.
func slowOrigin(t *testing.T) (srv *httptest.Server, arrived chan string, release func()) {
	t.Helper()
	arrived = make(chan string, 1000)
	gate := make(chan struct{})
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.Method + " " + r.URL.Path
		select {
		case <-gate:
		case <-r.Context().Done():
		}
		io.WriteString(w, "ok")
	}))
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(srv.Close)
	t.Cleanup(release) // before srv.Close, which waits for handlers
	return srv, arrived, release
}

// shedConfig is a domain of max_in_flight 10, critical_reserve 0.2 and
// sheddable_share 0.5 (sheddable refused at 5 in flight, normal at 8,
// critical at 10), with the priorities of docs/shedding.md's example, and a rule of
// limit requests a minute per client.
func shedConfig(origin string, limit int) rules.Config {
	cfg := oneDomain(origin, rule("all", limit, time.Minute))
	share := 0.5
	cfg.Domains[0].Shed = &rules.ShedConfig{MaxInFlight: 10, CriticalReserve: 0.2, SheddableShare: &share}
	cfg.Domains[0].Priorities = []rules.PriorityConfig{
		{Match: rules.PriorityMatch{PathPrefix: "/v1/charges", Methods: []string{"POST"}}, Class: "critical"},
		{Match: rules.PriorityMatch{Headers: map[string]string{"x-priority": "high"}}, Class: "critical"},
		{Match: rules.PriorityMatch{Methods: []string{"GET", "HEAD"}}, Class: "sheddable"},
	}
	return cfg
}

// shedAnswer is a response's status, Retry-After and body.
type shedAnswer struct {
	status int
	retry  string
	body   string
}

// TestShedOrderAndReserve fills a domain step by step with requests held
// by a slow origin: sheddable requests are refused from 5 in flight,
// normal ones from 8, critical ones only from 10, so the reserve holds.
// Refused requests give back what the rule counted: the rule's limit of
// 11 admits the 10 that reached the origin and one more, and refuses the
// next with 429.
func TestShedOrderAndReserve(t *testing.T) {
	origin, arrived, release := slowOrigin(t)
	e := newEnv(t, shedConfig(origin.URL, 11))

	var wg sync.WaitGroup
	defer wg.Wait()
	defer release()
	answers := make(chan shedAnswer, 100)
	send := func(method, path string, hdr map[string]string) {
		wg.Go(func() {
			resp, body := e.do(method, "api.example.com", path, hdr, "")
			answers <- shedAnswer{resp.StatusCode, resp.Header.Get("Retry-After"), body}
		})
	}
	// step sends one request and waits until it reaches the origin (want
	// 0) or is answered with want.
	step := func(name, method, path string, hdr map[string]string, want int) {
		t.Helper()
		send(method, path, hdr)
		select {
		case got := <-arrived:
			if want != 0 {
				t.Fatalf("%s: reached the origin (%s), want %d", name, got, want)
			}
		case a := <-answers:
			if a.status != want {
				t.Fatalf("%s: got %d %q, want %d", name, a.status, a.body, want)
			}
			if want == http.StatusServiceUnavailable && a.retry != "1" {
				t.Fatalf("%s: Retry-After %q, want 1", name, a.retry)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: neither forwarded nor answered", name)
		}
	}
	critical := func(i int) { step(fmt.Sprintf("critical %d", i), "POST", "/v1/charges", nil, 0) }
	for i := range 5 {
		step(fmt.Sprintf("sheddable %d", i), "GET", "/items", nil, 0)
	}
	step("sheddable at 5", "GET", "/items", nil, 503)
	step("sheddable HEAD at 5", "HEAD", "/items", nil, 503)
	for i := range 3 {
		step(fmt.Sprintf("normal %d", i), "POST", "/items", nil, 0)
	}
	step("normal at 8", "POST", "/items", nil, 503)
	step("normal DELETE at 8", "DELETE", "/items/1", nil, 503)
	step("sheddable at 8", "GET", "/items", nil, 503)
	critical(8)
	step("critical by header at 9", "GET", "/items", map[string]string{"X-Priority": "high"}, 0)
	step("critical at 10", "POST", "/v1/charges", nil, 503)
	step("critical by header at 10", "GET", "/items", map[string]string{"X-Priority": "high"}, 503)

	if got := testutil.ToFloat64(e.proxy.metrics.shedInFlight.WithLabelValues("api.example.com")); got != 10 {
		t.Errorf("edge_shed_in_flight = %v, want 10", got)
	}
	for class, want := range map[string]float64{"sheddable": 3, "normal": 2, "critical": 2} {
		if got := testutil.ToFloat64(e.proxy.metrics.shedRefused.WithLabelValues("api.example.com", class)); got != want {
			t.Errorf("edge_shed_requests_total{class=%q} = %v, want %v", class, got, want)
		}
	}

	release()
	for range 10 {
		if a := <-answers; a.status != 200 {
			t.Errorf("a request that reached the origin: got %d %q, want 200", a.status, a.body)
		}
	}
	wg.Wait()
	if got := testutil.ToFloat64(e.proxy.metrics.shedInFlight.WithLabelValues("api.example.com")); got != 0 {
		t.Errorf("edge_shed_in_flight after the responses = %v, want 0", got)
	}
	// The 7 refused gave back what the rule counted: one more is allowed,
	// then the rule refuses (429, not 503: the rules decide first).
	if resp, body := e.get("api.example.com", "/items"); resp.StatusCode != 200 {
		t.Fatalf("the 11th counted request: got %d %q, want 200", resp.StatusCode, body)
	}
	<-arrived
	if resp, body := e.get("api.example.com", "/items"); resp.StatusCode != 429 {
		t.Fatalf("the 12th counted request: got %d %q, want 429", resp.StatusCode, body)
	}
}

// TestShedBurst sends many requests of each class at once to a slow
// origin: however they interleave, exactly as many of each class reach
// the origin as its threshold allows.
func TestShedBurst(t *testing.T) {
	tests := []struct {
		name   string
		method string
		path   string
		want   int // how many reach the origin
	}{
		{"sheddable", "GET", "/items", 5},
		{"normal", "POST", "/items", 8},
		{"critical", "POST", "/v1/charges", 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			origin, arrived, release := slowOrigin(t)
			e := newEnv(t, shedConfig(origin.URL, 1000))
			const n = 40
			var wg sync.WaitGroup
			answers := make(chan shedAnswer, n)
			for range n {
				wg.Go(func() {
					resp, body := e.do(tt.method, "api.example.com", tt.path, map[string]string{"Accept": "application/json"}, "")
					answers <- shedAnswer{resp.StatusCode, resp.Header.Get("Retry-After"), body}
				})
			}
			for i := range n - tt.want {
				a := <-answers
				var got struct{ Error, Class string }
				if err := json.Unmarshal([]byte(a.body), &got); err != nil || a.status != 503 || got.Error != "overloaded" || got.Class != tt.name {
					t.Fatalf("refusal %d: got %d %q, want 503 overloaded %s", i, a.status, a.body, tt.name)
				}
			}
			// Every refusal is in; the admitted requests are on their way.
			for i := range tt.want {
				select {
				case <-arrived:
				case <-time.After(10 * time.Second):
					t.Fatalf("only %d reached the origin, want %d", i, tt.want)
				}
			}
			release()
			wg.Wait()
			close(answers)
			ok := 0
			for a := range answers {
				if a.status == 200 {
					ok++
				}
			}
			if ok != tt.want {
				t.Errorf("got %d answered 200, want %d", ok, tt.want)
			}
			if extra := len(arrived); extra != 0 {
				t.Errorf("%d more reached the origin", extra)
			}
			if got := testutil.ToFloat64(e.proxy.metrics.shedRefused.WithLabelValues("api.example.com", tt.name)); got != n-float64(tt.want) {
				t.Errorf("edge_shed_requests_total = %v, want %d", got, n-tt.want)
			}
		})
	}
}

// TestShedWithoutRules sheds a domain that has no rate rules, and answers
// in text unless JSON is accepted.
func TestShedWithoutRules(t *testing.T) {
	origin, arrived, release := slowOrigin(t)
	cfg := shedConfig(origin.URL, 1)
	cfg.Domains[0].Rules = nil
	cfg.Domains[0].Shed.MaxInFlight = 1
	cfg.Domains[0].Shed.CriticalReserve = 0
	cfg.Domains[0].Shed.SheddableShare = nil
	e := newEnv(t, cfg)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer release()
	wg.Go(func() { e.get("api.example.com", "/a") })
	<-arrived
	resp, body := e.get("api.example.com", "/b")
	if resp.StatusCode != 503 || !strings.HasPrefix(body, "overloaded: sheddable") || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("got %d %q (%s), want 503 overloaded: sheddable in text", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
}

// TestShedReload: a reload keeps the count of requests in flight, and the
// new thresholds apply to it at once; removing shed stops the shedding.
func TestShedReload(t *testing.T) {
	origin, arrived, release := slowOrigin(t)
	cfg := shedConfig(origin.URL, 1000)
	e := newEnv(t, cfg)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer release()
	for range 4 { // 4 normal requests in flight
		wg.Go(func() { e.do("POST", "api.example.com", "/items", nil, "") })
		<-arrived
	}
	status := func() int {
		resp, _ := e.do("POST", "api.example.com", "/items", nil, "")
		return resp.StatusCode
	}
	cfg.Domains[0].Shed = &rules.ShedConfig{MaxInFlight: 4}
	if _, err := e.proxy.Reload(compile(t, cfg), "smaller"); err != nil {
		t.Fatal(err)
	}
	if got := status(); got != 503 {
		t.Fatalf("after a reload to max_in_flight 4 with 4 in flight: got %d, want 503", got)
	}
	cfg.Domains[0].Shed, cfg.Domains[0].Priorities = nil, nil
	if _, err := e.proxy.Reload(compile(t, cfg), "no shed"); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { e.do("POST", "api.example.com", "/items", nil, "") })
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("without shed, a request did not reach the origin")
	}
}

// TestShedCountsOnlySentRequests: a request holds no shedding slot while
// edge buffers its body: with max_in_flight 1, a client slowly sending a
// body does not keep another request from the origin; once its body is
// in, that request holds the slot and the first is shed with 503, giving
// back what its rules counted (its count and its concurrency slot), so
// the rule's limit of 2 still admits the next request.
func TestShedCountsOnlySentRequests(t *testing.T) {
	origin, arrived, release := slowOrigin(t)
	cfg := shedConfig(origin.URL, 2)
	cfg.Domains[0].Shed.MaxInFlight = 1
	cfg.Domains[0].Shed.CriticalReserve = 0
	cfg.Domains[0].Shed.SheddableShare = nil
	cfg.Domains[0].Rules = append(cfg.Domains[0].Rules, concurrencyRule("parallel", 5))
	e := newEnv(t, cfg)
	store := e.proxy.state.Load().domains[0].store
	shedInFlight := func() float64 {
		return testutil.ToFloat64(e.proxy.metrics.shedInFlight.WithLabelValues("api.example.com"))
	}

	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 10\r\n\r\nhalf-")
	wait.For(t, 5*time.Second, "edge buffering the body", func() bool { return e.proxy.buffered.reserved.Load() > 0 })
	if got := shedInFlight(); got != 0 {
		t.Errorf("edge_shed_in_flight while a body is buffered: %v, want 0", got)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer release()
	held := make(chan int, 1)
	wg.Go(func() {
		resp, _ := e.get("api.example.com", "/b")
		held <- resp.StatusCode
	})
	select {
	case got := <-arrived:
		if got != "GET /b" {
			t.Fatalf("origin reached by %s, want GET /b while the upload buffers", got)
		}
	case code := <-held:
		t.Fatalf("GET /b while the upload buffers: %d, want it at the origin", code)
	}
	io.WriteString(c, "done!")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || !strings.HasPrefix(string(body), "overloaded: normal") {
		t.Fatalf("the upload once buffered: %d %q, want 503 overloaded: normal", resp.StatusCode, body)
	}
	if got := store.SlotsInUse(1); got != 1 {
		t.Errorf("concurrency slots in use after the upload was shed: %d, want 1 (the held request's)", got)
	}
	release()
	if got := <-held; got != 200 {
		t.Fatalf("held request: %d, want 200", got)
	}
	for i, want := range []int{200, 429} {
		if resp, _ := e.get("api.example.com", "/c"); resp.StatusCode != want {
			t.Errorf("request %d after the upload was shed: %d, want %d (the upload's count given back)", i+1, resp.StatusCode, want)
		}
	}
}
