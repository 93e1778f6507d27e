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
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// routeEnv is a groupEnv whose domain has routes, each to an origin of
// its own that answers its name: writes (POST and PUT under /api/), api
// (/api/), static (/static/), and the domain's own origins (rest).
type routeEnv struct {
	*groupEnv
	writes, api, static, rest *groupOrigin
}

func routeConfig(writes, api, static, rest string) rules.DomainConfig {
	return rules.DomainConfig{
		UpstreamConfig: rules.UpstreamConfig{Origins: origins(rest)},
		Routes: []rules.RouteConfig{
			{Name: "writes", Match: &rules.RouteMatchConfig{PathPrefix: "/api/", Methods: []string{"POST", "PUT"}},
				UpstreamConfig: rules.UpstreamConfig{Origins: origins(writes)}},
			{Name: "api", Match: &rules.RouteMatchConfig{PathPrefix: "/api/"}, UpstreamConfig: rules.UpstreamConfig{Origins: origins(api)}},
			{Name: "static", Match: &rules.RouteMatchConfig{PathPrefix: "/static/"}, UpstreamConfig: rules.UpstreamConfig{Origins: origins(static)}},
		},
	}
}

func newRouteEnv(t *testing.T) *routeEnv {
	re := &routeEnv{writes: startGroupOrigin(t, "writes"), api: startGroupOrigin(t, "api"),
		static: startGroupOrigin(t, "static"), rest: startGroupOrigin(t, "rest")}
	re.groupEnv = newGroupEnv(t, routeConfig(re.writes.URL, re.api.URL, re.static.URL, re.rest.URL), rules.TimeoutsConfig{})
	return re
}

// raw sends method and target, byte for byte as written, on a new
// connection to addr, and returns the status and body.
func raw(t *testing.T, addr, method, target string) (int, string) {
	t.Helper()
	fields := "Host: api.example.com\r\nContent-Length: 0\r\n"
	if method == http.MethodHead {
		fields += "Connection: close\r\n" // the answer's length is not its body's
	}
	got := rawResponse(t, addr, method+" "+target+" HTTP/1.1\r\n"+fields+"\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRoutesBothPaths: each path reaches the servers of the first route
// that matches it, or the domain's own, on the fast path as on
// net/http; a hostile spelling of a path reaches the servers of the path
// it cleans to, as rules see it, or is refused, never another route's.
func TestRoutesBothPaths(t *testing.T) {
	re := newRouteEnv(t)
	const dotSegment = "bad request: dot segment in path\n"
	cases := []struct {
		name, method, target string
		status               int
		want                 string // the origin that answered
	}{
		{"prefix", "GET", "/api/users", 200, "api"},
		{"first match wins: methods", "POST", "/api/users", 200, "writes"},
		{"first match wins: PUT", "PUT", "/api/users/1", 200, "writes"},
		{"other methods go on to the next route", "DELETE", "/api/users/1", 200, "api"},
		{"a lower-case method is refused", "post", "/api/users", 400, "bad request: method must be upper-case\n"},
		{"another route", "GET", "/static/app.css", 200, "static"},
		{"HEAD", "HEAD", "/static/app.css", 200, ""},
		{"none matches: the domain's origins", "GET", "/", 200, "rest"},
		{"a prefix is a byte prefix", "GET", "/staticfiles", 200, "rest"},
		{"the prefix's trailing slash", "GET", "/static", 200, "rest"},
		{"paths are case-sensitive", "GET", "/API/users", 200, "rest"},
		{"query", "GET", "/static/x?/api/", 200, "static"},
		// Hostile spellings: the path rules match decides.
		{"double slash", "GET", "//static/x", 200, "static"},
		{"double slash inside", "POST", "/api//users", 200, "writes"},
		{"escaped letter", "GET", "/%73tatic/x", 200, "static"},
		{"escaped slash is refused", "GET", "/api%2Fusers", 400, "bad request: encoded '/' or '\\' in path\n"},
		{"params", "GET", "/static;jsessionid=1/x", 200, "static"},
		{"params in the prefix's segment", "GET", "/api;x/../static/x", 400, dotSegment},
		{"dot segments are refused", "GET", "/static/../api/users", 400, dotSegment},
		{"escaped dot segments are refused", "GET", "/static/%2e%2e/api/users", 400, dotSegment},
		{"escaped dot segment to leave a route", "GET", "/api/%2E%2e/static/x", 400, dotSegment},
		{"dot segment at the end", "GET", "/api/..", 400, dotSegment},
		{"dot segment with params", "GET", "/api/..;x/static/x", 400, dotSegment},
	}
	re.paths(t, func(t *testing.T, addr string) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				status, body := raw(t, addr, tc.method, tc.target)
				if status != tc.status || body != tc.want {
					t.Errorf("%s %s: got %d %q, want %d %q", tc.method, tc.target, status, body, tc.status, tc.want)
				}
			})
		}
	})
	if re.fastAnswered.Load() == 0 {
		t.Error("the fast path answered none of the requests")
	}
	forwarded := 0
	for _, tc := range cases {
		if tc.status == 200 {
			forwarded += 2
		}
	}
	if n := re.api.got.Load() + re.writes.got.Load() + re.static.got.Load() + re.rest.got.Load(); n != int64(forwarded) {
		t.Errorf("the origins got %d requests, want %d", n, forwarded)
	}
}

// TestRoutesFastPath: a route's requests are forwarded by the fast path
// when its group may be, and by net/http when it may not (its servers
// are h2c).
func TestRoutesFastPath(t *testing.T) {
	re := newRouteEnv(t)
	before := re.fastAnswered.Load()
	for _, target := range []string{"/api/a", "/static/b", "/c"} {
		if status, _ := raw(t, re.fast, "GET", target); status != 200 {
			t.Fatalf("GET %s: %d", target, status)
		}
	}
	if n := re.fastAnswered.Load() - before; n != 3 {
		t.Errorf("the fast path forwarded %d of 3 requests", n)
	}
	st := re.proxy.state.Load()
	for _, g := range st.domains[0].groups {
		if g.fast == nil {
			t.Errorf("group %q: no fast forward", g.name)
		}
	}
}

// TestRoutesCatchAll: a domain without origins of its own, whose last
// route takes every request.
func TestRoutesCatchAll(t *testing.T) {
	api, rest := startGroupOrigin(t, "api"), startGroupOrigin(t, "rest")
	dc := rules.DomainConfig{Routes: []rules.RouteConfig{
		{Name: "api", Match: &rules.RouteMatchConfig{PathPrefix: "/api/"}, UpstreamConfig: rules.UpstreamConfig{Origins: origins(api.URL)}},
		{Name: "rest", UpstreamConfig: rules.UpstreamConfig{Origins: origins(rest.URL)}},
	}}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	ge.paths(t, func(t *testing.T, addr string) {
		for target, want := range map[string]string{"/api/x": "api", "/x": "rest", "/": "rest"} {
			if _, body := raw(t, addr, "GET", target); body != want {
				t.Errorf("GET %s: got %q, want %q", target, body, want)
			}
		}
	})
	if n := len(ge.proxy.state.Load().domains[0].groups); n != 2 {
		t.Errorf("%d groups, want the two routes'", n)
	}
}

// TestRoutesGroupsOfTheirOwn: a route's group is balanced, retried and
// answers when_down as its own keys say, and the domain's keys are the
// defaults of those it does not set.
func TestRoutesGroupsOfTheirOwn(t *testing.T) {
	a, b, rest := startGroupOrigin(t, "a"), startGroupOrigin(t, "b"), startGroupOrigin(t, "rest")
	dead := deadURL(t)
	zero := 0
	dc := rules.DomainConfig{
		UpstreamConfig: rules.UpstreamConfig{Origins: origins(rest.URL), Retries: &rules.RetriesConfig{Attempts: &zero}},
		Routes: []rules.RouteConfig{
			{Name: "pair", Match: &rules.RouteMatchConfig{PathPrefix: "/pair/"},
				UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, b.URL, dead), Passive: &rules.PassiveConfig{Enabled: new(bool)},
					Retries: &rules.RetriesConfig{Budget: "100%"}}}, // retried: the domain's attempts 0 is not the route's
			{Name: "down", Match: &rules.RouteMatchConfig{PathPrefix: "/down/"},
				UpstreamConfig: rules.UpstreamConfig{Origins: origins(dead), WhenDown: &rules.WhenDownConfig{Status: 503, RetryAfter: 7 * time.Second}}},
		},
	}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	ge.paths(t, func(t *testing.T, addr string) {
		a.got.Store(0)
		b.got.Store(0)
		for range 30 {
			if status, _ := raw(t, addr, "GET", "/pair/x"); status != 200 {
				t.Fatalf("GET /pair/x: %d, want 200 (a retry after the dead server)", status)
			}
		}
		if a.got.Load()+b.got.Load() != 30 || a.got.Load() < 10 || b.got.Load() < 10 {
			t.Errorf("a got %d, b %d: want the 30 spread over both", a.got.Load(), b.got.Load())
		}
		req := "GET /down/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "7" {
			t.Errorf("GET /down/x: %d Retry-After %q, want the route's when_down: 503, 7", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if status, body := raw(t, addr, "GET", "/rest"); status != 200 || body != "rest" {
			t.Errorf("GET /rest: %d %q", status, body)
		}
	})
}

// TestRoutesMetricsAndAdmin: the origin metrics name each server's route,
// GET /v1/origins lists a group per route and the domain's own, and the
// status page shows the routes.
func TestRoutesMetricsAndAdmin(t *testing.T) {
	re := newRouteEnv(t)
	for _, target := range []string{"/api/a", "/api/b", "/static/c", "/d"} {
		raw(t, re.fast, "GET", target)
	}
	raw(t, re.slow, "POST", "/api/e")
	body := metricsBody(t, re.env)
	for _, want := range []string{
		fmt.Sprintf(`edge_origin_requests_total{code_class="2xx",domain="api",route="api",server=%q} 2`, re.api.URL),
		fmt.Sprintf(`edge_origin_requests_total{code_class="2xx",domain="api",route="writes",server=%q} 1`, re.writes.URL),
		fmt.Sprintf(`edge_origin_requests_total{code_class="2xx",domain="api",route="static",server=%q} 1`, re.static.URL),
		fmt.Sprintf(`edge_origin_requests_total{code_class="2xx",domain="api",route="",server=%q} 1`, re.rest.URL),
		fmt.Sprintf(`edge_origin_healthy{domain="api",route="static",server=%q} 1`, re.static.URL),
		fmt.Sprintf(`edge_origin_in_flight{domain="api",route="api",server=%q} 0`, re.api.URL),
		fmt.Sprintf(`edge_origin_response_seconds_count{domain="api",route="api",server=%q} 2`, re.api.URL),
		`edge_origin_retries_total{domain="api",outcome="sent",route="static"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	rec := httptest.NewRecorder()
	re.proxy.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/origins", nil))
	var v originsView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || rec.Code != 200 {
		t.Fatalf("GET /v1/origins: %d %v\n%s", rec.Code, err, rec.Body)
	}
	var got []string
	for _, g := range v.Domains {
		m := "-"
		if g.Match != nil {
			m = g.Match.PathPrefix + fmt.Sprint(g.Match.Methods)
		}
		got = append(got, fmt.Sprintf("%s/%s %s %s %d", g.Domain, g.Route, m, g.Servers[0].Server, g.Servers[0].Requests["2xx"]))
	}
	want := []string{
		"api/writes /api/[POST PUT] " + re.writes.URL + " 1",
		"api/api /api/[] " + re.api.URL + " 2",
		"api/static /static/[] " + re.static.URL + " 1",
		"api/ - " + re.rest.URL + " 1",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("GET /v1/origins groups:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var loose struct {
		Domains []map[string]any `json:"domains"`
	}
	json.Unmarshal(rec.Body.Bytes(), &loose)
	if m, _ := json.Marshal(loose.Domains[2]["match"]); string(m) != `{"methods":[],"path_prefix":"/static/"}` {
		t.Errorf("GET /v1/origins: the static route's match is %s", m)
	}
	if _, ok := loose.Domains[3]["match"]; ok {
		t.Errorf("GET /v1/origins: the domain's own group has a match")
	}

	rec = httptest.NewRecorder()
	re.proxy.StatusPage(StatusPageOptions{TokenRequired: func() bool { return false }, Ready: func() bool { return true }}).
		ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	for _, want := range []string{`<h2 id="h-origins">Origins</h2>`, "<td>" + re.static.URL + "</td>", "<td>static</td>", "<code>/static/</code>"} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("status page lacks %s", want)
		}
	}
}

// TestRoutesReload: a reload changes the routes, and a server that stays
// in a route of the same name keeps its state (here, a passive
// ejection), while the series of a route removed leave /metrics.
func TestRoutesReload(t *testing.T) {
	re := newRouteEnv(t)
	a, b := startGroupOrigin(t, "a"), startGroupOrigin(t, "b")
	a.mode.Store("503")
	dc := routeConfig(re.writes.URL, re.api.URL, re.static.URL, re.rest.URL)
	dc.Routes[1].Origins = origins(a.URL, b.URL, re.api.URL) // api: a fails and is ejected
	cfg := rules.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1", Domains: []rules.DomainConfig{dc}}
	dc.Name, dc.Hosts, dc.Rules = "api", []string{"api.example.com"}, []rules.RuleConfig{rule("all", 1000000, time.Minute)}
	cfg.Domains[0] = dc
	reload := func(cfg rules.Config) {
		t.Helper()
		table, err := rules.Compile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := re.proxy.Reload(table, "x"); err != nil {
			t.Fatal(err)
		}
	}
	reload(cfg)
	for range 12 {
		raw(t, re.slow, "GET", "/api/x")
	}
	if a.got.Load() != 3 {
		t.Fatalf("a got %d, want 3 then ejected", a.got.Load())
	}
	bBefore := b.got.Load()
	// static goes; api loses a server and moves to /v2/; a stays ejected.
	dc.Routes = []rules.RouteConfig{dc.Routes[0], dc.Routes[1]}
	dc.Routes[1].Match = &rules.RouteMatchConfig{PathPrefix: "/v2/"}
	dc.Routes[1].Origins = origins(a.URL, b.URL)
	cfg.Domains[0] = dc
	reload(cfg)
	for range 10 {
		if status, _ := raw(t, re.slow, "GET", "/v2/x"); status != 200 {
			t.Fatalf("GET /v2/x: %d", status)
		}
	}
	if a.got.Load() != 3 || b.got.Load() != bBefore+10 {
		t.Errorf("after the reload a got %d, b %d: want a's ejection kept (3, %d)", a.got.Load(), b.got.Load(), bBefore+10)
	}
	if _, body := raw(t, re.fast, "GET", "/static/x"); body != "rest" {
		t.Errorf("GET /static/x after the reload: %q, want the domain's own (rest)", body)
	}
	if _, body := raw(t, re.fast, "GET", "/api/x"); body != "rest" {
		t.Errorf("GET /api/x after the reload: %q, want the domain's own (rest)", body)
	}
	body := metricsBody(t, re.env)
	if strings.Contains(body, re.static.URL) || strings.Contains(body, `route="static"`) {
		t.Error("the removed route's series are still exposed")
	}
	if want := fmt.Sprintf(`edge_origin_response_seconds_count{domain="api",route="api",server=%q} %d`, b.URL, bBefore+10); !strings.Contains(body, want) {
		t.Errorf("metrics lack %s (a server that stays keeps its series across a reload)", want)
	}
}
