package rules

import (
	"testing"
	"time"
)

// routed returns a config whose domain "site" has routes.
func routed(origin string, routes ...RouteConfig) Config {
	return Config{Domains: []DomainConfig{{Name: "site", Hosts: []string{"site.example.com"}, Origin: origin, Routes: routes}}}
}

func route(name, prefix string, methods []string, servers ...string) RouteConfig {
	rc := RouteConfig{Name: name}
	if prefix != "" || methods != nil {
		rc.Match = &RouteMatchConfig{PathPrefix: prefix, Methods: methods}
	}
	for _, s := range servers {
		rc.Origins = append(rc.Origins, OriginConfig{URL: s})
	}
	return rc
}

func TestRouteChoice(t *testing.T) {
	tab, err := Compile(routed("http://rest.internal",
		route("api-writes", "/api/", []string{"post", "PUT"}, "http://writer.internal"),
		route("api", "/api/", nil, "http://api1.internal", "http://api2.internal"),
		route("static", "/static/", nil, "http://static.internal"),
	))
	if err != nil {
		t.Fatal(err)
	}
	d := tab.Domains[0]
	for _, tc := range []struct {
		name, method, path, want string // want "": the domain's own origins
	}{
		{"first match wins", "POST", "/api/users", "api-writes"},
		{"methods are upper-cased in the config", "PUT", "/api/x", "api-writes"},
		{"a request's method is compared exactly", "post", "/api/users", "api"},
		{"other methods fall to the next route", "GET", "/api/users", "api"},
		{"prefix", "GET", "/static/a.css", "static"},
		{"prefix is a byte prefix", "GET", "/staticx", ""},
		{"prefix is case-sensitive", "GET", "/API/users", ""},
		{"none matches: the domain's origins", "GET", "/", ""},
		{"cleaned path", "GET", CleanPath("//api//x"), "api"},
		{"cleaned dot segments", "GET", CleanPath("/static/../api/x"), "api"},
		{"cleaned params", "GET", CleanPath("/api;x=1/y"), "api"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if r := d.Route(tc.method, tc.path); r != nil {
				got = r.Name
			}
			if got != tc.want {
				t.Errorf("Route(%q, %q) = %q, want %q", tc.method, tc.path, got, tc.want)
			}
		})
	}
	if d.Upstream == nil || d.Upstream.Servers[0].Name != "http://rest.internal" {
		t.Errorf("the domain's own group: %+v", d.Upstream)
	}
	if n := len(d.Routes[1].Upstream.Servers); n != 2 {
		t.Errorf("route api has %d servers, want 2", n)
	}
}

// TestRouteInherits: a route's keys it does not set are the domain's,
// each whole.
func TestRouteInherits(t *testing.T) {
	one := 3
	cfg := routed("http://rest.internal",
		route("api", "/api/", nil, "http://a.internal", "http://b.internal"),
		route("static", "/static/", nil, "http://s.internal"))
	cfg.Domains[0].Balance = "least_requests"
	cfg.Domains[0].Health = &HealthConfig{Path: "/healthz"}
	cfg.Domains[0].Retries = &RetriesConfig{Attempts: &one}
	cfg.Domains[0].Routes[1].Balance = "random_two"
	cfg.Domains[0].Routes[1].Health = &HealthConfig{Path: "/ok", Interval: time.Second}
	tab, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	api, static := tab.Domains[0].Routes[0].Upstream, tab.Domains[0].Routes[1].Upstream
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"api balance", api.Balance, BalanceLeastRequests},
		{"api health", api.Health.Path, "/healthz"},
		{"api retries", api.Retries.Attempts, 3},
		{"api passive on for two servers", api.Passive != nil, true},
		{"static balance", static.Balance, BalanceRandomTwo},
		{"static health", static.Health.Path, "/ok"},
		{"static health host", static.Health.Host, "site.example.com"},
		{"static passive off for one server", static.Passive == nil, true},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestRouteCatchAll: a domain whose routes take every request needs no
// origins of its own, and may not have them.
func TestRouteCatchAll(t *testing.T) {
	cfg := routed("", route("api", "/api/", nil, "http://a.internal"), route("rest", "", nil, "http://r.internal"))
	tab, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := tab.Domains[0]
	if d.Upstream != nil || d.Origin != nil {
		t.Errorf("the domain's own group: %+v, want none", d.Upstream)
	}
	if r := d.Route("GET", "/other"); r == nil || r.Name != "rest" {
		t.Errorf("Route(/other) = %v, want rest", r)
	}
	// The top level's origins are left to the domains that use them.
	cfg.Origin = "http://top.internal"
	if tab, err = Compile(cfg); err != nil {
		t.Fatal(err)
	}
	if tab.Domains[0].Upstream != nil {
		t.Errorf("the top level's origins taken by a domain whose routes take every request")
	}
}

func TestRouteErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"no route matches and no origins", routed("", route("api", "/api/", nil, "http://a.internal")),
			[]string{`domains[0] (site).routes: a request no route matches goes to the domain's origins, and it has none: set origin or origins here or at the top level, or end routes with a route that matches every request (one without match)`}},
		{"a catch-all with methods is not one", routed("", route("gets", "/", []string{"GET"}, "http://a.internal")),
			[]string{`domains[0] (site).routes: a request no route matches goes to the domain's origins, and it has none: set origin or origins here or at the top level, or end routes with a route that matches every request (one without match)`}},
		{"own origins never used", routed("http://rest.internal", route("all", "/", nil, "http://a.internal")),
			[]string{`domains[0] (site).origin: is never used: routes[0] (all) matches every request (remove it, or give that route a match)`}},
		{"name", routed("http://o.internal", route("", "/a/", nil, "http://a.internal"), route("a b", "/b/", nil, "http://b.internal")),
			[]string{`domains[0] (site).routes[0].name: must be set: it names the route in metrics and the admin API`,
				`domains[0] (site).routes[1].name: must contain only [A-Za-z0-9_.-], got "a b"`}},
		{"duplicate name", routed("http://o.internal", route("a", "/a/", nil, "http://a.internal"), route("a", "/b/", nil, "http://b.internal")),
			[]string{`domains[0] (site).routes[1].name: "a" is used by routes[0]`}},
		{"path_prefix", routed("http://o.internal", route("a", "api/", nil, "http://a.internal"), route("b", "//b/", nil, "http://b.internal"),
			route("c", "/c%2e/", nil, "http://c.internal"), route("d", "/d/../e", nil, "http://d.internal")),
			[]string{`domains[0] (site).routes[0].match.path_prefix: must start with "/", got "api/"`,
				`domains[0] (site).routes[1].match.path_prefix: must not contain "//" (paths are matched with slashes merged), got "//b/"`,
				`domains[0] (site).routes[2].match.path_prefix: must be written decoded, without %-escapes (paths are matched decoded), got "/c%2e/"`,
				`domains[0] (site).routes[3].match.path_prefix: must not contain dot segments (requests with them are refused), got "/d/../e"`}},
		{"methods", routed("http://o.internal", route("a", "/a/", []string{"GET", "get", "B D"}, "http://a.internal")),
			[]string{`domains[0] (site).routes[0].match.methods[1]: "get" duplicates match.methods[0]`,
				`domains[0] (site).routes[0].match.methods[2]: must be an HTTP method (a token), got "B D"`}},
		{"shadowed", routed("http://o.internal", route("api", "/api/", nil, "http://a.internal"), route("v1", "/api/v1/", []string{"GET"}, "http://b.internal")),
			[]string{`domains[0] (site).routes[1].match: is never chosen: routes[0] (api) before it matches every request it matches (first match wins)`}},
		{"shadowed by methods", routed("http://o.internal", route("gets", "/", []string{"GET", "HEAD"}, "http://a.internal"), route("x", "/x/", []string{"HEAD"}, "http://b.internal")),
			[]string{`domains[0] (site).routes[1].match: is never chosen: routes[0] (gets) before it matches every request it matches (first match wins)`}},
		{"origins required", routed("http://o.internal", route("a", "/a/", nil)),
			[]string{`domains[0] (site).routes[0].origins: must be set: a route sends its requests to servers of its own`}},
		{"origins checked", routed("http://o.internal", route("a", "/a/", nil, "ftp://a.internal")),
			[]string{`domains[0] (site).routes[0].origins[0].url: must be an absolute http, https or h2c URL, got "ftp://a.internal"`}},
		{"group keys checked at the route", func() Config {
			c := routed("http://o.internal", route("a", "/a/", nil, "http://a.internal"))
			c.Domains[0].Routes[0].Balance = "fastest"
			c.Domains[0].Routes[0].HashKey = []string{"ip"}
			return c
		}(), []string{`domains[0] (site).routes[0].balance: must be round_robin, least_requests, random_two or hash, got "fastest"`,
			`domains[0] (site).routes[0].hash_key: applies only with balance hash, got balance round_robin`}},
		{"routes on a static domain", Config{Domains: []DomainConfig{{Name: "site", Hosts: []string{"site.example.com"},
			Respond: &ResponseConfig{Body: "hi"}, Routes: []RouteConfig{route("a", "/a/", nil, "http://a.internal")}}}},
			[]string{`domains[0] (site).routes: applies only to a domain forwarded to origins`}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantErrors(t, tc.cfg, tc.want) })
	}
}

// FuzzRoute: for any path a client sends, as the proxy decodes and
// cleans it (DecodePath), the route chosen is the first that matches,
// each route matches exactly where a rule with the same match applies,
// and the clean path chooses as the raw one did: no spelling of a path
// reaches a route its clean form does not.
func FuzzRoute(f *testing.F) {
	for _, s := range []string{"/api/x", "//api/x", "/api/%2e%2e/static/x", "/%61pi/x", "/api;x/y", "/static/../api/",
		"/API/x", "/static", "/static/", "/a%2Fb", "", "/api%00/"} {
		f.Add("GET", s)
		f.Add("POST", s)
	}
	cfg := routed("http://rest.internal",
		route("writes", "/api/", []string{"POST", "PUT"}, "http://w.internal"),
		route("api", "/api/", nil, "http://a.internal"),
		route("static", "/static/", nil, "http://s.internal"))
	for _, rc := range cfg.Domains[0].Routes {
		cfg.Domains[0].Rules = append(cfg.Domains[0].Rules, RuleConfig{Name: rc.Name, Limit: 1, Period: time.Second,
			Match: &MatchConfig{PathPrefix: rc.Match.PathPrefix, Methods: rc.Match.Methods}})
	}
	tab, err := Compile(cfg)
	if err != nil {
		f.Fatal(err)
	}
	d := tab.Domains[0]
	f.Fuzz(func(t *testing.T, method, raw string) {
		p, err := DecodePath(raw)
		if err != nil {
			return // refused before any route
		}
		got := d.Route(method, p)
		var first *Route
		for i, r := range d.Routes {
			if r.Matches(method, p) != d.Rules[i].Matches(method, p) {
				t.Fatalf("%s %q (%q): route %s matches %v, its rule %v", method, raw, p, r.Name, r.Matches(method, p), !r.Matches(method, p))
			}
			if first == nil && r.Matches(method, p) {
				first = r
			}
		}
		if got != first {
			t.Fatalf("%s %q (%q): route %v, want the first that matches, %v", method, raw, p, got, first)
		}
		if again := d.Route(method, CleanPath(p)); again != got {
			t.Fatalf("%s %q: route %v, but its clean path %q routes to %v", method, raw, got, CleanPath(p), again)
		}
	})
}
