package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// clock is an injected, settable time source.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	// A multiple of every period used here, so tests start at a boundary.
	c.ns.Store(time.Unix(1_800_000_000/3600*3600, 0).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// seen is what the origin received.
type seen struct {
	Method, Host, Path, RawQuery, Body string
	Header                             http.Header
}

// newOrigin starts an origin that records each request and answers 200
// "origin:<name>".
func newOrigin(t *testing.T, name string) (*httptest.Server, func() []seen) {
	t.Helper()
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, r.Host, r.URL.Path, r.URL.RawQuery, string(body), r.Header.Clone()})
		mu.Unlock()
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "must not reach the client")
		io.WriteString(w, "origin:"+name)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), got...)
	}
}

// env is a proxy under test behind a real listener.
type env struct {
	t     *testing.T
	clock *clock
	proxy *Proxy
	reg   *prometheus.Registry
	srv   *httptest.Server
}

func newEnv(t *testing.T, cfg rules.Config) *env {
	t.Helper()
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	e := &env{t: t, clock: newClock(), reg: prometheus.NewRegistry()}
	e.proxy, err = New(Options{Table: table, Registerer: e.reg, Now: e.clock.Now, Version: "test"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.srv = httptest.NewServer(e.proxy)
	t.Cleanup(e.srv.Close)
	return e
}

// do sends a request with Host host and returns the response with its body
// read.
func (e *env) do(method, host, target string, hdr map[string]string, body string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+target, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (e *env) get(host, target string) (*http.Response, string) {
	e.t.Helper()
	return e.do("GET", host, target, nil, "")
}

func rule(name string, limit int, period time.Duration) rules.RuleConfig {
	return rules.RuleConfig{Name: name, Limit: limit, Period: period}
}

func oneDomain(origin string, rs ...rules.RuleConfig) rules.Config {
	return rules.Config{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1",
		Origin:  origin,
		Domains: []rules.DomainConfig{{Hosts: []string{"api.example.com"}, Rules: rs}},
	}
}

func TestMetricsExposition(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	e := newEnv(t, oneDomain(origin.URL, rule("per-ip", 1, time.Minute)))
	e.get("api.example.com", "/")
	e.get("api.example.com", "/")
	e.get("nobody.test", "/")
	// Client addresses and unknown hosts never become label values.
	want := `
# HELP edge_requests_total Requests by domain and outcome: served (forwarded, answered by the domain's static response, or allowed by the check listener), blocked by a rate limit, unavailable (the rate limit store could not decide), bad_cost (a cost header a block rule cannot use), body_refused (413, 400 or 408 for the body), origin_failed (502), origin_timeout (504), origin_down (no origin server could be reached: 502, or when_down's status), origin_busy (503: every origin server was at its max_in_flight), shed (503 by load shedding), loop (508: the request came back to the node that forwarded it), redirect (308 to https by https_redirect), acme (an ACME server's HTTP-01 validation, answered by edge) or invalid_api_key (403: a missing or unknown API key where api_keys requires one).
# TYPE edge_requests_total counter
edge_requests_total{domain="api.example.com",outcome="bad_cost"} 0
edge_requests_total{domain="api.example.com",outcome="blocked"} 1
edge_requests_total{domain="api.example.com",outcome="body_refused"} 0
edge_requests_total{domain="api.example.com",outcome="loop"} 0
edge_requests_total{domain="api.example.com",outcome="origin_busy"} 0
edge_requests_total{domain="api.example.com",outcome="origin_down"} 0
edge_requests_total{domain="api.example.com",outcome="origin_failed"} 0
edge_requests_total{domain="api.example.com",outcome="origin_timeout"} 0
edge_requests_total{domain="api.example.com",outcome="served"} 1
edge_requests_total{domain="api.example.com",outcome="shed"} 0
# HELP edge_misdirected_requests_total Requests whose Host no domain claims, or over TLS one the connection's certificate is not for (answered 421), or with an invalid Host (400).
# TYPE edge_misdirected_requests_total counter
edge_misdirected_requests_total 1
# HELP edge_tracked_keys Keys whose counters a domain holds now.
# TYPE edge_tracked_keys gauge
edge_tracked_keys{domain="api.example.com"} 1
`
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(want),
		"edge_requests_total", "edge_misdirected_requests_total", "edge_tracked_keys"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(e.reg, "edge_upstream_request_duration_seconds"); err != nil || n != 6 {
		t.Errorf("upstream histogram series = %d (%v), want 6 (one per status class)", n, err)
	}
	problems, err := testutil.GatherAndLint(e.reg)
	if err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", problems, err)
	}
}
