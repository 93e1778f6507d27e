package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// holdOrigin is an origin that answers its name, and holds each request
// for /slow until release is closed (or the request ends): a slow
// request in flight, as an operator draining a server finds them.
type holdOrigin struct {
	*httptest.Server
	got, held atomic.Int64 // requests received; /slow ones held now
	release   chan struct{}
}

func startHoldOrigin(t *testing.T, name string) *holdOrigin {
	o := &holdOrigin{release: make(chan struct{})}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.got.Add(1)
		if r.URL.Path == "/slow" {
			o.held.Add(1)
			select {
			case <-o.release:
			case <-r.Context().Done():
			}
			o.held.Add(-1)
		}
		io.WriteString(w, name)
	}))
	t.Cleanup(func() {
		select {
		case <-o.release:
		default:
			close(o.release)
		}
		o.Close()
	})
	return o
}

// get sends GET path to the listener at addr and returns the status and
// body (status 0 and the error's text for a request that failed).
func (ge *groupEnv) get(addr, path string) (int, string) {
	req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
	req.Host = "api.example.com"
	resp, err := ge.client.RoundTrip(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "reading the body: " + err.Error()
	}
	return resp.StatusCode, string(b)
}

// admin sends method to path on p's admin API and returns the status and
// the body decoded into v (nil: not decoded), and the Allow field.
func admin(t *testing.T, p *Proxy, method, path string, v any) (int, http.Header) {
	t.Helper()
	rec := httptest.NewRecorder()
	p.AdminHandler().ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	if v != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
			t.Fatalf("%s %s: %d %v\n%s", method, path, rec.Code, err, rec.Body)
		}
	}
	return rec.Code, rec.Header()
}

func drainPath(verb, domain, server string) string {
	return "/v1/origins/" + domain + "/" + verb + "?server=" + url.QueryEscape(server)
}

// serverView returns server's entry of GET /v1/origins.
func serverView(t *testing.T, p *Proxy, server string) originServerView {
	t.Helper()
	var v originsView
	admin(t, p, "GET", "/v1/origins", &v)
	for _, d := range v.Domains {
		for _, s := range d.Servers {
			if s.Server == server {
				return s
			}
		}
	}
	t.Fatalf("GET /v1/origins has no server %s: %+v", server, v)
	return originServerView{}
}

// TestDrainWithRequestsInFlight: on each path, a server drained with two
// slow requests in flight gets no new request (the other server takes
// them all), its two finish with its answer, none cut, /v1/origins and
// the metrics say it is drained and when its requests are done; undrained
// it gets requests again.
func TestDrainWithRequestsInFlight(t *testing.T) {
	for _, path := range []string{"net/http", "fast"} {
		t.Run(path, func(t *testing.T) {
			a, b := startHoldOrigin(t, "a"), startHoldOrigin(t, "b")
			ge := newGroupEnv(t, rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, b.URL)}}, rules.TimeoutsConfig{})
			addr := ge.slow
			if path == "fast" {
				addr = ge.fast
			}
			type answer struct {
				status int
				body   string
			}
			slow := make(chan answer, 4)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					st, body := ge.get(addr, "/slow")
					slow <- answer{st, body}
				})
			}
			wait.For(t, 10*time.Second, "two slow requests held by each server", func() bool { return a.held.Load() == 2 && b.held.Load() == 2 })

			var dv drainView
			if st, _ := admin(t, ge.proxy, "POST", drainPath("drain", "api", a.URL), &dv); st != 200 {
				t.Fatalf("drain: %d %+v", st, dv)
			}
			if want := (drainView{Domain: "api", Server: a.URL, Drained: true, Changed: true, InFlight: 2}); dv != want {
				t.Errorf("drain answered %+v, want %+v", dv, want)
			}
			for range 10 {
				if st, body := ge.get(addr, "/"); st != 200 || body != "b" {
					t.Errorf("a new request while a is drained: %d %q, want 200 from b", st, body)
				}
			}
			if n := a.got.Load(); n != 2 {
				t.Errorf("the drained server got %d requests, want only its 2 in flight", n)
			}
			if s := serverView(t, ge.proxy, a.URL); !s.Drained || s.InFlight != 2 || !s.Healthy {
				t.Errorf("a in /v1/origins: drained %v, in flight %d, healthy %v; want drained, 2, healthy", s.Drained, s.InFlight, s.Healthy)
			}
			if body := metricsBody(t, ge.env); !strings.Contains(body, fmt.Sprintf(`edge_origin_drained{domain="api",route="",server=%q} 1`, a.URL)) ||
				!strings.Contains(body, fmt.Sprintf(`edge_origin_drained{domain="api",route="",server=%q} 0`, b.URL)) {
				t.Errorf("metrics lack edge_origin_drained 1 for a and 0 for b:\n%s", body)
			}

			close(a.release)
			close(b.release)
			wg.Wait()
			close(slow)
			bodies := map[string]int{}
			for r := range slow {
				if r.status != 200 {
					t.Errorf("a slow request in flight: %d %q, want 200", r.status, r.body)
				}
				bodies[r.body]++
			}
			if bodies["a"] != 2 || bodies["b"] != 2 {
				t.Errorf("the slow requests were answered by %v, want 2 each: the drained server's finished", bodies)
			}
			if s := serverView(t, ge.proxy, a.URL); !s.Drained || s.InFlight != 0 {
				t.Errorf("a once its requests ended: drained %v, in flight %d; want drained, 0", s.Drained, s.InFlight)
			}

			if st, _ := admin(t, ge.proxy, "POST", drainPath("undrain", "api", a.URL), &dv); st != 200 || dv.Drained || !dv.Changed {
				t.Fatalf("undrain: %d %+v", st, dv)
			}
			seen := map[string]int{}
			for range 10 {
				_, body := ge.get(addr, "/")
				seen[body]++
			}
			if seen["a"] != 5 || seen["b"] != 5 {
				t.Errorf("after the undrain: %v, want a and b 5 each", seen)
			}
			if path == "fast" && ge.fastAnswered.Load() == 0 {
				t.Error("the fast path answered none of the requests")
			}
		})
	}
}

// TestDrainEveryServer: with every server drained a request is answered
// as when_down says, or else 503 (not 502: no server failed), counted as
// origin_down, on both paths; a group of one server too.
func TestDrainEveryServer(t *testing.T) {
	tests := []struct {
		name       string
		servers    int
		whenDown   *rules.WhenDownConfig
		status     int
		retryAfter string
		body       string
	}{
		{"default", 2, nil, 503, "", "service unavailable: no origin server is in rotation\n"},
		{"when_down", 2, &rules.WhenDownConfig{Status: 502, RetryAfter: 10 * time.Second}, 502, "10", "502 Bad Gateway: no origin server is in rotation\n"},
		{"one server", 1, nil, 503, "", "service unavailable: no origin server is in rotation\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var urls []string
			var servers []*groupOrigin
			for i := range tt.servers {
				o := startGroupOrigin(t, fmt.Sprint("o", i))
				servers = append(servers, o)
				urls = append(urls, o.URL)
			}
			ge := newGroupEnv(t, rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(urls...), WhenDown: tt.whenDown}}, rules.TimeoutsConfig{})
			for _, u := range urls {
				if st, _ := admin(t, ge.proxy, "POST", drainPath("drain", "api", u), nil); st != 200 {
					t.Fatalf("drain %s: %d", u, st)
				}
			}
			ge.paths(t, func(t *testing.T, addr string) {
				for range 3 {
					st, body, h := ge.send(t, addr, "GET", "")
					if st != tt.status || h.Get("Retry-After") != tt.retryAfter || body != tt.body {
						t.Errorf("got %d Retry-After %q %q, want %d %q %q", st, h.Get("Retry-After"), body, tt.status, tt.retryAfter, tt.body)
					}
				}
			})
			for _, o := range servers {
				if n := o.got.Load(); n != 0 {
					t.Errorf("%s got %d requests, want none: every server is drained", o.name, n)
				}
			}
			if n := testutil.ToFloat64(ge.proxy.metrics.requests.WithLabelValues("api", outcomeOriginDown)); n != 6 {
				t.Errorf("origin_down %v, want 6", n)
			}
			// One back: it takes every request.
			admin(t, ge.proxy, "POST", drainPath("undrain", "api", urls[0]), nil)
			if st, body, _ := ge.send(t, ge.slow, "GET", ""); st != 200 || body != "o0" {
				t.Errorf("undrained: %d %q, want 200 from o0", st, body)
			}
		})
	}
}

// TestDrainAPIErrors: the drain endpoints' answers to what names no
// server, and to another method.
func TestDrainAPIErrors(t *testing.T) {
	a, b := startGroupOrigin(t, "a"), startGroupOrigin(t, "b")
	cfg := rules.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1", Domains: []rules.DomainConfig{
		{Name: "api", Hosts: []string{"api.example.com"}, UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, b.URL)}},
		{Name: "www", Hosts: []string{"www.example.com"}, Respond: &rules.ResponseConfig{Body: "hi"}},
	}}
	e := newEnv(t, cfg)
	t.Cleanup(func() { e.proxy.Close() })
	servers := a.URL + ", " + b.URL
	tests := []struct {
		name, method, path string
		status             int
		err                string // the JSON error
		allow              string
	}{
		{"unknown domain", "POST", drainPath("drain", "nope", a.URL), 404, `no domain "nope"`, ""},
		{"unknown server", "POST", drainPath("drain", "api", "http://10.9.9.9:80"), 404,
			`domain "api" has no server "http://10.9.9.9:80"; its servers: ` + servers, ""},
		{"undrain unknown server", "POST", drainPath("undrain", "api", a.URL+"/"), 404,
			`domain "api" has no server "` + a.URL + `/"; its servers: ` + servers, ""},
		{"no server", "POST", "/v1/origins/api/drain", 400,
			`server is required: ?server=URL, one of domain "api"'s servers: ` + servers, ""},
		{"domain without origins", "POST", drainPath("drain", "www", a.URL), 404, `domain "www" has no origin servers`, ""},
		{"GET", "GET", drainPath("drain", "api", a.URL), 405, "method not allowed: use POST", "POST"},
		{"DELETE undrain", "DELETE", drainPath("undrain", "api", a.URL), 405, "method not allowed: use POST", "POST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v apiError
			st, h := admin(t, e.proxy, tt.method, tt.path, &v)
			if st != tt.status || v.Error != tt.err || h.Get("Allow") != tt.allow {
				t.Errorf("%s %s: %d %q Allow %q, want %d %q Allow %q", tt.method, tt.path, st, v.Error, h.Get("Allow"), tt.status, tt.err, tt.allow)
			}
		})
	}
	if s := serverView(t, e.proxy, a.URL); s.Drained {
		t.Error("a refused request drained a")
	}
	// Twice: the second changes nothing, and says so.
	var dv drainView
	admin(t, e.proxy, "POST", drainPath("drain", "api", a.URL), &dv)
	if admin(t, e.proxy, "POST", drainPath("drain", "api", a.URL), &dv); !dv.Drained || dv.Changed {
		t.Errorf("a second drain: %+v, want drained, unchanged", dv)
	}
}

// TestDrainSurvivesReload: a reload that keeps the server keeps its
// drain (a weight changed too); one that removes it forgets it, so that
// the server added back later is in rotation; other domains' drains are
// their own.
func TestDrainSurvivesReload(t *testing.T) {
	a, b, c := startGroupOrigin(t, "a"), startGroupOrigin(t, "b"), startGroupOrigin(t, "c")
	domains := func(api []rules.OriginConfig) []rules.DomainConfig {
		return []rules.DomainConfig{
			{Name: "api", Hosts: []string{"api.example.com"}, UpstreamConfig: rules.UpstreamConfig{Origins: api}},
			{Name: "other", Hosts: []string{"other.example.com"}, UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, c.URL)}},
		}
	}
	cfg := rules.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1", Domains: domains(origins(a.URL, b.URL, c.URL))}
	e := newEnv(t, cfg)
	t.Cleanup(func() { e.proxy.Close() })
	reload := func(api []rules.OriginConfig) {
		t.Helper()
		cfg.Domains = domains(api)
		table, err := rules.Compile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.proxy.Reload(table, "next"); err != nil {
			t.Fatal(err)
		}
	}
	// got sends n requests to host and counts them by answering server.
	got := func(host string, n int) map[string]int {
		out := map[string]int{}
		for range n {
			_, body := e.get(host, "/")
			out[body]++
		}
		return out
	}
	admin(t, e.proxy, "POST", drainPath("drain", "api", a.URL), nil)
	if g := got("api.example.com", 10); g["a"] != 0 {
		t.Fatalf("a drained got %v", g)
	}

	steps := []struct {
		name    string
		api     []rules.OriginConfig
		drained bool // a in api
	}{
		{"same servers", origins(a.URL, b.URL, c.URL), true},
		{"a weight changed, c removed", []rules.OriginConfig{{URL: a.URL, Weight: 3}, {URL: b.URL}}, true},
		{"a removed", origins(b.URL), false},
		{"a back", origins(a.URL, b.URL), false},
	}
	for _, s := range steps {
		reload(s.api)
		g := got("api.example.com", 20)
		if s.drained && g["a"] != 0 || !s.drained && len(s.api) > 1 && g["a"] == 0 {
			t.Errorf("%s: the requests went to %v, want a drained %v", s.name, g, s.drained)
		}
		if g := got("other.example.com", 10); g["a"] != 5 {
			t.Errorf("%s: the other domain's requests went to %v, want a in rotation there (5 of 10)", s.name, g)
		}
		if s.drained {
			if v := serverView(t, e.proxy, a.URL); !v.Drained {
				t.Errorf("%s: /v1/origins shows a not drained", s.name)
			}
		}
	}
}

// TestStatusPageDrainRequest: the status page renders a Drain button per
// server, with the domain and server its script sends; the request the
// script makes of them (read from it) drains the server, and the page
// then shows it drained with an Undrain button. A browser clicks the real
// buttons in cmd/edge's TestStatusPageDrainButton.
func TestStatusPageDrainRequest(t *testing.T) {
	a, b := startGroupOrigin(t, "a"), startGroupOrigin(t, "b")
	ge := newGroupEnv(t, rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, b.URL)}}, rules.TimeoutsConfig{})
	page := func() string {
		rec := httptest.NewRecorder()
		ge.proxy.StatusPage(StatusPageOptions{TokenRequired: func() bool { return false }, Ready: func() bool { return true }}).
			ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		return rec.Body.String()
	}
	button := func(action, label string) string {
		return fmt.Sprintf(`<button type="button" class="drain" data-domain="api" data-server="%s" data-action="%s" aria-label="%s %s of api">%s</button>`,
			a.URL, action, label, a.URL, label)
	}
	if p := page(); !strings.Contains(p, button("drain", "Drain")) || !strings.Contains(p, "<td>in rotation</td>") {
		t.Fatalf("the page lacks a's Drain button %s and its rotation", button("drain", "Drain"))
	}
	rec := httptest.NewRecorder()
	ge.proxy.StatusPage(StatusPageOptions{TokenRequired: func() bool { return false }, Ready: func() bool { return true }}).
		ServeHTTP(rec, httptest.NewRequest("GET", "/status.js", nil))
	js := rec.Body.String()
	for _, want := range []string{
		`const b = ev.target.closest('button.drain');`,
		`const { domain, server, action } = b.dataset;`,
		`if (!window.confirm(question)) return;`,
		`await api('POST', drainPath(domain, action, server))`,
		`return '/v1/origins/' + encodeURIComponent(domain) + '/' + action + '?server=' + encodeURIComponent(server);`,
	} {
		if !strings.Contains(js, want) {
			t.Errorf("the script lacks %s", want)
		}
	}
	// encodeURIComponent of a's URL is url.QueryEscape's (no space in it).
	if st, _ := admin(t, ge.proxy, "POST", "/v1/origins/"+url.PathEscape("api")+"/drain?server="+url.QueryEscape(a.URL), nil); st != 200 {
		t.Fatalf("the script's drain: %d", st)
	}
	if p := page(); !strings.Contains(p, button("undrain", "Undrain")) || !strings.Contains(p, `<td><span class="bad">drained</span></td>`) {
		t.Errorf("once drained the page lacks a's Undrain button %s and its drained rotation", button("undrain", "Undrain"))
	}
}

// TestDrainInEveryRoute: a server in a route's group and in the domain's
// own is drained in both by one drain: neither the route's requests nor
// the rest reach it, on either path; undrained, both do again.
func TestDrainInEveryRoute(t *testing.T) {
	a, b, c := startGroupOrigin(t, "a"), startGroupOrigin(t, "b"), startGroupOrigin(t, "c")
	dc := rules.DomainConfig{
		UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, c.URL)},
		Routes: []rules.RouteConfig{{Name: "api", Match: &rules.RouteMatchConfig{PathPrefix: "/api/"},
			UpstreamConfig: rules.UpstreamConfig{Origins: origins(a.URL, b.URL)}}},
	}
	ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
	var v drainView
	if code, _ := admin(t, ge.proxy, "POST", drainPath("drain", "api", a.URL), &v); code != 200 || !v.Drained || !v.Changed {
		t.Fatalf("drain: %d %+v", code, v)
	}
	ge.paths(t, func(t *testing.T, addr string) {
		for range 6 {
			if st, body := ge.get(addr, "/api/x"); st != 200 || body != "b" {
				t.Errorf("/api/x: %d %q, want 200 from b (a drained in the route)", st, body)
			}
			if st, body := ge.get(addr, "/x"); st != 200 || body != "c" {
				t.Errorf("/x: %d %q, want 200 from c (a drained in the domain's own group)", st, body)
			}
		}
	})
	if n := a.got.Load(); n != 0 {
		t.Errorf("the drained server got %d requests, want 0", n)
	}
	for _, route := range []string{"", "api"} {
		if body := metricsBody(t, ge.env); !strings.Contains(body, fmt.Sprintf(`edge_origin_drained{domain="api",route=%q,server=%q} 1`, route, a.URL)) {
			t.Errorf("metrics lack edge_origin_drained 1 for a in route %q", route)
		}
	}
	admin(t, ge.proxy, "POST", drainPath("undrain", "api", a.URL), nil)
	seen := false
	for range 4 {
		if _, body := ge.get(ge.slow, "/api/x"); body == "a" {
			seen = true
		}
	}
	if !seen {
		t.Error("undrained, a got none of 4 requests of the route (round robin over a and b)")
	}
}
