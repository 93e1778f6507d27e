package proxy

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// checkEnv is a proxy's check listener under test, with the public
// listener beside it.
type checkEnv struct {
	*env
	check *httptest.Server
}

// newCheckEnv serves cfg's check listener; 127.0.0.1, where the test's
// questions come from, is a trusted proxy unless cfg says otherwise.
func newCheckEnv(t *testing.T, cfg rules.Config) *checkEnv {
	t.Helper()
	if cfg.ClientIP.TrustedProxies == nil {
		cfg.ClientIP.TrustedProxies = []string{"127.0.0.1"}
	}
	e := &checkEnv{env: newEnv(t, cfg)}
	e.check = httptest.NewServer(e.proxy.CheckHandler())
	t.Cleanup(e.check.Close)
	return e
}

// ask sends a question with the given header fields (each a list of
// lines) and returns the answer with its body read.
func (e *checkEnv) ask(hdr http.Header) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest("GET", e.check.URL+"/", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, vs := range hdr {
		if k == "Host" {
			req.Host = vs[0]
			continue
		}
		req.Header[k] = vs
	}
	resp, err := e.check.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (e *checkEnv) answers(answer string) float64 {
	return testutil.ToFloat64(e.proxy.metrics.checkAnswers.WithLabelValues(answer))
}

// checkTestConfig: api.example.com answered only on the check listener,
// 2 requests per 720h per client with fields on every answer;
// www.example.com only proxied.
func checkTestConfig(deny int) rules.Config {
	return rules.Config{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1",
		Check: &rules.CheckConfig{Listen: "127.0.0.1:2", DenyStatus: deny},
		Domains: []rules.DomainConfig{
			{Hosts: []string{"api.example.com"}, Serve: "check", Rules: []rules.RuleConfig{
				{Name: "per-ip", Limit: 2, Period: 720 * time.Hour, Headers: "always"},
			}},
			{Hosts: []string{"www.example.com"}, Serve: "proxy", Origin: "http://127.0.0.1:9"},
		},
	}
}

// traefik returns the fields Traefik's ForwardAuth middleware sends about
// a client's request (its documentation lists them: X-Forwarded-Method,
// -Proto, -Host, -Uri and -For), with the client's own header fields.
func traefik(method, host, uri, client string) http.Header {
	return http.Header{
		"X-Forwarded-Method": {method},
		"X-Forwarded-Proto":  {"https"},
		"X-Forwarded-Host":   {host},
		"X-Forwarded-Uri":    {uri},
		"X-Forwarded-For":    {client},
		"Accept":             {"application/json"},
		"User-Agent":         {"curl/8.5.0"},
	}
}

// TestCheckTraefikForwardAuth asks as Traefik's ForwardAuth does: a GET to
// the address with the forwarded fields and the client's header fields.
// Each client gets its limit, then 429 with Retry-After, the fields and
// the JSON body a proxied request would get; allowed answers carry the
// fields of the rule (headers: always).
func TestCheckTraefikForwardAuth(t *testing.T) {
	e := newCheckEnv(t, checkTestConfig(0))
	for i, want := range []int{200, 200, 429} {
		resp, body := e.ask(traefik("POST", "api.example.com", "/v1/orders?id=1,2", "198.51.100.1, 203.0.113.7"))
		if resp.StatusCode != want {
			t.Fatalf("question %d: status %d (%q), want %d", i, resp.StatusCode, body, want)
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != `"per-ip";q=2;w=2592000` {
			t.Errorf("question %d: RateLimit-Policy %q", i, got)
		}
		if got, want := resp.Header.Get("X-RateLimit-Remaining"), []string{"1", "0", "0"}[i]; got != want {
			t.Errorf("question %d: X-RateLimit-Remaining %q, want %q", i, got, want)
		}
		if want == 429 {
			if resp.Header.Get("Retry-After") == "" {
				t.Errorf("refusal without Retry-After")
			}
			if !strings.HasPrefix(body, `{"error":"rate_limited","rule":"per-ip"`) {
				t.Errorf("refusal body %q, want the JSON body", body)
			}
		}
	}
	// Another client behind the same proxy has its own count.
	if resp, _ := e.ask(traefik("GET", "api.example.com", "/", "203.0.113.8")); resp.StatusCode != 200 {
		t.Errorf("another client: status %d, want 200", resp.StatusCode)
	}
	if got := e.answers(answerAllowed); got != 3 {
		t.Errorf("allowed answers %v, want 3", got)
	}
	if got := e.answers(answerRefused); got != 1 {
		t.Errorf("refused answers %v, want 1", got)
	}
}

// TestCheckNginx asks as the nginx configuration in docs/beside.md does:
// X-Original-Method and X-Original-URI, the host in Host, and edge's
// deny_status 403, which nginx's auth_request understands.
func TestCheckNginx(t *testing.T) {
	e := newCheckEnv(t, checkTestConfig(403))
	q := http.Header{"Host": {"api.example.com"}, "X-Original-Method": {"GET"}, "X-Original-Uri": {"/a"},
		"X-Forwarded-For": {"203.0.113.7"}}
	for i, want := range []int{200, 200, 403} {
		resp, body := e.ask(q)
		if resp.StatusCode != want {
			t.Fatalf("question %d: status %d (%q), want %d", i, resp.StatusCode, body, want)
		}
		if want == 403 && (resp.Header.Get("Retry-After") == "" || !strings.HasPrefix(body, "rate limited: retry in ")) {
			t.Errorf("refusal: Retry-After %q, body %q", resp.Header.Get("Retry-After"), body)
		}
	}
}

// TestCheckNginxClientForwardedFields: nginx's auth_request passes the
// client's own header fields to edge beside the X-Original-* fields it
// sets, so a question with X-Original-Method or X-Original-URI is
// nginx's, and an X-Forwarded-Method, -Uri, -Host or -Proto beside them
// is the client's: such a question is unreadable (deny_status, counted,
// under no rule) rather than read from the client's choice of method,
// target or domain. Four POST /login under a rule of 3 would otherwise
// all be allowed.
func TestCheckNginxClientForwardedFields(t *testing.T) {
	cfg := checkTestConfig(403)
	cfg.Domains[0].Rules = []rules.RuleConfig{{Name: "login", Limit: 3, Period: 720 * time.Hour,
		Match: &rules.MatchConfig{PathPrefix: "/login", Methods: []string{"POST"}}}}
	cfg.Domains = append(cfg.Domains, rules.DomainConfig{Hosts: []string{"open.example.com"}, Serve: "check"})
	nginx := func() http.Header {
		return http.Header{"Host": {"api.example.com"}, "X-Original-Method": {"POST"},
			"X-Original-Uri": {"/login"}, "X-Forwarded-For": {"203.0.113.7"}}
	}
	for _, tt := range []struct{ field, value string }{
		{"X-Forwarded-Method", "GET"},
		{"X-Forwarded-Uri", "/"},
		{"X-Forwarded-Host", "open.example.com"},
		{"X-Forwarded-Proto", "https"},
	} {
		t.Run(tt.field, func(t *testing.T) {
			e := newCheckEnv(t, cfg)
			q := nginx()
			q[tt.field] = []string{tt.value}
			var got []int
			for range 4 {
				resp, body := e.ask(q)
				got = append(got, resp.StatusCode)
				if resp.StatusCode != 200 && !strings.Contains(body, tt.field) {
					t.Errorf("answer %q does not name %s", body, tt.field)
				}
			}
			if want := []int{403, 403, 403, 403}; !slices.Equal(got, want) {
				t.Errorf("4 POST /login with the client's %s: statuses %v, want %v", tt.field, got, want)
			}
			if got := e.answers(answerUnreadable); got != 4 {
				t.Errorf("unreadable answers %v, want 4", got)
			}
			// nginx's own question then: the refused ones counted under no rule.
			for i, want := range []int{200, 200, 200, 403} {
				if resp, body := e.ask(nginx()); resp.StatusCode != want {
					t.Errorf("nginx's question %d: status %d (%q), want %d", i, resp.StatusCode, body, want)
				}
			}
		})
	}
}

// TestCheckUnreadable: a question whose forwarded fields edge cannot read,
// or that describes a request the public listener would refuse, is
// answered deny_status and counted, and counts under no rule.
func TestCheckUnreadable(t *testing.T) {
	good := func() http.Header { return traefik("GET", "api.example.com", "/", "203.0.113.7") }
	with := func(k string, vs ...string) http.Header {
		h := good()
		h[k] = vs
		if vs == nil {
			delete(h, k)
		}
		return h
	}
	tests := []struct {
		name   string
		hdr    http.Header
		answer string
	}{
		{"no method", with("X-Forwarded-Method"), answerUnreadable},
		{"no uri", with("X-Forwarded-Uri"), answerUnreadable},
		{"repeated method", with("X-Forwarded-Method", "GET", "POST"), answerUnreadable},
		{"empty method", with("X-Forwarded-Method", " "), answerUnreadable},
		{"lower-case method", with("X-Forwarded-Method", "get"), answerUnreadable},
		{"CONNECT", with("X-Forwarded-Method", "CONNECT"), answerUnreadable},
		{"uri not a path", with("X-Forwarded-Uri", "http://api.example.com/"), answerUnreadable},
		{"uri with space", with("X-Forwarded-Uri", "/a b"), answerUnreadable},
		{"dot segment", with("X-Forwarded-Uri", "/a/../admin"), answerUnreadable},
		{"encoded slash", with("X-Forwarded-Uri", "/a%2fb"), answerUnreadable},
		{"host list", with("X-Forwarded-Host", "api.example.com, evil.test"), answerUnreadable},
		{"repeated host", with("X-Forwarded-Host", "api.example.com", "api.example.com"), answerUnreadable},
		{"proto", with("X-Forwarded-Proto", "gopher"), answerUnreadable},
		{"X-Original-Method beside X-Forwarded-*", with("X-Original-Method", "GET"), answerUnreadable},
		{"X-Original-Uri beside X-Forwarded-*", with("X-Original-Uri", "/"), answerUnreadable},
		{"underscore alias", with("X_Forwarded_For", "1.2.3.4"), answerUnreadable},
		{"malformed X-Forwarded-For", with("X-Forwarded-For", "203.0.113.7:80"), answerUnreadable},
		{"no X-Forwarded-For from a trusted proxy", with("X-Forwarded-For"), answerUnreadable},
		{"invalid host", with("X-Forwarded-Host", "a b"), answerMisdirected},
		{"unknown host", with("X-Forwarded-Host", "other.example.com"), answerMisdirected},
		{"host only proxied", with("X-Forwarded-Host", "www.example.com"), answerMisdirected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newCheckEnv(t, checkTestConfig(403))
			for i := range 3 { // more than the limit: none may count
				resp, body := e.ask(tt.hdr)
				if resp.StatusCode != 403 {
					t.Fatalf("question %d: status %d (%q), want 403", i, resp.StatusCode, body)
				}
			}
			if got := e.answers(tt.answer); got != 3 {
				t.Errorf("%s answers %v, want 3", tt.answer, got)
			}
			if resp, body := e.ask(good()); resp.StatusCode != 200 {
				t.Errorf("a good question then: status %d (%q), want 200", resp.StatusCode, body)
			}
		})
	}
}

// TestCheckUntrustedProxy: the asking proxy's X-Forwarded-For counts only
// when its address is in client_ip.trusted_proxies; otherwise the proxy
// itself is the client, and its questions share one count.
func TestCheckUntrustedProxy(t *testing.T) {
	cfg := checkTestConfig(0)
	cfg.ClientIP.TrustedProxies = []string{"192.0.2.0/24"}
	e := newCheckEnv(t, cfg)
	for i, want := range []int{200, 200, 429} {
		client := []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"}[i]
		if resp, _ := e.ask(traefik("GET", "api.example.com", "/", client)); resp.StatusCode != want {
			t.Fatalf("question %d: status %d, want %d", i, resp.StatusCode, want)
		}
	}
}

func TestCheckToken(t *testing.T) {
	cfg := checkTestConfig(401)
	cfg.Check.Token = "s3cret"
	e := newCheckEnv(t, cfg)
	for _, tt := range []struct {
		name, token string
		want        int
	}{
		{"none", "", 401},
		{"wrong", "s3cre", 401},
		{"right", "s3cret", 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := traefik("GET", "api.example.com", "/", "203.0.113.9")
			if tt.token != "" {
				h[rules.CheckTokenHeader] = []string{tt.token}
			}
			if resp, _ := e.ask(h); resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
	if got := e.answers(answerUnauthorized); got != 2 {
		t.Errorf("unauthorized answers %v, want 2", got)
	}
}

// TestCheckDomainsStayOnTheirListener: the public listener does not serve
// a domain with serve check (421, as an unknown host), and a domain with
// serve both is answered on both and counted once per request on each.
func TestCheckDomainsStayOnTheirListener(t *testing.T) {
	origin, _ := newOrigin(t, "o")
	cfg := checkTestConfig(0)
	cfg.Domains[1].Serve = "both"
	cfg.Domains[1].Origin = origin.URL
	cfg.Domains[1].Rules = []rules.RuleConfig{{Name: "one", Limit: 1, Period: 720 * time.Hour}}
	e := newCheckEnv(t, cfg)
	if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("check-only domain on the public listener: status %d, want 421", resp.StatusCode)
	}
	if resp, body := e.get("www.example.com", "/"); resp.StatusCode != 200 || body != "origin:o" {
		t.Errorf("both, public listener: %d %q", resp.StatusCode, body)
	}
	// The public listener's request came from 127.0.0.1 itself.
	if resp, _ := e.ask(traefik("GET", "www.example.com", "/", "127.0.0.1")); resp.StatusCode != 429 {
		t.Errorf("both, check listener after the limit: status %d, want 429", resp.StatusCode)
	}
}

// TestCheckWithoutSection: a reload that drops the check section leaves
// the bound listener refusing every question with 503.
func TestCheckWithoutSection(t *testing.T) {
	e := newCheckEnv(t, checkTestConfig(0))
	cfg := checkTestConfig(0)
	cfg.Check = nil
	cfg.Domains = cfg.Domains[1:]
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.proxy.Reload(table, ""); err != nil {
		t.Fatal(err)
	}
	if resp, _ := e.ask(traefik("GET", "api.example.com", "/", "203.0.113.7")); resp.StatusCode != 503 {
		t.Errorf("status %d, want 503", resp.StatusCode)
	}
}

// FuzzCheckQuestion feeds readQuestion and the screen hostile forwarded
// fields: neither panics, a question with an X-Original-* field and an
// X-Forwarded-* field edge reads is never accepted (nginx passed the
// latter on from the client), and a question they accept describes a
// request as the public listener would accept it: an upper-case method, a
// screened origin-form target and one host, read from one form's fields.
func FuzzCheckQuestion(f *testing.F) {
	for _, s := range [][6]string{
		{"GET", "/", "api.example.com", "https", "", ""},
		{"POST", "/v1/orders?id=1,2", "api.example.com", "http", "", ""},
		{"", "", "", "", "GET", "/"},
		{"get", "/a/../b", "a, b", "gopher", "", ""},
		{"GET", "/%2e%2e/x", "api.example.com:8080", "HTTPS", "", ""},
		{"GET", "/a\x00b", "[2001:db8::1]", "", "", ""},
		{"GET", "//x;y/..;/z", "*.example.com", "", "POST", "POST"},
		{"", "", "open.example.com", "", "POST", "/login"},
		{"", "", "", "https", "", "/login"},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5])
	}
	f.Fuzz(func(t *testing.T, method, uri, host, proto, origMethod, origURI string) {
		r := httptest.NewRequest("GET", "http://edge.check/", nil)
		for k, v := range map[string]string{"X-Forwarded-Method": method, "X-Forwarded-Uri": uri,
			"X-Forwarded-Host": host, "X-Forwarded-Proto": proto, "X-Original-Method": origMethod, "X-Original-Uri": origURI} {
			if v != "" {
				r.Header[k] = strings.Split(v, "\n")
			}
		}
		q, reason := readQuestion(r)
		nginx := origMethod != "" || origURI != ""
		if nginx && reason == "" && (method != "" || uri != "" || host != "" || proto != "") {
			t.Fatalf("accepted X-Original-* %q %q beside X-Forwarded-* %q %q %q %q", origMethod, origURI, method, uri, host, proto)
		}
		if reason != "" {
			return
		}
		if screenRequest(q).status != 0 {
			return
		}
		if !upperToken(q.Method) || q.RequestURI == "" || q.RequestURI[0] != '/' || q.URL.Path == "" || q.URL.Path[0] != '/' {
			t.Fatalf("accepted %q %q as method %q, target %q, path %q", method, uri, q.Method, q.RequestURI, q.URL.Path)
		}
		if strings.Contains(q.Host, ",") || strings.TrimSpace(q.Host) != q.Host {
			t.Fatalf("accepted host %q", q.Host)
		}
		if nginx && (q.Method != wire.TrimOWS(origMethod) || q.RequestURI != wire.TrimOWS(origURI) || q.Host != r.Host || q.URL.Scheme != "http") {
			t.Fatalf("nginx's %q %q read as %q %q, host %q, scheme %q", origMethod, origURI, q.Method, q.RequestURI, q.Host, q.URL.Scheme)
		}
	})
}

// TestCheckConfigView: /v1/config shows the check section, without the
// token, and each domain's serve.
func TestCheckConfigView(t *testing.T) {
	cfg := checkTestConfig(403)
	cfg.Check.Token = "s3cret"
	e := newCheckEnv(t, cfg)
	w := httptest.NewRecorder()
	e.proxy.AdminHandler().ServeHTTP(w, httptest.NewRequest("GET", "/v1/config", nil))
	if strings.Contains(w.Body.String(), "s3cret") {
		t.Fatalf("/v1/config shows the token: %s", w.Body)
	}
	var v struct {
		Check   map[string]any `json:"check"`
		Domains []struct {
			Serve string `json:"serve"`
		} `json:"domains"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"listen": "127.0.0.1:2", "deny_status": float64(403), "token_set": true}
	if !maps.Equal(v.Check, want) {
		t.Errorf("check: got %v, want %v", v.Check, want)
	}
	if len(v.Domains) != 2 || v.Domains[0].Serve != "check" || v.Domains[1].Serve != "proxy" {
		t.Errorf("domains' serve: got %+v, want check, proxy", v.Domains)
	}
}

// TestCheckReload: deny_status and token take effect on reload, and a
// domain moved to serve proxy leaves the check listener.
func TestCheckReload(t *testing.T) {
	e := newCheckEnv(t, checkTestConfig(0))
	reload := func(cfg rules.Config) {
		t.Helper()
		cfg.ClientIP.TrustedProxies = []string{"127.0.0.1"}
		table, err := rules.Compile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.proxy.Reload(table, ""); err != nil {
			t.Fatal(err)
		}
	}
	q := traefik("GET", "api.example.com", "/", "203.0.113.7")
	cfg := checkTestConfig(401)
	cfg.Check.Token = "t1"
	reload(cfg)
	if resp, _ := e.ask(q); resp.StatusCode != 401 {
		t.Errorf("after the reload, no token: status %d, want the new deny_status 401", resp.StatusCode)
	}
	q[rules.CheckTokenHeader] = []string{"t1"}
	if resp, _ := e.ask(q); resp.StatusCode != 200 {
		t.Errorf("after the reload, with the token: status %d, want 200", resp.StatusCode)
	}
	cfg = checkTestConfig(401)
	cfg.Domains[0].Serve, cfg.Domains[0].Origin = "proxy", "http://127.0.0.1:9"
	reload(cfg)
	if resp, _ := e.ask(q); resp.StatusCode != 401 || e.answers(answerMisdirected) != 1 {
		t.Errorf("domain moved to serve proxy: status %d, misdirected %v; want 401, 1", resp.StatusCode, e.answers(answerMisdirected))
	}
}

// TestCheckAnswerNamed: every answer of the check listener names itself in
// X-Edge-Answer, since under deny_status the status cannot tell a refusal
// from a question edge could not answer.
func TestCheckAnswerNamed(t *testing.T) {
	cfg := checkTestConfig(403)
	cfg.Check.Token = "s3cret"
	e := newCheckEnv(t, cfg)
	with := func(h http.Header, token string) http.Header {
		if token != "" {
			h[rules.CheckTokenHeader] = []string{token}
		}
		return h
	}
	tests := []struct {
		name   string
		q      http.Header
		status int
		answer string
	}{
		{"allowed", with(traefik("GET", "api.example.com", "/", "203.0.113.1"), "s3cret"), 200, answerAllowed},
		{"allowed again", with(traefik("GET", "api.example.com", "/", "203.0.113.1"), "s3cret"), 200, answerAllowed},
		{"refused", with(traefik("GET", "api.example.com", "/", "203.0.113.1"), "s3cret"), 403, answerRefused},
		{"misdirected", with(traefik("GET", "nobody.example.com", "/", "203.0.113.1"), "s3cret"), 403, answerMisdirected},
		{"unreadable: no method", with(http.Header{"X-Forwarded-Uri": {"/"}, "X-Forwarded-Host": {"api.example.com"}}, "s3cret"), 403, answerUnreadable},
		{"unreadable: no client", with(traefik("GET", "api.example.com", "/", ""), "s3cret"), 403, answerUnreadable},
		{"unauthorized", traefik("GET", "api.example.com", "/", "203.0.113.1"), 403, answerUnauthorized},
	}
	for _, tt := range tests {
		resp, body := e.ask(tt.q)
		if resp.StatusCode != tt.status || resp.Header.Get("X-Edge-Answer") != tt.answer {
			t.Errorf("%s: got %d with X-Edge-Answer %q (%q), want %d with %q",
				tt.name, resp.StatusCode, resp.Header.Get("X-Edge-Answer"), body, tt.status, tt.answer)
		}
	}
}
