package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
	"go.yaml.in/yaml/v4"
)

// The tests here run edge's check listener behind the real proxies of
// docs/beside.md, with its own snippets:
// each proxy, started on a free loopback port with its files in a
// temporary directory, stands in front of a test origin and asks edge,
// which runs configs/check.yaml in-process.

// besideSnippet returns the first ```lang block of docs/beside.md's
// section sub.
func besideSnippet(t *testing.T, sub, lang string) string {
	t.Helper()
	s := docSection(t, "docs/beside.md", sub)
	_, block, ok := strings.Cut(s, "\n```"+lang+"\n")
	if !ok {
		t.Fatalf("docs/beside.md's %q section has no ```%s block", sub, lang)
	}
	block, _, ok = strings.Cut(block, "\n```\n")
	if !ok {
		t.Fatalf("docs/beside.md's %q section: unterminated ```%s block", sub, lang)
	}
	return block + "\n"
}

// replaceOnce replaces old, which must occur in s exactly once, by new.
func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("want %q exactly once, found it %d times in:\n%s", old, n, s)
	}
	return strings.Replace(s, old, new, 1)
}

// startCheckEdge runs configs/check.yaml in-process with its listeners on
// free ports, with deny_status 403 (for nginx) or, without forNginx, the
// line left out (429, for Caddy and Traefik) as the file's comment says.
// It returns the check listener's address; edge stops when the test ends.
func startCheckEdge(t *testing.T, forNginx bool) string {
	t.Helper()
	return startEdgeConfig(t, checkConfig(t, forNginx))
}

// checkConfig returns configs/check.yaml with its listeners on free ports,
// as startCheckEdge runs it.
func checkConfig(t *testing.T, forNginx bool) string {
	t.Helper()
	b, err := os.ReadFile("../../configs/check.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := replaceOnce(t, string(b), `listen: "127.0.0.1:8080"`, `listen: "localhost:0"`)
	cfg = replaceOnce(t, cfg, `admin_listen: "127.0.0.1:8077"`, `admin_listen: "127.0.0.1:0"`)
	cfg = replaceOnce(t, cfg, `  listen: "127.0.0.1:8082"`, `  listen: "127.0.0.1:0"`)
	if !forNginx {
		cfg = replaceOnce(t, cfg, "  deny_status: 403\n", "")
	}
	return cfg
}

// startEdgeConfig runs edge in-process with configuration cfg, which has a
// check listener, and returns that listener's address; edge stops when the
// test ends.
func startEdgeConfig(t *testing.T, cfg string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "check.yaml")
	must(t, os.WriteFile(path, []byte(cfg), 0o644))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	log := newEdgeLog()
	go func() { done <- run(ctx, []string{"-config", path}, io.Discard, log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("edge did not stop within 15s")
		}
	})
	log.waitStarted(t)
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.check == "" {
		t.Fatalf("edge did not log its check listener; log:\n%s", log.b.String())
	}
	return log.check
}

// besideOrigin is the app behind the proxy: it answers "app" and records
// the RateLimit-Policy field each request brought.
func besideOrigin(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var policies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		policies = append(policies, r.Header.Get("RateLimit-Policy"))
		mu.Unlock()
		io.WriteString(w, "app\n")
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), policies...)
	}
}

// proxyBinary returns the path of a proxy's binary, skipping the test
// without it, except in CI (.ci/run installs it).
func proxyBinary(t *testing.T, name string, also ...string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, p := range also {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s not installed: .ci/run must install the %s package", name, name)
	}
	t.Skipf("%s not installed (apt-get install %s)", name, name)
	return ""
}

// freePort returns a loopback port that was free a moment ago, for a
// proxy that cannot report the port it bound.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startProxy runs cmd until the test ends, waits until addr accepts
// connections, and on cleanup stops the process by its PID: SIGTERM,
// then SIGKILL after 5 s. Its output is in the failure message.
func startProxy(t *testing.T, cmd *exec.Cmd, addr string) {
	t.Helper()
	out := &edgeLog{started: make(chan struct{})} // a locked buffer
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(cmd.Path), out)
		}
	})
	wait.For(t, 20*time.Second, filepath.Base(cmd.Path)+" to listen", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("%s exited: %v\n%s", cmd.Path, err, out)
		default:
		}
		return accepting(addr)
	})
}

// besideGet sends GET / with Host api.example.com through the proxy at
// addr.
func besideGet(t *testing.T, addr string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+addr+"/orders?page=2", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "api.example.com"
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// untilRefused sends requests through the proxy at addr: configs/check.yaml
// allows 3 an hour per client, so the first 3 must be allowed, and a 429
// with Retry-After must follow within 2 more (one more is allowed if the
// hour turned between them). check sees each allowed response.
func untilRefused(t *testing.T, addr string, check func(i int, resp *http.Response, body string)) {
	t.Helper()
	for i := range 5 {
		resp, body := besideGet(t, addr)
		if resp.StatusCode == http.StatusTooManyRequests {
			if i < 3 {
				t.Fatalf("request %d refused, want the first 3 allowed", i)
			}
			if ra := resp.Header.Get("Retry-After"); ra == "" || ra == "0" {
				t.Errorf("429 with Retry-After %q, want the seconds to wait", ra)
			}
			return
		}
		if resp.StatusCode != http.StatusOK || body != "app\n" {
			t.Fatalf("request %d: %d %q, want 200 from the app", i, resp.StatusCode, body)
		}
		check(i, resp, body)
	}
	t.Fatal("no 429 after 5 requests, want one after 3")
}

const besidePolicy = `"per-ip";q=3;w=3600`

// TestBesideNginx runs docs/beside.md's nginx server block, wrapped in a main
// configuration that keeps nginx in the foreground, in one process, with
// its files in a temporary directory.
func TestBesideNginx(t *testing.T) {
	check := startCheckEdge(t, true)
	origin, _ := besideOrigin(t)
	addr := startBesideNginx(t, besideSnippet(t, "nginx", "nginx"), check, origin.URL)

	untilRefused(t, addr, func(i int, resp *http.Response, _ string) {
		if got := resp.Header.Get("RateLimit-Policy"); got != besidePolicy {
			t.Errorf("request %d: RateLimit-Policy %q, want %q", i, got, besidePolicy)
		}
		if got, want := resp.Header.Get("RateLimit"), fmt.Sprintf(`"per-ip";r=%d;`, 2-i); !strings.HasPrefix(got, want) {
			t.Errorf("request %d: RateLimit %q, want %s...", i, got, want)
		}
	})
}

// TestBesideNginxCannotAnswer: behind docs/beside.md's nginx snippet, a question
// edge cannot answer (a host no domain claims, a target its screen
// refuses) has edge's deny_status as a refusal does, and the snippet tells
// them apart by X-Edge-Answer: the client gets 500 and the snippet's text
// naming the answer, not a 429 for a limit nobody reached; neither counts,
// and a refusal stays a 429.
func TestBesideNginxCannotAnswer(t *testing.T) {
	check := startCheckEdge(t, true)
	origin, _ := besideOrigin(t)
	addr := startBesideNginx(t, besideSnippet(t, "nginx", "nginx"), check, origin.URL)
	tests := []struct {
		name, host, path string
		status           int
		body             string
	}{
		{"misdirected", "nobody.example.com", "/", 500, "edge could not answer: misdirected\n"},
		{"unreadable", "api.example.com", "/a%2Fb", 500, "edge could not answer: unreadable\n"},
	}
	for _, tt := range tests {
		req, err := http.NewRequest("GET", "http://"+addr+tt.path, nil)
		must(t, err)
		req.Host = tt.host
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Do(req)
		must(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || string(b) != tt.body {
			t.Errorf("%s: got %d %q, want %d %q", tt.name, resp.StatusCode, b, tt.status, tt.body)
		}
	}
	untilRefused(t, addr, func(int, *http.Response, string) {})
}

// nginxClears is what docs/beside.md's nginx snippet says to clear the client's
// own X-Forwarded-* fields, which auth_request would pass on to edge.
const nginxClears = `        # nginx passes the client's own fields on; edge refuses a question
        # with X-Original-* and any of these, so clear them ("" sends none).
        proxy_set_header X-Forwarded-Method "";
        proxy_set_header X-Forwarded-Uri "";
        proxy_set_header X-Forwarded-Host "";
        proxy_set_header X-Forwarded-Proto "";
`

// TestBesideNginxClientForwardedFields: a client behind nginx sends its
// own X-Forwarded-Method, -Uri, -Host or -Proto, which auth_request passes
// on to edge beside the X-Original-* fields nginx sets, with 4 POST /login
// under a login rule of 3 an hour and a domain without rules beside it.
// Behind docs/beside.md's snippet, which clears those fields, the rule holds: 3
// allowed, then 429. Behind an older snippet that does not clear them,
// edge itself answers every such question as unreadable (nginx turns
// edge's 403 into 500, by its X-Edge-Answer), rather than let the client's
// field pick another method, target or domain.
func TestBesideNginxClientForwardedFields(t *testing.T) {
	proxyBinary(t, "nginx", "/usr/sbin/nginx") // skips the test before edge starts without nginx
	cfg := checkConfig(t, true)
	cfg = replaceOnce(t, cfg, "      - name: per-ip\n", "      - name: per-ip\n        match: {methods: [POST], path_prefix: /login}\n")
	cfg += "  - name: open\n    hosts: [\"open.example.com\"]\n    serve: check\n"
	readme := besideSnippet(t, "nginx", "nginx")
	snippets := []struct {
		name, server string
		want         []int
	}{
		{"docs/beside.md", readme, []int{200, 200, 200, 429}},
		{"old", replaceOnce(t, readme, nginxClears, ""), []int{500, 500, 500, 500}},
	}
	for _, sn := range snippets {
		for _, f := range []struct{ field, value string }{
			{"X-Forwarded-Method", "GET"},
			{"X-Forwarded-Uri", "/"},
			{"X-Forwarded-Host", "open.example.com"},
			{"X-Forwarded-Proto", "https"},
		} {
			t.Run(sn.name+"/"+f.field, func(t *testing.T) {
				check := startEdgeConfig(t, cfg)
				origin, _ := besideOrigin(t)
				addr := startBesideNginx(t, sn.server, check, origin.URL)
				var got []int
				for range 4 {
					req, err := http.NewRequest("POST", "http://"+addr+"/login", nil)
					must(t, err)
					req.Host = "api.example.com"
					req.Header.Set(f.field, f.value)
					c := &http.Client{Timeout: 10 * time.Second}
					resp, err := c.Do(req)
					must(t, err)
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					got = append(got, resp.StatusCode)
				}
				if !slices.Equal(got, sn.want) {
					t.Errorf("4 POST /login with the client's %s: %s: statuses %v, want %v", f.field, f.value, got, sn.want)
				}
			})
		}
	}
}

// startBesideNginx runs nginx with server, a server block of docs/beside.md's
// shape, on a free port, in front of origin and asking edge's check
// listener at check, wrapped in a main configuration that keeps nginx in
// the foreground, in one process, with its files in a temporary
// directory. It returns nginx's address; nginx stops when the test ends.
func startBesideNginx(t *testing.T, server, check, origin string) string {
	t.Helper()
	bin := proxyBinary(t, "nginx", "/usr/sbin/nginx")
	port := freePort(t)
	server = replaceOnce(t, server, "listen 80;", fmt.Sprintf("listen 127.0.0.1:%d;", port))
	server = replaceOnce(t, server, "http://127.0.0.1:8000;", origin+";")
	server = replaceOnce(t, server, "http://127.0.0.1:8082;", "http://"+check+";")

	dir := t.TempDir()
	conf := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log notice;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
%[2]s}
`, dir, server)
	must(t, os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644))
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	startProxy(t, exec.Command(bin, "-p", dir+"/", "-e", dir+"/error.log", "-c", dir+"/nginx.conf"), addr)
	return addr
}

// TestBesideCaddy runs docs/beside.md's Caddyfile site block for its own
// host, on a free port, with the admin endpoint off and Caddy's files in a
// temporary directory; automatic HTTPS stays on, so that the snippet's
// http:// site is what keeps Caddy from fetching a certificate. Caddy passes edge's fields to the origin on an
// allowed request, and edge's refusal to the client as it is.
func TestBesideCaddy(t *testing.T) {
	bin := proxyBinary(t, "caddy")
	check := startCheckEdge(t, false)
	origin, policies := besideOrigin(t)
	port := freePort(t)
	site := besideSnippet(t, "Caddy", "caddyfile")
	site = replaceOnce(t, site, "\nhttp://api.example.com {", fmt.Sprintf("\nhttp://api.example.com:%d {\n\tbind 127.0.0.1", port))
	site = replaceOnce(t, site, "reverse_proxy 127.0.0.1:8000", "reverse_proxy "+strings.TrimPrefix(origin.URL, "http://"))
	site = replaceOnce(t, site, "forward_auth 127.0.0.1:8082 {", "forward_auth "+check+" {")

	dir := t.TempDir()
	caddyfile := "{\n\tadmin off\n\tstorage file_system " + dir + "/data\n}\n\n" + site
	path := filepath.Join(dir, "Caddyfile")
	must(t, os.WriteFile(path, []byte(caddyfile), 0o644))
	cmd := exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir+"/data", "XDG_CONFIG_HOME="+dir+"/config")
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	startProxy(t, cmd, addr)

	untilRefused(t, addr, func(i int, _ *http.Response, _ string) {})
	for i, got := range policies() {
		if got != besidePolicy {
			t.Errorf("request %d reached the origin with RateLimit-Policy %q, want %q", i, got, besidePolicy)
		}
	}
	// The refusal is edge's own: its body too.
	resp, body := besideGet(t, addr)
	if resp.StatusCode != 429 || !strings.HasPrefix(body, "rate limited: retry in ") {
		t.Errorf("refusal: %d %q, want 429 with edge's body", resp.StatusCode, body)
	}
}

// TestBesideTraefik reproduces the question of docs/beside.md's Traefik
// ForwardAuth middleware from Traefik's documented behaviour: a GET to
// its address with X-Forwarded-Method, -Proto, -Host, -Uri and -For and
// the client's own fields. A 2xx lets the request on with the fields of
// authResponseHeaders copied into it, which edge must send; anything else
// goes to the client as it is, so edge's refusal must be the client's 429.
func TestBesideTraefik(t *testing.T) {
	var dynamic struct {
		HTTP struct {
			Routers map[string]struct {
				Rule        string   `yaml:"rule"`
				Middlewares []string `yaml:"middlewares"`
			} `yaml:"routers"`
			Middlewares map[string]struct {
				ForwardAuth struct {
					Address             string   `yaml:"address"`
					AuthResponseHeaders []string `yaml:"authResponseHeaders"`
				} `yaml:"forwardAuth"`
			} `yaml:"middlewares"`
		} `yaml:"http"`
	}
	must(t, yaml.Unmarshal([]byte(besideSnippet(t, "Traefik", "yaml")), &dynamic))
	router := dynamic.HTTP.Routers["api"]
	if router.Rule != "Host(`api.example.com`)" || len(router.Middlewares) != 1 {
		t.Fatalf("docs/beside.md's router: %+v, want Host(`api.example.com`) through one middleware", router)
	}
	fa := dynamic.HTTP.Middlewares[router.Middlewares[0]].ForwardAuth
	if fa.Address != "http://127.0.0.1:8082/" {
		t.Fatalf("forwardAuth address %q, want configs/check.yaml's check listener", fa.Address)
	}
	check := startCheckEdge(t, false)
	address := strings.Replace(fa.Address, "127.0.0.1:8082", check, 1)

	ask := func() *http.Response {
		req, err := http.NewRequest("GET", address, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = http.Header{
			"X-Forwarded-Method": {"POST"},
			"X-Forwarded-Proto":  {"https"},
			"X-Forwarded-Host":   {"api.example.com"},
			"X-Forwarded-Uri":    {"/orders?page=2"},
			"X-Forwarded-Port":   {"443"},
			"X-Forwarded-Server": {"traefik-1"},
			"X-Real-Ip":          {"203.0.113.7"},
			"X-Forwarded-For":    {"203.0.113.7"},
			"Accept":             {"application/json"},
			"Authorization":      {"Bearer client-token"},
		}
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for i := range 5 {
		resp := ask()
		if resp.StatusCode == http.StatusTooManyRequests {
			if i < 3 {
				t.Fatalf("question %d refused, want the first 3 allowed", i)
			}
			if resp.Header.Get("Retry-After") == "" || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("refusal: Retry-After %q, Content-Type %q; want edge's JSON 429", resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"))
			}
			return
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("question %d: status %d, want 200", i, resp.StatusCode)
		}
		for _, f := range fa.AuthResponseHeaders {
			if resp.Header.Get(f) == "" {
				t.Errorf("question %d: no %s for Traefik to copy to the origin", i, f)
			}
		}
	}
	t.Fatal("no 429 after 5 questions, want one after 3")
}
