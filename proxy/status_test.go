package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/certs"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/html"
)

// statusEnv is a proxy with two domains, one a static response, and its
// status page and admin API behind one test server, as the admin listener
// mounts them.
func statusEnv(t *testing.T, token bool) (*env, *httptest.Server) {
	t.Helper()
	origin, _ := newOrigin(t, "a")
	login := rule("login", 3, time.Minute)
	login.Key = []string{"ip", "header:X-User"}
	login.Match = &rules.MatchConfig{PathPrefix: "/login"}
	cfg := oneDomain(origin.URL, rule("per-ip", 5, time.Minute), login)
	cfg.Pop = "fra-1"
	cfg.ClientIP.TrustedProxies = []string{"127.0.0.1/32"}
	cfg.Domains[0].Name = "api"
	cfg.Domains = append(cfg.Domains, rules.DomainConfig{Name: "static", Hosts: []string{"static.example.com"},
		Respond: &rules.ResponseConfig{Status: 200, Body: "ok"}})
	e := newEnv(t, cfg)
	page := e.proxy.StatusPage(StatusPageOptions{TokenRequired: func() bool { return token }, Ready: func() bool { return true }})
	mux := http.NewServeMux()
	mux.Handle("/v1/", e.proxy.AdminHandler())
	mux.Handle("/", page)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return e, srv
}

func fetchPage(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// walk calls f for every element node under n.
func walk(n *html.Node, f func(*html.Node)) {
	if n.Type == html.ElementNode {
		f(n)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, f)
	}
}

func attr(n *html.Node, name string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val, true
		}
	}
	return "", false
}

func text(n *html.Node) string {
	var b strings.Builder
	var f func(*html.Node)
	f = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			f(c)
		}
	}
	f(n)
	return strings.TrimSpace(b.String())
}

// firstElement is n's first child element, or nil.
func firstElement(n *html.Node) *html.Node {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode {
			return c
		}
	}
	return nil
}

// inside reports whether n is inside an element named tag.
func inside(n *html.Node, tag string) bool {
	for p := n.Parent; p != nil; p = p.Parent {
		if p.Type == html.ElementNode && p.Data == tag {
			return true
		}
	}
	return false
}

// TestStatusPageHTML parses the page rendered without a token: its
// headings name the sections and every domain, its tables have captions
// and scoped headers, and it loads nothing from another host.
func TestStatusPageHTML(t *testing.T) {
	_, srv := statusEnv(t, false)
	resp, body := fetchPage(t, srv.URL+"/")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("Content-Security-Policy = %q, want this listener only", csp)
	}
	doc, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string][]string{}
	var tables, rowHeaders int
	var ruleRows []string
	walk(doc, func(n *html.Node) {
		switch n.Data {
		case "h1", "h2", "h3", "h4":
			headings[n.Data] = append(headings[n.Data], text(n))
		case "table":
			tables++
			if c := firstElement(n); c == nil || c.Data != "caption" {
				t.Errorf("a table without a caption as its first child: %q", text(n))
			}
		case "th":
			scope, _ := attr(n, "scope")
			want := "row"
			if inside(n, "thead") {
				want = "col"
			}
			if scope != want {
				t.Errorf("th %q has scope %q, want %q", text(n), scope, want)
			}
			if want == "row" {
				rowHeaders++
				if c := firstElement(n.Parent.Parent.Parent); c != nil && strings.HasPrefix(text(c), "Rules of") { // th, tr, tbody, table
					ruleRows = append(ruleRows, text(n))
				}
			}
		case "button":
			if label, _ := attr(n, "aria-label"); label == "" && text(n) == "" {
				t.Error("a button without a label")
			}
		}
		for _, a := range n.Attr {
			// A fragment (#d0, a link within the page) loads nothing.
			if (a.Key == "src" || a.Key == "href") && !strings.HasPrefix(a.Val, "#") && (!strings.HasPrefix(a.Val, "/") || strings.HasPrefix(a.Val, "//")) {
				t.Errorf("<%s %s=%q>: the page loads only from its own listener", n.Data, a.Key, a.Val)
			}
		}
	})
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"h1", strings.Join(headings["h1"], ","), "edge status"},
		{"h2", strings.Join(headings["h2"], ","), "Summary,Node,Cluster,Domains"},
		{"h3 (domains)", strings.Join(headings["h3"], ","), "api,static"},
		{"tables", tables, 4}, // the summary; api: figures, rules; static: figures
		{"rule rows", strings.Join(ruleRows, ","), "per-ip,login"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	for _, want := range []string{"fra-1", "api.example.com", "static.example.com", "a static response", "sliding_window", "ip | header:X-User", "ready", "/status.js", "/status.css",
		`<a href="#d1">static</a>`, "<td>5 per 1m</td>", "path /login…; headers blocked"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// TestStatusRuleText: without the script the page writes each rule's
// limit in its algorithm's terms and its conditions, as the script does.
func TestStatusRuleText(t *testing.T) {
	tests := []struct {
		name       string
		rule       ruleView
		limit      string
		conditions string
	}{
		{"window", ruleView{Algorithm: "sliding_window", Limit: 20, Period: "10s", Cost: 1, Headers: "blocked"},
			"20 per 10s", "headers blocked"},
		{"token bucket", ruleView{Algorithm: "token_bucket", Limit: 20, Period: "1m0s", Burst: 40, Cost: 1, Headers: "always"},
			"burst 40, refills 20 per 1m", "headers always"},
		{"leaky bucket queue", ruleView{Algorithm: "leaky_bucket", Limit: 5, Period: "1h0m0s", Burst: 5, MaxDelay: "500ms", Cost: 1, Headers: "none"},
			"capacity 5, drains 5 per 1h", "queues up to 500ms; headers none"},
		{"concurrency", ruleView{Algorithm: "concurrency", Limit: 4, Cost: 1, Headers: "blocked"},
			"4 in flight per key", "headers blocked"},
		{"quota", ruleView{Algorithm: "quota", Limit: 1000, Reset: "monthly", Timezone: "Europe/Berlin", Cost: 1, Headers: "blocked"},
			"1000 per month (Europe/Berlin)", "headers blocked"},
		{"every condition", ruleView{Algorithm: "fixed_window", Limit: 3, Period: "1m30s", PathPrefix: "/login", Methods: []string{"POST", "PUT"},
			Cost: 2, CostHeader: "X-Cost", MaxCost: 10, ResponseCostHeader: "X-Edge-Cost", CountStatus: []int{401, 403},
			Allow: []string{"10.0.0.0/8", "192.0.2.1/32"}, CountBlocked: true, MitigationTimeout: "5m0s", BlockStatus: 403, Headers: "always"},
			"3 per 1m30s", "path /login…; methods POST, PUT; cost from X-Cost (at most 10, else 2); origin reports cost in X-Edge-Cost; " +
				"counts only status 401, 403; 2 clients allowed; counts refused requests; blocks 5m once over; refuses with 403; headers always"},
		{"cost 0", ruleView{Algorithm: "sliding_window", Limit: 1, Period: "1s", Headers: "blocked"}, "1 per 1s", "cost 0; headers blocked"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ruleLimit(tc.rule); got != tc.limit {
				t.Errorf("limit = %q, want %q", got, tc.limit)
			}
			if got := strings.Join(ruleConditions(tc.rule), "; "); got != tc.conditions {
				t.Errorf("conditions = %q, want %q", got, tc.conditions)
			}
		})
	}
}

// TestStatusPageWithToken: with a token required the page carries no data,
// only what its script needs to ask for the token.
func TestStatusPageWithToken(t *testing.T) {
	_, srv := statusEnv(t, true)
	_, body := fetchPage(t, srv.URL+"/")
	if !strings.Contains(body, `data-token="required"`) || !strings.Contains(body, `<main id="status">`) {
		t.Fatalf("page = %s, want a bare page for the script", body)
	}
	for _, secret := range []string{"fra-1", "api", "static", "login", "per-ip", "127.0.0.1", "sliding_window", "ready"} {
		if strings.Contains(body, secret) {
			t.Errorf("the page shows %q without the token", secret)
		}
	}
}

// TestStatusFilesLocal checks that the style sheet and script are served
// and reach nothing beyond the listener: no URL with a scheme or host but
// the SVG namespace, no @import or url() in the style sheet, and every
// fetch names a path of this listener.
func TestStatusFilesLocal(t *testing.T) {
	_, srv := statusEnv(t, false)
	url := regexp.MustCompile(`(?i)(https?:|wss?:)?//[a-z0-9.-]+`)
	for _, f := range []struct{ path, ctype string }{
		{"/status.css", "text/css; charset=utf-8"},
		{"/status.js", "text/javascript; charset=utf-8"},
	} {
		resp, body := fetchPage(t, srv.URL+f.path)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != f.ctype {
			t.Errorf("GET %s: %d %s", f.path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		for _, m := range url.FindAllString(body, -1) {
			if m != "http://www.w3.org" { // the SVG namespace, a name, never fetched
				t.Errorf("%s names %q", f.path, m)
			}
		}
		if strings.Contains(body, "@import") || strings.Contains(body, "url(") {
			t.Errorf("%s imports a file", f.path)
		}
	}
	_, js := fetchPage(t, srv.URL+"/status.js")
	for _, call := range regexp.MustCompile(`fetch\([^,]*`).FindAllString(js, -1) {
		if call != "fetch(path" && call != "fetch('/readyz'" {
			t.Errorf("script calls %q, want only the API's paths", call)
		}
	}
	if resp, _ := fetchPage(t, srv.URL+"/other"); resp.StatusCode != 404 {
		t.Errorf("GET /other: %d, want 404", resp.StatusCode)
	}
}

// TestStatusScriptReset reads, from the script, the request its reset
// button sends (method, path, headers) and sends the same to the admin
// API, which must reset the key. A browser drives the real button in
// cmd/edge's TestStatusPageInBrowser.
func TestStatusScriptReset(t *testing.T) {
	e, srv := statusEnv(t, false)
	_, js := fetchPage(t, srv.URL+"/status.js")
	for _, want := range []string{
		// the button's handler: confirm, then the DELETE
		`if (!window.confirm(`,
		`await api('DELETE', keyPath(domain, rule, key))`,
		// every API request carries the token, once given
		`fetch(path, { method: method, headers: apiHeaders()`,
		`if (t) h.Authorization = 'Bearer ' + t;`,
		`return '/v1/keys/' + encodeURIComponent(domain) + '/' + encodeURIComponent(rule) + '/' + encodeURIComponent(key);`,
	} {
		if !strings.Contains(js, want) {
			t.Errorf("the script lacks %s", want)
		}
	}
	// encodeURIComponent of the key the button carries, as rules.KeyText
	// writes it: a composite key and an IPv6 prefix, with | / and :.
	tests := []struct{ name, xff, user, key, encoded string }{
		{"composite key", "203.0.113.7", "bob", "203.0.113.7|bob", "203.0.113.7%7Cbob"},
		{"IPv6 prefix", "2001:db8:1:2::7", "eve", "2001:db8:1:2::/64|eve", "2001%3Adb8%3A1%3A2%3A%3A%2F64%7Ceve"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for range 5 {
				e.do("GET", "api.example.com", "/login", map[string]string{"X-Forwarded-For": tc.xff, "X-User": tc.user}, "")
			}
			found := false
			for _, k := range e.proxy.state.Load().domains[0].rules[1].top.top(64) {
				found = found || k.text == tc.key
			}
			if !found {
				t.Fatalf("%q is not a top talker", tc.key)
			}
			req, _ := http.NewRequest("DELETE", srv.URL+"/v1/keys/api/login/"+tc.encoded, nil)
			req.Header.Set("Accept", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				t.Errorf("DELETE %s: %d, want 204", tc.encoded, resp.StatusCode)
			}
		})
	}
}

func TestFormatUptime(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {59 * time.Second, "59s"}, {61 * time.Second, "1m 1s"},
		{2*time.Hour + 3*time.Minute + 4*time.Second, "2h 3m"}, {50 * time.Hour, "2d 2h 0m"},
	} {
		if got := formatUptime(tc.d); got != tc.want {
			t.Errorf("formatUptime(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// TestStatusCertificates: once the proxy is told its certificates, GET
// /v1/status has a tls object (absent before) with each certificate's
// file, names, issuer, expiry and days left, flagged within 14 days or
// expired, and the handshakes by result, every result present; reading
// them makes no series. The page renders them as a Certificates section.
func TestStatusCertificates(t *testing.T) {
	e, srv := statusEnv(t, false)
	rawStatus := func() map[string]json.RawMessage {
		t.Helper()
		_, body := fetchPage(t, srv.URL+"/v1/status")
		var v map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("/v1/status: %v: %s", err, body)
		}
		return v
	}
	if tls, ok := rawStatus()["tls"]; ok {
		t.Errorf("before SetCertificates /v1/status has tls %s, want none (edge serves no TLS)", tls)
	}
	if _, page := fetchPage(t, srv.URL+"/"); strings.Contains(page, "Certificates") {
		t.Error("before SetCertificates the page has a Certificates section")
	}

	now := e.clock.Now()
	day := 24 * time.Hour
	e.proxy.SetCertificates([]certs.Info{
		{File: "api.pem", Names: []string{"api.example.com", "127.0.0.1"}, Issuer: "edge test CA", NotAfter: now.Add(90 * day)},
		{File: "edge.pem", Names: []string{"*.example.net"}, Issuer: "edge test CA", NotAfter: now.Add(14 * day)},
		{File: "soon.pem", Names: []string{"soon.example.org"}, Issuer: "R11", NotAfter: now.Add(14*day - time.Second)},
		{File: "old.pem", Issuer: "CN=old,O=nobody", NotAfter: now.Add(-time.Hour)},
	})
	for _, r := range []string{certs.ResultOK, certs.ResultOK, certs.ResultOK, certs.ResultUnknownSNI, certs.ResultError} {
		h := certs.Handshake{Result: r, Duration: time.Millisecond}
		if r == certs.ResultError {
			h.Err = errors.New("tls: client offered only unsupported versions")
		}
		e.proxy.TLSHandshake(h)
	}
	at := func(d time.Duration) string { return now.Add(d).UTC().Format(time.RFC3339) }
	want := `{"certificates":[` +
		`{"file":"api.pem","names":["api.example.com","127.0.0.1"],"issuer":"edge test CA","not_after":"` + at(90*day) + `","days_left":90,"expires_soon":false,"expired":false},` +
		`{"file":"edge.pem","names":["*.example.net"],"issuer":"edge test CA","not_after":"` + at(14*day) + `","days_left":14,"expires_soon":false,"expired":false},` +
		`{"file":"soon.pem","names":["soon.example.org"],"issuer":"R11","not_after":"` + at(14*day-time.Second) + `","days_left":13,"expires_soon":true,"expired":false},` +
		`{"file":"old.pem","names":[],"issuer":"CN=old,O=nobody","not_after":"` + at(-time.Hour) + `","days_left":-1,"expires_soon":true,"expired":true}],` +
		`"handshakes":{"error":1,"ok":3,"plain_http":0,"rejected":0,"unknown_sni":1}}`
	var got bytes.Buffer
	if err := json.Compact(&got, rawStatus()["tls"]); err != nil || got.String() != want {
		t.Errorf("/v1/status tls (%v):\n got %s\nwant %s", err, got.String(), want)
	}
	if n := testutil.CollectAndCount(e.proxy.metrics.tlsHandshakes); n != 3 {
		t.Errorf("edge_tls_handshakes_total has %d series after /v1/status, want 3 (ok, unknown_sni, error): reading made some", n)
	}

	_, page := fetchPage(t, srv.URL+"/")
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var h2 []string
	rows := map[string][]string{} // the certificates table's rows by file, each cell's text and class
	walk(doc, func(n *html.Node) {
		if n.Data == "h2" {
			h2 = append(h2, text(n))
		}
		if n.Data != "tr" || n.Parent == nil || n.Parent.Data != "tbody" {
			return
		}
		if c, _ := attr(n.Parent.Parent, "class"); c != "certificates" {
			return
		}
		var cells []string
		for c := firstElement(n); c != nil; c = c.NextSibling {
			if c.Type == html.ElementNode {
				cls, _ := attr(c, "class")
				cells = append(cells, text(c)+"/"+cls)
			}
		}
		rows[cells[0]] = cells[1:]
	})
	if got := strings.Join(h2, ","); got != "Summary,Node,Cluster,Certificates,Domains" {
		t.Errorf("h2 = %q, want the Certificates section after Cluster", got)
	}
	date := func(d time.Duration) string { return now.Add(d).UTC().Format(time.DateTime) + " UTC" }
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"api.pem/", []string{"api.example.com, 127.0.0.1/", "edge test CA/", date(90*day) + "/", "90/"}},
		{"edge.pem/", []string{"*.example.net/", "edge test CA/", date(14*day) + "/", "14/"}},
		{"soon.pem/", []string{"soon.example.org/", "R11/", date(14*day-time.Second) + "/bad", "13/bad"}},
		{"old.pem/", []string{"/", "CN=old,O=nobody/", date(-time.Hour) + "/bad", "expired/bad"}},
	} {
		if got := rows[tc.file]; !slices.Equal(got, tc.want) {
			t.Errorf("the page's row of %s = %q, want %q", tc.file, got, tc.want)
		}
	}
}
