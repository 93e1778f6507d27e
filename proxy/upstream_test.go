package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// groupOrigin is an httptest origin of a group that counts what it got
// and answers as its mode says: "ok" (200 "name"), "503", "close" (the
// connection closes once the request is read), "stall" (no answer for
// 2 s).
type groupOrigin struct {
	*httptest.Server
	name string
	mode atomic.Value // string
	got  atomic.Int64
}

func startGroupOrigin(t *testing.T, name string) *groupOrigin {
	o := &groupOrigin{name: name}
	o.mode.Store("ok")
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		o.got.Add(1)
		switch o.mode.Load().(string) {
		case "503":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "close":
			c, _, _ := http.NewResponseController(w).Hijack()
			c.Close()
		case "stall":
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
		default:
			io.WriteString(w, name)
		}
	}))
	t.Cleanup(o.Close)
	return o
}

// deadURL is the URL of a port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	// A socket bound to the port but not listening refuses every
	// connection (an RST), and holds the port until the test ends, where
	// a listener closed at once leaves it free for another test to take.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// groupEnv is a proxy with one domain forwarded to a group, reached on
// both paths: slow (net/http alone) and fast (the guard's fast path in
// front of it).
type groupEnv struct {
	*env
	slow, fast string // listener addresses
	// fastAnswered counts the requests the fast path answered.
	fastAnswered atomic.Int64
	client       *http.Transport
}

func newGroupEnv(t *testing.T, dc rules.DomainConfig, timeouts rules.TimeoutsConfig) *groupEnv {
	t.Helper()
	dc.Name, dc.Hosts = "api", []string{"api.example.com"}
	// A rule that allows everything: the fast path decides only the
	// requests of a domain with rules.
	dc.Rules = []rules.RuleConfig{rule("all", 1000000, time.Minute)}
	e := newEnv(t, rules.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1", Timeouts: timeouts, Domains: []rules.DomainConfig{dc}})
	ge := &groupEnv{env: e, client: &http.Transport{}}
	t.Cleanup(ge.client.CloseIdleConnections)
	table := e.proxy.state.Load().table
	ge.slow = startServer(t, table, e.proxy)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e.proxy, ErrorLog: discardLog}
	opts := guard.ListenerOptions{MaxHeaderBytes: table.MaxHeaderBytes, WriteIdleTimeout: 5 * time.Second,
		Answer: func(r *guard.Request, out []byte) ([]byte, bool) {
			out, ok := e.proxy.Answer(&r.Head, out)
			if ok {
				ge.fastAnswered.Add(1)
			}
			return out, ok
		}}
	go srv.Serve(guard.NewListener(ln, opts))
	t.Cleanup(func() { srv.Close() })
	ge.fast = ln.Addr().String()
	t.Cleanup(func() { e.proxy.Close() })
	return ge
}

// send sends method to path on the listener at addr, on a new
// connection, and returns the status and body.
func (ge *groupEnv) send(t *testing.T, addr, method, body string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+"/x", strings.NewReader(body))
	req.Host = "api.example.com"
	if body == "" {
		req.Body = nil
	}
	resp, err := ge.client.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// paths runs f for each request path.
func (ge *groupEnv) paths(t *testing.T, f func(t *testing.T, addr string)) {
	for _, p := range []struct{ name, addr string }{{"net/http", ge.slow}, {"fast", ge.fast}} {
		t.Run(p.name, func(t *testing.T) { f(t, p.addr) })
	}
}

func origins(urls ...string) []rules.OriginConfig {
	var out []rules.OriginConfig
	for _, u := range urls {
		out = append(out, rules.OriginConfig{URL: u})
	}
	return out
}

func TestGroupRoundRobinBothPaths(t *testing.T) {
	a, b, c := startGroupOrigin(t, "a"), startGroupOrigin(t, "b"), startGroupOrigin(t, "c")
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: []rules.OriginConfig{{URL: a.URL, Weight: 2}, {URL: b.URL}, {URL: c.URL}}}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	for _, addr := range []string{ge.slow, ge.fast} {
		for range 40 {
			if st, _, _ := ge.send(t, addr, "GET", ""); st != 200 {
				t.Fatalf("status %d", st)
			}
		}
	}
	if n := ge.fastAnswered.Load(); n != 40 {
		t.Errorf("the fast path answered %d requests, want its 40", n)
	}
	if a.got.Load() != 40 || b.got.Load() != 20 || c.got.Load() != 20 {
		t.Errorf("got %d %d %d, want 40 20 20 (weights 2:1:1)", a.got.Load(), b.got.Load(), c.got.Load())
	}
	if n := testutil.ToFloat64(ge.proxy.metrics.requests.WithLabelValues("api", "served")); n != 80 {
		t.Errorf("served %v, want 80", n)
	}
	body := metricsBody(t, ge.env)
	for _, want := range []string{
		fmt.Sprintf(`edge_origin_requests_total{code_class="2xx",domain="api",server=%q} 40`, a.URL),
		fmt.Sprintf(`edge_origin_healthy{domain="api",server=%q} 1`, b.URL),
		fmt.Sprintf(`edge_origin_in_flight{domain="api",server=%q} 0`, c.URL),
		fmt.Sprintf(`edge_origin_response_seconds_count{domain="api",server=%q} 20`, c.URL),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// metricsBody is the registry's exposition.
func metricsBody(t *testing.T, e *env) string {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			labels := ""
			for i, l := range m.Label {
				if i > 0 {
					labels += ","
				}
				labels += fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())
			}
			var v float64
			switch {
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Histogram != nil:
				fmt.Fprintf(&b, "%s_count{%s} %d\n", mf.GetName(), labels, m.Histogram.GetSampleCount())
				continue
			}
			fmt.Fprintf(&b, "%s{%s} %v\n", mf.GetName(), labels, v)
		}
	}
	return b.String()
}

func TestGroupRetriesConnectErrors(t *testing.T) {
	a := startGroupOrigin(t, "a")
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(deadURL(t), a.URL), Passive: &rules.PassiveConfig{Enabled: new(bool)},
		Retries: &rules.RetriesConfig{Budget: "100%"}}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	ge.paths(t, func(t *testing.T, addr string) {
		for _, method := range []string{"GET", "POST", "DELETE"} {
			for i := range 4 { // round robin: the dead server first every other request
				st, body, _ := ge.send(t, addr, method, map[bool]string{true: "payload"}[method == "POST"])
				if st != 200 || body != "a" {
					t.Errorf("%s %d: got %d %q, want 200 from a (retried after the connect error)", method, i, st, body)
				}
			}
		}
	})
	if n := ge.proxy.state.Load().domains[0].group.RetryCounts()["sent"]; n != 12 {
		t.Errorf("retries sent %d, want 12 (one every other request)", n)
	}
}

func TestGroupNeverRetriesAPostThatReachedTheOrigin(t *testing.T) {
	a, b := startGroupOrigin(t, "a"), startGroupOrigin(t, "b")
	a.mode.Store("close")
	b.mode.Store("close")
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, b.URL), Passive: &rules.PassiveConfig{Enabled: new(bool)}}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	ge.paths(t, func(t *testing.T, addr string) {
		before := a.got.Load() + b.got.Load()
		if st, _, _ := ge.send(t, addr, "POST", "payload"); st != 502 {
			t.Errorf("POST: status %d, want 502", st)
		}
		if got := a.got.Load() + b.got.Load() - before; got != 1 {
			t.Errorf("the POST reached the origins %d times, want once", got)
		}
		// A GET reset before its response is retried once on the other
		// server (which resets it too: 502 after two tries).
		before = a.got.Load() + b.got.Load()
		if st, _, _ := ge.send(t, addr, "GET", ""); st != 502 {
			t.Errorf("GET: status %d, want 502", st)
		}
		if got := a.got.Load() + b.got.Load() - before; got != 2 {
			t.Errorf("the GET reached the origins %d times, want twice (one retry)", got)
		}
	})
}

func TestGroupRetries503WhenAsked(t *testing.T) {
	a, b := startGroupOrigin(t, "a"), startGroupOrigin(t, "b")
	a.mode.Store("503")
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, b.URL), Passive: &rules.PassiveConfig{Enabled: new(bool)},
		Retries: &rules.RetriesConfig{On: []string{"connect_error", "503"}, Budget: "100%"}}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	ge.paths(t, func(t *testing.T, addr string) {
		for range 4 {
			if st, body, _ := ge.send(t, addr, "GET", ""); st != 200 || body != "b" {
				t.Errorf("got %d %q, want 200 from b", st, body)
			}
		}
		// A POST's 503 reached the origin: not retried.
		saw503 := false
		for range 2 {
			if st, _, _ := ge.send(t, addr, "POST", "x"); st == 503 {
				saw503 = true
			}
		}
		if !saw503 {
			t.Error("a POST answered 503 was retried")
		}
	})
}

func TestGroupPassiveEjectionAndRecovery(t *testing.T) {
	a, b, c := startGroupOrigin(t, "a"), startGroupOrigin(t, "b"), startGroupOrigin(t, "c")
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, b.URL, c.URL), Retries: &rules.RetriesConfig{Attempts: new(int)}}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	a.mode.Store("503")
	ge.paths(t, func(t *testing.T, addr string) {
		a.got.Store(0)
		for range 30 {
			ge.send(t, addr, "GET", "")
		}
		// passive's defaults: ejected after 3 failures.
		if got := a.got.Load(); got != 3 {
			t.Errorf("the failing server got %d requests, want 3 (then ejected)", got)
		}
		ge.clock.Advance(31 * time.Second) // eject_for 30s
		a.mode.Store("ok")
		for range 30 {
			ge.send(t, addr, "GET", "")
		}
		if got := a.got.Load(); got < 12 || got > 14 {
			t.Errorf("after eject_for the server got %d requests in all, want 3 + about 10", got)
		}
		a.mode.Store("503")
	})
	body := metricsBody(t, ge.env)
	if want := fmt.Sprintf(`edge_origin_ejections_total{domain="api",reason="passive",server=%q} 2`, a.URL); !strings.Contains(body, want) {
		t.Errorf("metrics lack %s", want)
	}
}

func TestGroupWhenDown(t *testing.T) {
	tests := []struct {
		name       string
		whenDown   *rules.WhenDownConfig
		status     int
		retryAfter string
	}{
		{"default", nil, 502, ""},
		{"when_down", &rules.WhenDownConfig{Status: 503, RetryAfter: 30 * time.Second}, 503, "30"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(deadURL(t), deadURL(t), deadURL(t)), WhenDown: tt.whenDown}}
			ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
			ge.paths(t, func(t *testing.T, addr string) {
				for range 5 {
					st, _, h := ge.send(t, addr, "GET", "")
					if st != tt.status || h.Get("Retry-After") != tt.retryAfter {
						t.Errorf("got %d Retry-After %q, want %d %q", st, h.Get("Retry-After"), tt.status, tt.retryAfter)
					}
				}
			})
			if n := testutil.ToFloat64(ge.proxy.metrics.requests.WithLabelValues("api", outcomeOriginDown)); n != 10 {
				t.Errorf("origin_down %v, want 10", n)
			}
		})
	}
}

func TestGroupStallIsATimeout(t *testing.T) {
	a, b := startGroupOrigin(t, "a"), startGroupOrigin(t, "b")
	a.mode.Store("stall")
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, b.URL)}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{Upstream: 100 * time.Millisecond})
	ge.paths(t, func(t *testing.T, addr string) {
		codes := map[int]int{}
		for range 4 {
			st, _, _ := ge.send(t, addr, "GET", "")
			codes[st]++
		}
		// A timeout is not retried by default (retries.on): 504 when a
		// try stalls, 200 from b otherwise.
		if codes[504] == 0 || codes[200] == 0 || codes[504]+codes[200] != 4 {
			t.Errorf("statuses %v, want 504s and 200s", codes)
		}
	})
}

func TestGroupHashSticks(t *testing.T) {
	a, b, c := startGroupOrigin(t, "a"), startGroupOrigin(t, "b"), startGroupOrigin(t, "c")
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, b.URL, c.URL), Balance: "hash", HashKey: []string{"header:X-User"}}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	seen := map[string]map[string]bool{}
	for _, addr := range []string{ge.slow, ge.fast} {
		for u := range 20 {
			for range 3 {
				req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
				req.Host = "api.example.com"
				user := fmt.Sprint("user-", u)
				req.Header.Set("X-User", user)
				resp, err := http.DefaultTransport.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if seen[user] == nil {
					seen[user] = map[string]bool{}
				}
				seen[user][string(body)] = true
			}
		}
	}
	servers := map[string]bool{}
	for user, s := range seen {
		if len(s) != 1 {
			t.Errorf("%s went to %v, want one server on both paths", user, s)
		}
		for k := range s {
			servers[k] = true
		}
	}
	if len(servers) < 2 {
		t.Errorf("20 users all went to %v", servers)
	}
}

func TestGroupReloadKeepsHealth(t *testing.T) {
	a, b, c := startGroupOrigin(t, "a"), startGroupOrigin(t, "b"), startGroupOrigin(t, "c")
	a.mode.Store("503")
	dc := rules.DomainConfig{Name: "api", Hosts: []string{"api.example.com"}, UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, b.URL, c.URL)},
		Rules: []rules.RuleConfig{rule("all", 1000000, time.Minute)}}
	cfg := rules.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1", Domains: []rules.DomainConfig{dc}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	for range 12 {
		ge.send(t, ge.slow, "GET", "")
	}
	if a.got.Load() != 3 {
		t.Fatalf("a got %d, want 3 then ejected", a.got.Load())
	}
	// Reload with a weight changed and c removed: a stays ejected.
	cfg.Domains[0].Origins = []rules.OriginConfig{{URL: a.URL}, {URL: b.URL, Weight: 2}}
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ge.proxy.Reload(table, "2"); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		ge.send(t, ge.slow, "GET", "")
	}
	if a.got.Load() != 3 {
		t.Errorf("after the reload a got %d requests, want none more (its ejection kept)", a.got.Load())
	}
	body := metricsBody(t, ge.env)
	if strings.Contains(body, c.URL) {
		t.Error("the removed server's series are still exposed")
	}
}

func TestGroupAdminAndStatusPage(t *testing.T) {
	a, b := startGroupOrigin(t, "a"), startGroupOrigin(t, "b")
	b.mode.Store("503")
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, b.URL)}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	for range 10 {
		ge.send(t, ge.fast, "GET", "")
	}
	rec := httptest.NewRecorder()
	ge.proxy.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/origins", nil))
	var v originsView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || rec.Code != 200 {
		t.Fatalf("GET /v1/origins: %d %v\n%s", rec.Code, err, rec.Body)
	}
	if len(v.Domains) != 1 || len(v.Domains[0].Servers) != 2 {
		t.Fatalf("got %+v, want one domain of two servers", v)
	}
	sa, sb := v.Domains[0].Servers[0], v.Domains[0].Servers[1]
	tests := []struct {
		name      string
		got, want any
	}{
		{"server name", sa.Server, a.URL},
		{"a healthy", sa.Healthy, true},
		{"b ejected", sb.Healthy, false},
		{"b passive ejections", sb.Ejections["passive"], uint64(1)},
		{"b 5xx", sb.Requests["5xx"], uint64(3)},
		{"a 2xx", sa.Requests["2xx"], uint64(7)},
		{"b ejected until", sb.EjectedUntil != nil, true},
		{"balance", v.Domains[0].Balance, "round_robin"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	rec = httptest.NewRecorder()
	ge.proxy.StatusPage(StatusPageOptions{TokenRequired: func() bool { return false }, Ready: func() bool { return true }}).
		ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	for _, want := range []string{`<h2 id="h-origins">Origins</h2>`, "<td>" + b.URL + "</td>", `<span class="bad">out</span>`, "1 passive, 0 active"} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("status page lacks %s", want)
		}
	}
}

// TestGroupRetryHoldsOneSlot: a concurrency rule's slot is taken once
// for a request, not once per try: with one slot, a request retried after
// a connect error is not refused by its own slot.
func TestGroupRetryHoldsOneSlot(t *testing.T) {
	a := startGroupOrigin(t, "a")
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(deadURL(t), a.URL),
		Passive: &rules.PassiveConfig{Enabled: new(bool)}, Retries: &rules.RetriesConfig{Budget: "100%"}}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	// The domain's rule, replaced by a concurrency rule of one slot.
	cfg := rules.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1", Domains: []rules.DomainConfig{dc}}
	cfg.Domains[0].Name, cfg.Domains[0].Hosts = "api", []string{"api.example.com"}
	cfg.Domains[0].Rules = []rules.RuleConfig{{Name: "one", Algorithm: "concurrency", Limit: 1}}
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ge.proxy.Reload(table, "slots"); err != nil {
		t.Fatal(err)
	}
	ge.paths(t, func(t *testing.T, addr string) {
		for i := range 4 {
			if st, body, _ := ge.send(t, addr, "GET", ""); st != 200 || body != "a" {
				t.Errorf("request %d: got %d %q, want 200 from a", i, st, body)
			}
		}
	})
	if n := ge.proxy.state.Load().domains[0].group.RetryCounts()["sent"]; n < 2 {
		t.Errorf("retries sent %d, want some", n)
	}
}

// TestGroupActiveChecks: a server whose checks fail is taken out on both
// paths, and back when they pass; its checker stops with the proxy.
func TestGroupActiveChecks(t *testing.T) {
	a, b := startGroupOrigin(t, "a"), startGroupOrigin(t, "b")
	dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, b.URL),
		Health: &rules.HealthConfig{Path: "/healthz", Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond, UnhealthyAfter: 1, HealthyAfter: 1}}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	s := ge.proxy.state.Load().domains[0].group.Servers()[0]
	a.mode.Store("503")
	wait.For(t, 5*time.Second, "the checks to take a out", func() bool { return !s.Healthy(ge.clock.Now()) })
	a.mode.Store("ok")
	// Checks go on meanwhile, and may take a back during the loop.
	ge.paths(t, func(t *testing.T, addr string) {
		for range 10 {
			if st, body, _ := ge.send(t, addr, "GET", ""); st != 200 || body != "b" && !s.Healthy(ge.clock.Now()) {
				t.Errorf("got %d %q while a was out, want 200 from b", st, body)
			}
		}
	})
	wait.For(t, 5*time.Second, "the checks to take a back", func() bool { return s.Healthy(ge.clock.Now()) })
	if at, outcome := s.LastCheck(); at.IsZero() || !strings.HasPrefix(outcome, "passed") {
		t.Errorf("last check %v %q, want a pass", at, outcome)
	}
	if _, active := s.Ejections(); active != 1 {
		t.Errorf("active ejections %d, want 1", active)
	}
}
