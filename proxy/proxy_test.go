package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/edgerate/edge/internal/redistest"
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

func TestForwardsEverythingTheClientSent(t *testing.T) {
	origin, got := newOrigin(t, "a")
	e := newEnv(t, oneDomain(origin.URL))
	resp, body := e.do("POST", "API.Example.com.", "/v1/items?q=1&r=two", map[string]string{
		"X-Custom":          "kept",
		"Connection":        "X-Drop-Me",
		"X-Drop-Me":         "hop-by-hop",
		"X-Forwarded-For":   "6.6.6.6",
		"X-Real-IP":         "6.6.6.6",
		"Forwarded":         "for=6.6.6.6",
		"X-Forwarded-Proto": "https",
	}, "payload")
	if resp.StatusCode != 200 || body != "origin:a" {
		t.Fatalf("got %d %q, want 200 origin:a", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Hop") != "" {
		t.Errorf("hop-by-hop response field X-Hop reached the client")
	}
	r := got()[0]
	checks := []struct{ what, got, want string }{
		{"method", r.Method, "POST"},
		{"host", r.Host, "API.Example.com."},
		{"path", r.Path, "/v1/items"},
		{"query", r.RawQuery, "q=1&r=two"},
		{"body", r.Body, "payload"},
		{"X-Custom", r.Header.Get("X-Custom"), "kept"},
		{"X-Drop-Me", r.Header.Get("X-Drop-Me"), ""},
		// The peer is not a trusted proxy: its forwarding fields are not
		// believed, and the origin is told the peer's address only.
		{"X-Forwarded-For", strings.Join(r.Header.Values("X-Forwarded-For"), ","), "127.0.0.1"},
		{"X-Real-Ip", r.Header.Get("X-Real-Ip"), ""},
		{"Forwarded", r.Header.Get("Forwarded"), ""},
		{"X-Forwarded-Host", r.Header.Get("X-Forwarded-Host"), "API.Example.com."},
		{"X-Forwarded-Proto", r.Header.Get("X-Forwarded-Proto"), "http"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("origin saw %s = %q, want %q", c.what, c.got, c.want)
		}
	}
}

func TestTrustedProxyChainIsKept(t *testing.T) {
	origin, got := newOrigin(t, "a")
	cfg := oneDomain(origin.URL, rule("per-ip", 1, time.Minute))
	cfg.ClientIP.TrustedProxies = []string{"127.0.0.1/32"}
	e := newEnv(t, cfg)
	hdr := map[string]string{"X-Forwarded-For": "203.0.113.1, 127.0.0.1", "X-Forwarded-Proto": "https"}
	if resp, _ := e.do("GET", "api.example.com", "/", hdr, ""); resp.StatusCode != 200 {
		t.Fatalf("first request: got %d, want 200", resp.StatusCode)
	}
	r := got()[0]
	if xff := r.Header.Get("X-Forwarded-For"); xff != "203.0.113.1, 127.0.0.1, 127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the chain with the peer appended", xff)
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p != "https" {
		t.Errorf("X-Forwarded-Proto = %q, want the trusted proxy's https", p)
	}
	// The client is 203.0.113.1: its second request is limited, another
	// client behind the same proxy is not.
	if resp, _ := e.do("GET", "api.example.com", "/", hdr, ""); resp.StatusCode != 429 {
		t.Errorf("same client again: got %d, want 429", resp.StatusCode)
	}
	hdr["X-Forwarded-For"] = "203.0.113.2"
	if resp, _ := e.do("GET", "api.example.com", "/", hdr, ""); resp.StatusCode != 200 {
		t.Errorf("other client: got %d, want 200", resp.StatusCode)
	}
}

func TestBlockedResponse(t *testing.T) {
	origin, got := newOrigin(t, "a")
	e := newEnv(t, oneDomain(origin.URL, rule("per-ip", 3, time.Minute)))
	e.clock.Advance(15 * time.Second)
	for i := range 3 {
		resp, _ := e.get("api.example.com", "/")
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: got %d, want 200", i, resp.StatusCode)
		}
		if resp.Header.Get("Ratelimit") != "" || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("request %d: headers: blocked (the default) sent fields on an allowed response", i)
		}
	}
	resp, body := e.get("api.example.com", "/")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("4th request: got %d, want 429", resp.StatusCode)
	}
	if n := len(got()); n != 3 {
		t.Errorf("origin saw %d requests, want 3", n)
	}
	// curr = 3 at 15s into the minute: the estimate 3×(60−e)/60 falls below
	// 3 just after the next minute starts, 45s on: rounded up, 46s.
	want := map[string]string{
		"Retry-After":           "46",
		"X-Ratelimit-Limit":     "3",
		"X-Ratelimit-Remaining": "0",
		"X-Ratelimit-Reset":     "46",
		"Ratelimit-Policy":      `"per-ip";q=3;w=60`,
		"Ratelimit":             `"per-ip";r=0;t=46`,
		"Content-Type":          "text/plain; charset=utf-8",
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if body != "rate limited: retry in 46s\n" {
		t.Errorf("body = %q", body)
	}
	for _, f := range []string{"Ratelimit", "Ratelimit-Policy"} {
		if _, err := httpsfv.UnmarshalList(resp.Header.Values(f)); err != nil {
			t.Errorf("%s is not a valid structured field list: %v", f, err)
		}
	}
	// JSON for clients that accept it.
	resp, body = e.do("GET", "api.example.com", "/", map[string]string{"Accept": "application/json, text/plain;q=0.5"}, "")
	var j struct {
		Error      string `json:"error"`
		Rule       string `json:"rule"`
		RetryAfter int    `json:"retry_after"`
	}
	if err := json.Unmarshal([]byte(body), &j); err != nil || j.Error != "rate_limited" || j.Rule != "per-ip" || j.RetryAfter != 46 {
		t.Errorf("JSON body = %q (%v), want rate_limited per-ip 46", body, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("JSON Content-Type = %q", ct)
	}
	// Just before the computed time still blocked, at it allowed.
	e.clock.Advance(45 * time.Second)
	if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != 429 {
		t.Errorf("at 45s (the boundary, estimate exactly 3): got %d, want 429", resp.StatusCode)
	}
	e.clock.Advance(time.Second)
	if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != 200 {
		t.Errorf("at 46s (Retry-After): got %d, want 200", resp.StatusCode)
	}
}

func TestHeadersAlwaysAndNone(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	always := rule("burst", 5, 10*time.Second)
	always.Headers = "always"
	hidden := rule("hidden", 100, time.Hour)
	hidden.Headers = "none"
	e := newEnv(t, oneDomain(origin.URL, always, hidden))
	resp, _ := e.get("api.example.com", "/")
	// At a period start: the request counts in full until the period
	// ends, 10s on, and r grows a nanosecond later.
	want := map[string]string{
		"X-Ratelimit-Limit":     "5",
		"X-Ratelimit-Remaining": "4",
		"X-Ratelimit-Reset":     "11",
		"Ratelimit-Policy":      `"burst";q=5;w=10`,
		"Ratelimit":             `"burst";r=4;t=11`,
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("allowed response: %s = %q, want %q", k, got, v)
		}
	}
}

// TestRateLimitTIsWaitForMoreQuota follows a client through a sliding
// window: t is the wait until r grows by one, a client that waits t gets
// through, and on a 429 t equals Retry-After.
func TestRateLimitTIsWaitForMoreQuota(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	burst := rule("burst", 5, 10*time.Second)
	burst.Headers = "always"
	e := newEnv(t, oneDomain(origin.URL, burst))
	const ms = time.Millisecond
	steps := []struct {
		name      string
		advance   time.Duration
		status    int
		rateLimit string
		retry     string // Retry-After; "" for none
	}{
		{"first", 0, 200, `"burst";r=4;t=11`, ""},
		{"second", 0, 200, `"burst";r=3;t=11`, ""},
		{"third", 0, 200, `"burst";r=2;t=11`, ""},
		{"fourth", 0, 200, `"burst";r=1;t=11`, ""},
		{"fifth, r=0", 0, 200, `"burst";r=0;t=11`, ""},
		// prev 5 at 5.5s into the next period: 2.25 + curr < 5 lets 3
		// through; each r grows once 5×(10s−e)/10s < used − curr, at 6s.
		{"next period", 15500 * ms, 200, `"burst";r=2;t=1`, ""},
		{"next period, second", 0, 200, `"burst";r=1;t=1`, ""},
		// The time until the estimate empties would say 15: the next
		// request passes half a second later.
		{"next period, r=0", 0, 200, `"burst";r=0;t=1`, ""},
		{"over", 0, 429, `"burst";r=0;t=1`, "1"},
		{"at 6s, estimate exactly 5", 500 * ms, 429, `"burst";r=0;t=1`, "1"},
		// 5×3.999/10 + 3 < 5; with curr 4, r grows once 5×(10s−e)/10s < 1,
		// at 8s: 1.999s on.
		{"waited t", ms, 200, `"burst";r=0;t=2`, ""},
	}
	for _, st := range steps {
		e.clock.Advance(st.advance)
		resp, _ := e.get("api.example.com", "/")
		got := []string{strconv.Itoa(resp.StatusCode), resp.Header.Get("Ratelimit"), resp.Header.Get("Retry-After")}
		want := []string{strconv.Itoa(st.status), st.rateLimit, st.retry}
		if !slices.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", st.name, got, want)
		}
		if x := resp.Header.Get("X-Ratelimit-Reset"); !strings.HasSuffix(st.rateLimit, ";t="+x) {
			t.Errorf("%s: X-Ratelimit-Reset = %q, want t of %s", st.name, x, st.rateLimit)
		}
	}
}

func TestCustomBlockResponse(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	r := rule("login", 1, time.Minute)
	r.BlockResponse = &rules.ResponseConfig{Status: 420, Body: `{"slow":"down"}`, ContentType: "application/json"}
	e := newEnv(t, oneDomain(origin.URL, r))
	e.get("api.example.com", "/")
	resp, body := e.get("api.example.com", "/")
	if resp.StatusCode != 420 || body != `{"slow":"down"}` || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("got %d %q %q, want the configured response", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("custom block response lacks Retry-After")
	}
}

func TestHostRouting(t *testing.T) {
	exact, _ := newOrigin(t, "exact")
	wild, _ := newOrigin(t, "wild")
	all, _ := newOrigin(t, "all")
	cfg := rules.Config{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1",
		Domains: []rules.DomainConfig{
			{Hosts: []string{"*.example.com"}, Origin: wild.URL},
			{Hosts: []string{"api.example.com"}, Origin: exact.URL},
			{Hosts: []string{"static.test"}, Respond: &rules.ResponseConfig{Status: 203, Body: "static"}},
		},
	}
	e := newEnv(t, cfg)
	tests := []struct {
		host       string
		wantStatus int
		wantBody   string
	}{
		{"api.example.com", 200, "origin:exact"},
		{"API.EXAMPLE.COM:8080", 200, "origin:exact"},
		{"a.b.example.com", 200, "origin:wild"},
		{"example.com", 421, ""},
		{"static.test", 203, "static"},
		{"unknown.test", 421, ""},
		{"bad host", 400, ""},
	}
	for _, tt := range tests {
		resp, body := e.get(tt.host, "/")
		if resp.StatusCode != tt.wantStatus || (tt.wantBody != "" && body != tt.wantBody) {
			t.Errorf("Host %q: got %d %q, want %d %q", tt.host, resp.StatusCode, body, tt.wantStatus, tt.wantBody)
		}
	}
	// A catch-all takes what nothing else claims.
	cfg.Domains = append(cfg.Domains, rules.DomainConfig{Hosts: []string{"*"}, Origin: all.URL})
	e = newEnv(t, cfg)
	if _, body := e.get("unknown.test", "/"); body != "origin:all" {
		t.Errorf("catch-all: got %q, want origin:all", body)
	}
	if _, body := e.get("api.example.com", "/"); body != "origin:exact" {
		t.Errorf("exact with catch-all present: got %q, want origin:exact", body)
	}
}

func TestRuleMatching(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	writes := rule("writes", 1, time.Minute)
	writes.Match = &rules.MatchConfig{PathPrefix: "/v1/", Methods: []string{"POST"}}
	e := newEnv(t, oneDomain(origin.URL, writes))
	// Reads and other paths are never limited.
	for range 5 {
		if resp, _ := e.get("api.example.com", "/v1/x"); resp.StatusCode != 200 {
			t.Fatalf("GET /v1/x: got %d, want 200", resp.StatusCode)
		}
		if resp, _ := e.do("POST", "api.example.com", "/v2/x", nil, ""); resp.StatusCode != 200 {
			t.Fatalf("POST /v2/x: got %d, want 200", resp.StatusCode)
		}
	}
	if resp, _ := e.do("POST", "api.example.com", "/v1/x", nil, ""); resp.StatusCode != 200 {
		t.Fatalf("first POST /v1/x: got %d, want 200", resp.StatusCode)
	}
	// Path tricks normalise to the prefix and are limited too, or are
	// refused (dot segments: see screen.go).
	for p, want := range map[string]int{"/v1/x": 429, "//v1/x": 429, "/v2/../v1/x": 400, "/./v1/x": 400} {
		if resp, _ := e.do("POST", "api.example.com", p, nil, ""); resp.StatusCode != want {
			t.Errorf("POST %s: got %d, want %d", p, resp.StatusCode, want)
		}
	}
}

func TestBlockedRequestsUseNoQuota(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	// "wide" would allow 10 a minute, "narrow" 2. While narrow blocks, wide
	// must not be charged: after narrow's window slides, wide still has
	// room for its full limit minus what was really forwarded.
	e := newEnv(t, oneDomain(origin.URL, rule("wide", 10, time.Hour), rule("narrow", 2, time.Minute)))
	forwarded := 0
	for range 50 {
		if resp, _ := e.get("api.example.com", "/"); resp.StatusCode == 200 {
			forwarded++
		}
	}
	if forwarded != 2 {
		t.Fatalf("forwarded %d, want 2", forwarded)
	}
	e.clock.Advance(2 * time.Minute)
	for range 50 {
		if resp, _ := e.get("api.example.com", "/"); resp.StatusCode == 200 {
			forwarded++
		}
	}
	if forwarded != 4 {
		t.Fatalf("forwarded %d after narrow's window slid, want 4 (wide must not have counted blocked requests)", forwarded)
	}
	if got := testutil.ToFloat64(e.proxy.metrics.decisions.WithLabelValues("api.example.com", "wide", "block", "allowed")); got != 100 {
		t.Errorf("wide allowed decisions = %v, want 100", got)
	}
}

func TestCountBlockedAndMitigation(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	counting := rule("counting", 2, 10*time.Second)
	counting.CountBlocked = true
	e := newEnv(t, oneDomain(origin.URL, counting))
	for range 20 {
		e.get("api.example.com", "/")
	}
	// 20 counted in the first period: the estimate stays ≥ 2 until
	// 20×(10−e)/10 < 2, e > 9s into the next period.
	e.clock.Advance(18 * time.Second)
	if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != 429 {
		t.Errorf("count_blocked: got %d at 18s, want 429", resp.StatusCode)
	}

	mitigated := rule("penalty", 1, 10*time.Second)
	mitigated.MitigationTimeout = time.Hour
	e = newEnv(t, oneDomain(origin.URL, mitigated))
	e.get("api.example.com", "/")
	resp, _ := e.get("api.example.com", "/")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3600" {
		t.Fatalf("mitigation start: got %d Retry-After %q, want 429 3600", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	e.clock.Advance(30 * time.Minute)
	resp, _ = e.get("api.example.com", "/")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1800" {
		t.Fatalf("mid-mitigation: got %d Retry-After %q, want 429 1800", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if got := testutil.ToFloat64(e.proxy.metrics.decisions.WithLabelValues("api.example.com", "penalty", "block", "mitigated")); got != 2 {
		t.Errorf("mitigated decisions = %v, want 2", got)
	}
}

func TestLogActionNeverBlocks(t *testing.T) {
	origin, got := newOrigin(t, "a")
	shadow := rule("shadow", 2, time.Minute)
	shadow.Action = "log"
	e := newEnv(t, oneDomain(origin.URL, shadow))
	for range 10 {
		if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != 200 {
			t.Fatalf("log rule blocked: got %d", resp.StatusCode)
		}
	}
	if n := len(got()); n != 10 {
		t.Errorf("origin saw %d, want 10", n)
	}
	m := e.proxy.metrics.decisions
	if a, l := testutil.ToFloat64(m.WithLabelValues("api.example.com", "shadow", "log", "allowed")),
		testutil.ToFloat64(m.WithLabelValues("api.example.com", "shadow", "log", "limited")); a != 2 || l != 8 {
		t.Errorf("log rule decisions: allowed %v limited %v, want 2 and 8 (as a block rule would count)", a, l)
	}
}

func TestHeaderKeys(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	byKey := rule("per-key", 1, time.Minute)
	byKey.Key = []string{"header:X-Api-Key"}
	e := newEnv(t, oneDomain(origin.URL, byKey))
	key := func(k string) map[string]string {
		if k == "" {
			return nil
		}
		return map[string]string{"X-Api-Key": k}
	}
	steps := []struct {
		key  string
		want int
	}{
		{"alpha", 200}, {"alpha", 429}, {"beta", 200},
		// No header: keyed by the client address, apart from any header
		// value — the first request passes, the second is limited.
		{"", 200}, {"", 429},
		// A header value equal to an address is its own key.
		{"127.0.0.1", 200},
	}
	for i, s := range steps {
		if resp, _ := e.do("GET", "api.example.com", "/", key(s.key), ""); resp.StatusCode != s.want {
			t.Errorf("step %d (key %q): got %d, want %d", i, s.key, resp.StatusCode, s.want)
		}
	}
}

func TestUpstreamFailures(t *testing.T) {
	dead := "http://" + redistest.RefusingAddr(t)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)
	cfg := rules.Config{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1",
		Timeouts: rules.TimeoutsConfig{Upstream: 100 * time.Millisecond},
		Domains: []rules.DomainConfig{
			{Hosts: []string{"dead.test"}, Origin: dead},
			{Hosts: []string{"slow.test"}, Origin: slow.URL},
		},
	}
	e := newEnv(t, cfg)
	if resp, body := e.get("dead.test", "/"); resp.StatusCode != 502 || !strings.Contains(body, "bad gateway") {
		t.Errorf("unreachable origin: got %d %q, want 502", resp.StatusCode, body)
	}
	if resp, body := e.get("slow.test", "/"); resp.StatusCode != 504 || !strings.Contains(body, "gateway timeout") {
		t.Errorf("slow origin: got %d %q, want 504", resp.StatusCode, body)
	}
}

func TestStreamingPassesThrough(t *testing.T) {
	release := make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: second\n\n")
	}))
	t.Cleanup(origin.Close)
	defer close(release)
	e := newEnv(t, oneDomain(origin.URL))
	req, _ := http.NewRequest("GET", e.srv.URL+"/events", nil)
	req.Host = "api.example.com"
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The first event must arrive while the origin still holds the stream.
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first event: got %q, %v", line, err)
	}
}

func TestWebSocketUpgrade(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want upgrade", 400)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		// Echo one line.
		line, _ := brw.ReadString('\n')
		brw.WriteString("echo:" + line)
		brw.Flush()
	}))
	t.Cleanup(origin.Close)
	e := newEnv(t, oneDomain(origin.URL))
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: api.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: got %v, %v, want 101", resp, err)
	}
	io.WriteString(conn, "hello\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo:hello\n" {
		t.Fatalf("echo: got %q, %v", line, err)
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
# HELP edge_requests_total Requests by domain and outcome: served (forwarded or answered by the domain's static response) or blocked by a rate limit.
# TYPE edge_requests_total counter
edge_requests_total{domain="api.example.com",outcome="blocked"} 1
edge_requests_total{domain="api.example.com",outcome="served"} 1
# HELP edge_misdirected_requests_total Requests whose Host no domain claims (answered 421, or 400 for an invalid Host).
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

func TestOriginFieldsAreMergedNotDuplicated(t *testing.T) {
	tests := []struct {
		name          string
		originRemain  string
		wantRemaining string
	}{
		{"origin more restrictive", "1", "1"},
		{"edge more restrictive", "500", "4"},
		{"origin value unreadable", "lots", "4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h := w.Header()
				h.Set("RateLimit-Policy", `"origin";q=1000;w=3600`)
				h.Set("RateLimit", `"origin";r=999;t=3600`)
				h.Set("X-RateLimit-Limit", "1000")
				h.Set("X-RateLimit-Remaining", tt.originRemain)
				h.Set("X-RateLimit-Reset", "3600")
			}))
			t.Cleanup(origin.Close)
			always := rule("edge", 5, time.Minute)
			always.Headers = "always"
			e := newEnv(t, oneDomain(origin.URL, always))
			resp, _ := e.get("api.example.com", "/")
			for _, f := range []string{"Ratelimit-Policy", "Ratelimit"} {
				items, err := httpsfv.UnmarshalList(resp.Header.Values(f))
				if err != nil || len(items) != 2 {
					t.Errorf("%s = %q (%v), want the origin's and edge's members in one list", f, resp.Header.Values(f), err)
				}
			}
			for _, f := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
				if n := len(resp.Header.Values(f)); n != 1 {
					t.Errorf("%s sent %d times, want once", f, n)
				}
			}
			if got := resp.Header.Get("X-Ratelimit-Remaining"); got != tt.wantRemaining {
				t.Errorf("X-RateLimit-Remaining = %q, want %q (the more restrictive)", got, tt.wantRemaining)
			}
		})
	}
}

func TestEmptyHeaderKeyIsNotSharedBucket(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	byKey := rule("per-key", 1, time.Minute)
	byKey.Key = []string{"header:X-Api-Key"}
	cfg := oneDomain(origin.URL, byKey)
	cfg.ClientIP.TrustedProxies = []string{"127.0.0.1/32"}
	e := newEnv(t, cfg)
	// Four clients behind a trusted proxy send an empty key: each is limited
	// on its own address, none shares a bucket with the others.
	for i := range 4 {
		hdr := map[string]string{"X-Api-Key": " ", "X-Forwarded-For": fmt.Sprintf("203.0.113.%d", i+1)}
		if resp, _ := e.do("GET", "api.example.com", "/", hdr, ""); resp.StatusCode != 200 {
			t.Errorf("client %d with an empty key: got %d, want 200", i, resp.StatusCode)
		}
	}
}

func TestBlockedResponseReportsRefundedQuota(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	wide := rule("wide", 10, time.Minute)
	wide.Headers = "always"
	e := newEnv(t, oneDomain(origin.URL, wide, rule("narrow", 1, time.Minute)))
	e.get("api.example.com", "/")
	resp, _ := e.get("api.example.com", "/")
	if resp.StatusCode != 429 {
		t.Fatalf("got %d, want 429", resp.StatusCode)
	}
	// The blocked request was given back to "wide": it reports 9 remaining
	// (one forwarded request), not 8.
	if got := resp.Header.Get("Ratelimit"); !strings.Contains(got, `"wide";r=9;`) {
		t.Errorf("RateLimit = %q, want wide's r=9 after the refund", got)
	}
}

// TestDomainFloodCannotEvictAnotherDomain: each domain counts in its own
// share of max_keys, so a flood of new clients on one domain leaves the
// counters of another untouched.
func TestDomainFloodCannotEvictAnotherDomain(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	cfg := rules.Config{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1",
		Origin:   origin.URL,
		MaxKeys:  200,
		ClientIP: rules.ClientIPConfig{TrustedProxies: []string{"127.0.0.1/32"}},
		Domains: []rules.DomainConfig{
			{Hosts: []string{"flooded.test"}, Rules: []rules.RuleConfig{rule("per-ip", 1, time.Minute)}},
			{Hosts: []string{"quiet.test"}, Rules: []rules.RuleConfig{rule("per-ip", 1, time.Minute)}},
		},
	}
	e := newEnv(t, cfg)
	quiet := func() int {
		resp, _ := e.do("GET", "quiet.test", "/", map[string]string{"X-Forwarded-For": "198.51.100.1"}, "")
		return resp.StatusCode
	}
	if got := quiet(); got != 200 {
		t.Fatalf("quiet client's first request: got %d, want 200", got)
	}
	for i := range 2000 {
		xff := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		e.do("GET", "flooded.test", "/", map[string]string{"X-Forwarded-For": xff}, "")
	}
	if got := quiet(); got != 429 {
		t.Errorf("quiet client after the flood on another domain: got %d, want 429 (its counter must survive)", got)
	}
	want := `
# HELP edge_tracked_keys Keys whose counters a domain holds now.
# TYPE edge_tracked_keys gauge
edge_tracked_keys{domain="flooded.test"} 100
edge_tracked_keys{domain="quiet.test"} 1
`
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(want), "edge_tracked_keys"); err != nil {
		t.Error(err)
	}
}
