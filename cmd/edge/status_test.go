//go:build unix

package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgerate/edge/certs"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/proxy"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/html"
)

var update = flag.Bool("update", false, "rewrite docs/status.png, the screenshot docs/operations.md shows")

// statusConfig runs three domains: one with two rules, one a static
// response, and one that sheds every request to /batch (a sheddable
// request finds no slot with sheddable_share 0) and limits the rest with a
// token bucket; admin_token is set when token is not "".
func statusConfig(origin, token string) string {
	cfg := `
listen: "127.0.0.1:0"
admin_listen: "127.0.0.1:1"
pop: fra-1
origin: "` + origin + `"
client_ip:
  trusted_proxies: ["127.0.0.1"]
domains:
  - name: api
    hosts: [api.example.com]
    rules:
      - name: per-ip
        limit: 20
        period: 10s
      - name: login
        match: {path_prefix: /login}
        limit: 3
        period: 1m
        key: [ip, "header:X-User"]
  - name: www
    hosts: [www.example.com]
    respond: {status: 200, body: "hello"}
  - name: shop
    hosts: [shop.example.com]
    shed: {max_in_flight: 10, sheddable_share: 0}
    priorities:
      - match: {path_prefix: /batch}
        class: sheddable
    rules:
      - name: bucket
        algorithm: token_bucket
        limit: 20
        period: 10s
        burst: 40
`
	if token != "" {
		cfg += "admin_token: " + token + "\n"
	}
	return cfg
}

// seenRequest is a request the admin listener received from the browser.
type seenRequest struct {
	method, path, auth string
	status             int
	query              string
}

// statusUnderTest is edge's proxy and real admin router (on a loopback
// listener, so the Host check runs), with traffic applied and sampled as
// the recorder does once a second, and a harness page: the status page
// with a script that answers the token form and clicks a reset button, as
// an operator would.
type statusUnderTest struct {
	url  string
	mu   sync.Mutex
	seen []seenRequest
}

func (s *statusUnderTest) requests() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenRequest(nil), s.seen...)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// harness answers the token form with token and clicks the reset button of
// key, once each; the page's confirmation is accepted, and its text kept
// in the body's data-confirmed; data-row keeps the key its row shows and
// data-buttons how many reset buttons lay outside the viewport
// before the click. With hide set, it
// hides the tab instead, once the page has rendered.
const harness = `<script>
window.confirm = text => { document.body.dataset.confirmed = text; return true; };
const hide = %t;
const poll = setInterval(() => {
  if (hide && document.getElementById('h-node')) {
    Object.defineProperty(document, 'hidden', { get: () => true });
    document.dispatchEvent(new Event('visibilitychange'));
    clearInterval(poll);
    return;
  }
  const input = document.getElementById('token');
  if (input && !document.body.dataset.asked) {
    document.body.dataset.asked = 'yes';
    input.value = %q;
    input.form.requestSubmit();
  }
  const b = document.querySelector('button.reset[data-key=%q]');
  if (b && !document.body.dataset.clicked) {
    const all = [...document.querySelectorAll('button.reset')];
    const outside = all.filter(e => { const r = e.getBoundingClientRect(); return r.left < 0 || r.right > innerWidth; });
    document.body.dataset.buttons = all.length + ' buttons, ' + outside.length + ' outside the viewport';
    document.body.dataset.row = b.closest('tr').cells[0].textContent;
    document.body.dataset.clicked = b.getAttribute('aria-label');
    b.click();
    clearInterval(poll);
  }
}, 100);
</script>`

func newStatusUnderTest(t *testing.T, token string, hide, tls bool) *statusUnderTest {
	t.Helper()
	return startStatus(t, statusSetup{token: token, hide: hide, click: "203.0.113.7", tls: tls})
}

// statusSetup is what a status page test varies: the admin token, whether
// the harness hides the tab, the key whose reset button it clicks, logins
// sent after the usual traffic, each five times, over login's limit, and
// whether edge serves TLS (statusTLS).
type statusSetup struct {
	token  string
	hide   bool
	click  string
	logins []login
	tls    bool
}

// statusTLS is the tls section of a status page test that serves TLS:
// api.pem (api.example.com and 127.0.0.1, 90 days) and soon.pem
// (soon.example.org, 5 days: highlighted), written by serveStatusTLS.
const statusTLS = `
tls:
  listen: "127.0.0.1:0"
  certificates:
    - {cert_file: api.pem, key_file: api.key}
    - {cert_file: soon.pem, key_file: soon.key}
`

// serveStatusTLS binds the HTTPS listener of table for p, as edge does
// (tlsSocket, which tells p the certificates), runs its handshakes until
// the test ends, and makes three: one for a name covered (ok), one for a
// name no certificate covers (unknown_sni) and plain HTTP (plain_http),
// which reg counts.
func serveStatusTLS(t *testing.T, path string, table *rules.Table, p *proxy.Proxy, reg *prometheus.Registry) {
	t.Helper()
	set, err := loadCertificates(path, table)
	must(t, err)
	sock, _, _, err := tlsSocket(table, set, p, nil, nil, "", "", nil)
	must(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := sock.Listener.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				if res, err := sock.Stages[0](c); err == nil {
					res.Conn.Close()
				}
				c.Close()
			})
		}
	})
	t.Cleanup(func() {
		sock.Listener.Close()
		wg.Wait()
	})
	addr := sock.Listener.Addr().String()
	for _, name := range []string{"api.example.com", "unknown.example"} {
		c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		must(t, err)
		c.Close()
	}
	c, err := net.Dial("tcp", addr)
	must(t, err)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	io.Copy(io.Discard, c) // answered 400, then closed
	c.Close()
	// A handshake is counted as the server ends it, which may be after
	// the client's end.
	wait.For(t, 10*time.Second, "the three handshakes to be counted", func() bool {
		n, err := testutil.GatherAndCount(reg, "edge_tls_handshakes_total")
		return err == nil && n == 3
	})
}

// login is a client and the X-User it logs in as.
type login struct{ client, user string }

func startStatus(t *testing.T, setup statusSetup) *statusUnderTest {
	t.Helper()
	token := setup.token
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond) // a latency to show
		io.WriteString(w, "ok")
	}))
	t.Cleanup(origin.Close)
	dir := t.TempDir()
	path := filepath.Join(dir, "edge.yaml")
	cfg := statusConfig(origin.URL, token)
	if setup.tls {
		ca := newTestCA(t, dir)
		ca.issue(t, dir, "api", 90*24*time.Hour, "api.example.com", "127.0.0.1")
		ca.issue(t, dir, "soon", 5*24*time.Hour, "soon.example.org")
		cfg += statusTLS
	}
	p, table, reg := statusProxy(t, path, cfg)
	if setup.tls {
		serveStatusTLS(t, path, table, p, reg)
	}
	applyTraffic(t, p, setup.logins)
	// With TLS, one name of tls.acme beside the files' certificates.
	if setup.tls {
		until := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
		p.SetACMEStatus(func() []certs.ManagedInfo {
			return []certs.ManagedInfo{{Name: "www.example.com", State: certs.ManagedValid, NotAfter: until, NextRenewal: until.Add(-30 * 24 * time.Hour)}}
		})
	}

	var ready atomic.Bool
	ready.Store(true)
	return serveHarness(t, adminRouter(reg, p, &ready, true), fmt.Sprintf(harness, setup.hide, token, setup.click))
}

// statusProxy writes cfg to path and runs a proxy of it until the test
// ends, with its table and registry.
func statusProxy(t *testing.T, path, cfg string) (*proxy.Proxy, *rules.Table, *prometheus.Registry) {
	t.Helper()
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	table, hash, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	p, err := newProxy(table, hash, path, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, table, reg
}

// serveHarness serves admin, an admin router, on 127.0.0.1, recording the
// requests for /v1/*, with /harness: the status page with script added
// at the end of its body.
func serveHarness(t *testing.T, admin http.Handler, script string) *statusUnderTest {
	t.Helper()
	s := &statusUnderTest{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/harness" {
			rec := httptest.NewRecorder()
			admin.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/", nil))
			page := strings.Replace(rec.Body.String(), "</body>", script+"</body>", 1)
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, page)
			return
		}
		rw := &statusRecorder{ResponseWriter: w, status: 200}
		admin.ServeHTTP(rw, r)
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			s.mu.Lock()
			s.seen = append(s.seen, seenRequest{r.Method, r.URL.EscapedPath(), r.Header.Get("Authorization"), rw.status, r.URL.RawQuery})
			s.mu.Unlock()
		}
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// applyTraffic sends 40 seconds of requests through p, sampling its
// counters after each second as RunRecorder does (on a clock of its own):
// a few clients under per-ip's limit, one over it (203.0.113.7), a login
// over its limit, the static domain, and to shop 36 requests of one client
// (198.51.100.99: of the bucket's 40 tokens it has about 4 left, and 2
// more each second of real time) and 8 shed; then each of logins five
// times.
func applyTraffic(t *testing.T, p *proxy.Proxy, logins []login) {
	t.Helper()
	public := httptest.NewServer(p)
	defer public.Close()
	send := func(host, path, xff, user string) {
		req, _ := http.NewRequest("GET", public.URL+path, nil)
		req.Host = host
		req.Header.Set("X-Forwarded-For", xff)
		if user != "" {
			req.Header.Set("X-User", user)
		}
		resp, err := public.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	start := time.Now().Add(-40 * time.Second)
	p.Record(start)
	for i := range 40 {
		for c := range 2 + i%4 {
			send("api.example.com", "/", "198.51.100."+strconv.Itoa(i%7*4+c), "")
		}
		for range 3 + i%3 {
			send("api.example.com", "/", "203.0.113.7", "")
		}
		if i%5 == 0 {
			send("api.example.com", "/login", "192.0.2.44", "bob")
			send("www.example.com", "/", "192.0.2.1", "")
			send("shop.example.com", "/batch", "192.0.2.9", "")
		}
		if i%10 != 0 {
			send("shop.example.com", "/", "198.51.100.99", "")
		}
		p.Record(start.Add(time.Duration(i+1) * time.Second))
	}
	for _, l := range logins {
		for range 5 {
			send("api.example.com", "/login", l.client, l.user)
		}
	}
}

// chromium runs headless Chromium with args and returns its standard
// output, or skips the test when Chromium is not installed. It is killed,
// with the processes it started, after 60 s at most.
func chromium(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium; .ci/run installs it): the page is not checked in a browser")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=8000"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	// Its own process group, so that its renderer and helpers are killed
	// with it, by the group of the PID it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // anything left of the group
	}
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// dom is the page Chromium rendered, parsed.
type dom struct{ root *html.Node }

func parseDOM(t *testing.T, s string) dom {
	t.Helper()
	root, err := html.Parse(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return dom{root}
}

func (d dom) each(f func(*html.Node)) {
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			f(n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(d.root)
}

func nodeText(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.TrimSpace(b.String())
}

func nodeAttr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// texts returns the text of every element named tag.
func (d dom) texts(tag string) []string {
	var out []string
	d.each(func(n *html.Node) {
		if n.Data == tag {
			out = append(out, nodeText(n))
		}
	})
	return out
}

// row returns the cells' text of the row headed head in the table whose
// caption is caption.
func (d dom) row(caption, head string) []string {
	var out []string
	d.each(func(n *html.Node) {
		if n.Data != "tr" || out != nil {
			return
		}
		th := n.FirstChild
		for th != nil && th.Type != html.ElementNode {
			th = th.NextSibling
		}
		table := n.Parent.Parent
		if th == nil || th.Data != "th" || nodeText(th) != head || table == nil {
			return
		}
		for c := table.FirstChild; c != nil; c = c.NextSibling {
			if c.Data == "caption" && nodeText(c) == caption {
				for td := th; td != nil; td = td.NextSibling {
					if td.Type == html.ElementNode {
						out = append(out, nodeText(td))
					}
				}
			}
		}
	})
	return out
}

// bucketTokens reports whether s says a token bucket of burst 40 holds
// fewer than 40 tokens: "4.20 tokens of 40".
func bucketTokens(s string) bool {
	n, ok := strings.CutSuffix(s, " tokens of 40")
	v, err := strconv.ParseFloat(n, 64)
	return ok && err == nil && v >= 0 && v < 40
}

func positive(s string) bool {
	v, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
	return err == nil && v > 0
}

// TestStatusPageInBrowser loads the status page in headless Chromium from
// edge's admin router with traffic applied, lets its script read the admin
// API, and checks what it rendered; then it checks the request the reset
// button sent. With a token the page asks for it first and sends it as a
// bearer token on every request. Serving TLS, it lists the certificates,
// one expiring soon highlighted, and the handshakes by result. With
// -update it writes the screenshot docs/operations.md shows.
func TestStatusPageInBrowser(t *testing.T) {
	tests := []struct {
		name, token string
		tls         bool
	}{
		{"no token", "", false},
		{"token", "s3cret-token", false},
		{"tls", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStatusUnderTest(t, tc.token, false, tc.tls)
			out := chromium(t, "--dump-dom", s.url+"/harness")
			d := parseDOM(t, out)
			defer func() {
				if t.Failed() {
					t.Logf("the page as rendered:\n%s", out)
				}
			}()
			body := d.root
			d.each(func(n *html.Node) {
				if n.Data == "body" {
					body = n
				}
			})
			if got := nodeAttr(body, "data-asked"); (got == "yes") != (tc.token != "") {
				t.Errorf("the page asked for a token: %q, want %v", got, tc.token != "")
			}
			if got, want := nodeAttr(body, "data-clicked"), "Reset key 203.0.113.7 of rule per-ip"; got != want {
				t.Errorf("clicked %q, want the button labelled %q", got, want)
			}
			h2 := "Summary,Node,Cluster,Domains"
			if tc.tls {
				h2 = "Summary,Node,Cluster,Certificates,Domains"
				checkCertificatesRendered(t, d)
			}
			checks := []struct {
				name      string
				got, want string
			}{
				{"h2", strings.Join(d.texts("h2"), ","), h2},
				{"h3", strings.Join(d.texts("h3"), ","), "api,www,shop"},
				{"h4", strings.Join(d.texts("h4"), ","), "Top talkers of per-ip,Top talkers of login,Top talkers of bucket"},
			}
			for _, c := range checks {
				if c.got != c.want {
					t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
				}
			}
			if r, want := d.row("Names obtained by ACME", "www.example.com"), []string{"www.example.com", "valid",
				"2027-03-01 12:00:00 UTC", "2027-01-30 12:00:00 UTC", "–"}; tc.tls && !slices.Equal(r, want) {
				t.Errorf("the ACME name's row = %q, want %q", r, want)
			}
			if r := d.row("Rules of api", "per-ip"); len(r) != 9 || r[1] != "sliding_window" || r[2] != "20 per 10s" || !positive(r[8]) {
				t.Errorf("per-ip row = %q, want sliding_window, 20 per 10s and refused requests above 0", r)
			}
			if r := d.row("Rules of api", "login"); len(r) != 9 || r[3] != "path /login…; headers blocked" {
				t.Errorf("login row = %q, want its conditions: path /login…; headers blocked", r)
			}
			// The shed requests, in the summary and shop's figures; the
			// bucket in its own terms, per rule and per key.
			if r := d.row("Domains at a glance", "shop"); len(r) != 7 || r[1] != "shop.example.com" || r[4] != "8" || r[5] != "none" {
				t.Errorf("shop's summary row = %q, want shop.example.com, 8 shed, no other answers", r)
			}
			if r := d.row("Domains at a glance", "api"); len(r) != 7 || r[4] != "0" || !positive(r[3]) {
				t.Errorf("api's summary row = %q, want none shed and refused requests per second", r)
			}
			if r := d.row("Requests of shop", "Answered shed"); len(r) != 3 || r[2] != "8" {
				t.Errorf("shop's shed row = %q, want 8 since start", r)
			}
			if r := d.row("Rules of shop", "bucket"); len(r) != 9 || r[1] != "token_bucket" || r[2] != "burst 40, refills 20 per 10s (2.00/s)" {
				t.Errorf("bucket row = %q, want token_bucket, burst 40, refills 20 per 10s (2.00/s)", r)
			}
			if r := d.row("Heaviest keys of shop/bucket, as this node saw them", "198.51.100.99"); len(r) != 6 || !bucketTokens(r[1]) {
				t.Errorf("bucket's top talker row = %q, want 198.51.100.99 with fewer than 40 tokens of 40", r)
			}
			var link string
			d.each(func(n *html.Node) {
				if n.Data == "a" && nodeText(n) == "shop" {
					link = nodeAttr(n, "href")
				}
			})
			if link != "#d2" {
				t.Errorf("the summary links shop to %q, want #d2, its section", link)
			}
			if r := d.row("Requests of api", "Refused"); len(r) != 3 || !positive(r[2]) {
				t.Errorf("api's refused row = %q, want a total above 0", r)
			}
			if r := d.row("Requests of www", "Allowed"); len(r) != 3 || r[2] != "8" {
				t.Errorf("www's allowed row = %q, want 8 since start", r)
			}
			// 203.0.113.7 was refused most: a top talker, its reset done
			// before the dump, so the list is read once more after it.
			if r := d.row("Heaviest keys of api/login, as this node saw them", "192.0.2.44|bob"); len(r) != 6 || !positive(r[3]) {
				t.Errorf("login's top talker row = %q, want 192.0.2.44|bob with blocked requests", r)
			}
			var deletes []seenRequest
			for _, r := range s.requests() {
				if tc.token != "" && r.auth != "Bearer "+tc.token {
					t.Errorf("%s %s sent Authorization %q, want the bearer token", r.method, r.path, r.auth)
				}
				if tc.token == "" && r.auth != "" {
					t.Errorf("%s %s sent Authorization %q without a token", r.method, r.path, r.auth)
				}
				if r.method == "DELETE" {
					deletes = append(deletes, r)
				}
			}
			if len(deletes) != 1 || deletes[0].path != "/v1/keys/api/per-ip/203.0.113.7" || deletes[0].status != http.StatusNoContent {
				t.Errorf("DELETE requests = %+v, want one of /v1/keys/api/per-ip/203.0.113.7 answered 204", deletes)
			}
			// Loaded, refreshed after the reset, and again 5 s later.
			if n := countRequests(s.requests(), "/v1/config"); n < 3 {
				t.Errorf("GET /v1/config %d times in 8 s, want at least 3", n)
			}
		})
	}
}

// checkCertificatesRendered checks the Certificates section of a page
// serveStatusTLS's edge rendered: each certificate with its names, issuer
// and days left, soon.pem's expiry highlighted and api.pem's not, and the
// handshakes by result.
func checkCertificatesRendered(t *testing.T, d dom) {
	t.Helper()
	const caption = "Certificates the HTTPS listener serves"
	if r := d.row(caption, "api.pem"); len(r) != 5 || r[1] != "api.example.com, 127.0.0.1" || r[2] != "edge test CA" ||
		!strings.HasSuffix(r[3], " UTC") || r[4] != "89" {
		t.Errorf("api.pem's row = %q, want its names, issuer edge test CA, its expiry and 89 days left", r)
	}
	if r := d.row(caption, "soon.pem"); len(r) != 5 || r[1] != "soon.example.org" || r[4] != "4" {
		t.Errorf("soon.pem's row = %q, want soon.example.org and 4 days left", r)
	}
	// The days left cell of each: highlighted within 14 days only.
	classes := map[string]string{}
	d.each(func(n *html.Node) {
		if n.Data == "td" && n.Parent != nil && n.Parent.LastChild == n {
			if th := n.Parent.FirstChild; th != nil && strings.HasSuffix(nodeText(th), ".pem") {
				classes[nodeText(th)] = nodeAttr(n, "class")
			}
		}
	})
	if classes["soon.pem"] != "bad" || classes["api.pem"] != "" {
		t.Errorf("days left highlighted: %q, want soon.pem's only (class bad)", classes)
	}
	for result, want := range map[string]string{"ok": "1", "unknown_sni": "1", "plain_http": "1", "rejected": "0", "error": "0"} {
		if r := d.row("TLS handshakes since start", result); len(r) != 2 || r[1] != want {
			t.Errorf("handshakes row %s = %q, want %s", result, r, want)
		}
	}
}

// TestStatusPageHostileKeys: the page shows a key's control and bidi
// characters percent-encoded, in its row and its reset confirmation, so
// that U+202E cannot make a key read as another; it cuts a long key
// after 80 characters (the whole in its title), so that the rows' figures
// and reset buttons stay in view; and the reset still names the key.
func TestStatusPageHostileKeys(t *testing.T) {
	bidi := login{"203.0.113.5", "\u202eevil/live"}
	long := login{"203.0.113.6", strings.Repeat("x", 8000)}
	s := startStatus(t, statusSetup{click: bidi.client + "|" + bidi.user, logins: []login{bidi, long}})
	out := chromium(t, "--window-size=1280,800", "--dump-dom", s.url+"/harness")
	d := parseDOM(t, out)
	defer func() {
		if t.Failed() {
			t.Logf("the page as rendered:\n%.20000s", out)
		}
	}()
	const caption = "Heaviest keys of api/login, as this node saw them"
	bidiText := "203.0.113.5|%E2%80%AEevil/live"
	longText := "203.0.113.6|" + long.user
	longShown := longText[:80] + "…"
	if r := d.row(caption, longShown); len(r) != 6 || !positive(r[3]) {
		t.Errorf("the long key's row = %.200q, want it headed by its first 80 characters and …, with blocked requests", r)
	}
	var title string
	d.each(func(n *html.Node) {
		if n.Data == "code" && nodeText(n) == longShown {
			title = nodeAttr(n, "title")
		}
	})
	if title != longText {
		t.Errorf("the long key's title is %d characters (%.40q…), want its whole text (%d)", len(title), title, len(longText))
	}
	var body *html.Node
	d.each(func(n *html.Node) {
		if n.Data == "body" {
			body = n
		}
	})
	checks := []struct{ name, got, want string }{
		// Before the click: per-ip's 203.0.113.7, login's bob, the bidi
		// key and the long key, and bucket's 198.51.100.99.
		{"reset buttons", nodeAttr(body, "data-buttons"), "5 buttons, 0 outside the viewport"},
		{"clicked row", nodeAttr(body, "data-row"), bidiText},
		{"clicked", nodeAttr(body, "data-clicked"), "Reset key " + bidiText + " of rule login"},
		{"confirmation", nodeAttr(body, "data-confirmed"),
			"Reset key " + bidiText + " of api/login? Its counters and any mitigation are forgotten."},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, c.got, c.want)
		}
	}
	var deletes []seenRequest
	for _, r := range s.requests() {
		if r.method == "DELETE" {
			deletes = append(deletes, r)
		}
	}
	if want := "/v1/keys/api/login/203.0.113.5%7C%E2%80%AEevil%2Flive"; len(deletes) != 1 || deletes[0].path != want || deletes[0].status != http.StatusNoContent {
		t.Errorf("DELETE requests = %+v, want one of %s answered 204", deletes, want)
	}
}

func countRequests(seen []seenRequest, path string) int {
	n := 0
	for _, r := range seen {
		if r.method == "GET" && r.path == path {
			n++
		}
	}
	return n
}

// TestStatusPagePausedWhenHidden: once the tab is hidden the page stops
// reading the admin API.
func TestStatusPagePausedWhenHidden(t *testing.T) {
	s := newStatusUnderTest(t, "", true, false)
	d := parseDOM(t, chromium(t, "--dump-dom", s.url+"/harness"))
	if n := countRequests(s.requests(), "/v1/config"); n != 1 {
		t.Errorf("GET /v1/config %d times in 8 s with the tab hidden after the first, want 1", n)
	}
	var note string
	d.each(func(n *html.Node) {
		if nodeAttr(n, "id") == "note" {
			note = nodeText(n)
		}
	})
	if note != "Paused while this tab is hidden." {
		t.Errorf("note = %q, want the pause said", note)
	}
}

// TestStatusScreenshot writes docs/status.png with -update: the page at
// 1280×800 after traffic. Without -update it does nothing; CI never
// rewrites the file.
func TestStatusScreenshot(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite docs/status.png")
	}
	s := newStatusUnderTest(t, "", false, false)
	out, err := filepath.Abs("../../docs/status.png")
	if err != nil {
		t.Fatal(err)
	}
	chromium(t, "--hide-scrollbars", "--window-size=1280,800", "--screenshot="+out, s.url+"/")
	if st, err := os.Stat(out); err != nil || st.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v", out, err)
	}
}
