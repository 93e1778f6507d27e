package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/proxy"
	"github.com/prometheus/client_golang/prometheus"
)

// adminUnderTest is the real admin router of a proxy running a config file,
// with the real reloader of that file, behind a test server on 127.0.0.1.
// The test drives reloads, as SIGHUP does, so that it can check the
// effect of each at once.
type adminUnderTest struct {
	t     *testing.T
	path  string
	url   string
	proxy *proxy.Proxy
	rl    *reloader
	log   *syncBuffer
}

// newAdminUnderTest starts the admin router for config. loopback says
// whether it behaves as on a loopback listener (Host checked).
func newAdminUnderTest(t *testing.T, config string, loopback bool) *adminUnderTest {
	t.Helper()
	a := &adminUnderTest{t: t, path: filepath.Join(t.TempDir(), "edge.yaml"), log: &syncBuffer{}}
	if err := os.WriteFile(a.path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	table, hash, err := loadConfig(a.path)
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	level := new(slog.LevelVar)
	level.Set(table.LogLevel)
	log := newLogger(a.log, table.LogFormat, level)
	reg := prometheus.NewRegistry()
	a.proxy, err = newProxy(table, hash, a.path, log, reg)
	if err != nil {
		t.Fatalf("newProxy: %v", err)
	}
	t.Cleanup(func() { a.proxy.Close() })
	a.rl = newReloader(a.path, hash, os.Environ(), a.proxy, log, level)
	a.rl.interval = 0 // the test reloads
	var ready atomic.Bool
	ready.Store(true)
	srv := httptest.NewServer(adminRouter(reg, a.proxy, &ready, loopback))
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
}

// reload writes config to the file and reloads it as SIGHUP does.
func (a *adminUnderTest) reload(config string) {
	a.t.Helper()
	if err := os.WriteFile(a.path, []byte(config), 0o600); err != nil {
		a.t.Fatal(err)
	}
	a.rl.reload(true)
}

// do sends a request with Host host ("" for the server's address) and, if
// token is not "", the bearer token; it returns the status and body.
func (a *adminUnderTest) do(method, host, path, token string) (int, string) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp.StatusCode, string(b)
}

// siteConfig is a one-domain configuration with extra top-level YAML.
func siteConfig(extra string) string {
	return extra + `
domains:
  - name: site
    hosts: ["*"]
    respond: {body: "ok"}
    rules:
      - {name: per-ip, limit: 5, period: 1m}
`
}

// TestAdminTokenFollowsReloads: a reload that sets, changes or removes
// admin_token changes at once who gets 401 from /metrics and /v1/*; the
// probes and the status page stay open, the page without data while a
// token is needed; EDGE_ADMIN_TOKEN overrides the file throughout.
func TestAdminTokenFollowsReloads(t *testing.T) {
	type step struct {
		name, token string         // admin_token in the file, "" for none
		want        map[string]int // status by the token presented ("" for none)
	}
	open := map[string]int{"": 200, "one": 200, "two": 200, "env": 200}
	tests := []struct {
		name  string
		env   string
		steps []step
	}{
		{"from the file", "", []step{
			{"no token", "", open},
			{"set", "one", map[string]int{"": 401, "one": 200, "two": 401, "env": 401}},
			{"changed", "two", map[string]int{"": 401, "one": 401, "two": 200, "env": 401}},
			{"removed", "", open},
		}},
		{"EDGE_ADMIN_TOKEN overrides", "env", []step{
			{"no token", "", map[string]int{"": 401, "one": 401, "two": 401, "env": 200}},
			{"set", "one", map[string]int{"": 401, "one": 401, "two": 401, "env": 200}},
			{"removed", "", map[string]int{"": 401, "one": 401, "two": 401, "env": 200}},
		}},
	}
	config := func(token string) string {
		if token == "" {
			return siteConfig("")
		}
		return siteConfig(fmt.Sprintf("admin_token: %q\n", token))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("EDGE_ADMIN_TOKEN", tt.env)
			a := newAdminUnderTest(t, config(tt.steps[0].token), true)
			for i, s := range tt.steps {
				if i > 0 {
					a.reload(config(s.token))
					if n := len(a.proxy.ReloadStatus().Problems); n != 0 {
						t.Fatalf("%s: the reload failed with %d problems:\n%s", s.name, n, a.log.String())
					}
				}
				for presented, want := range s.want {
					for _, path := range []string{"/v1/config", "/metrics", "/v1/status"} {
						if got, _ := a.do("GET", "", path, presented); got != want {
							t.Errorf("%s: GET %s with token %q: got %d, want %d", s.name, path, presented, got, want)
						}
					}
					for _, path := range []string{"/healthz", "/readyz", "/", "/status.js", "/status.css"} {
						if got, _ := a.do("GET", "", path, presented); got != 200 {
							t.Errorf("%s: GET %s with token %q: got %d, want 200", s.name, path, presented, got)
						}
					}
					_, page := a.do("GET", "", "/", presented)
					needed := s.want[""] == 401
					if strings.Contains(page, "per-ip") == needed || strings.Contains(page, `data-token="required"`) != needed {
						t.Errorf("%s: the status page with token %q shows the rules: %v, want %v", s.name, presented, !needed, !needed)
					}
				}
			}
		})
	}
}

// TestAdminHostAllowed: a loopback admin listener answers to IP literals,
// localhost and admin_hosts, ignoring case and port, and to nothing else.
func TestAdminHostAllowed(t *testing.T) {
	extra := []string{"edge-admin.internal"}
	tests := []struct {
		host string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.0.0.1:8077", true},
		{"10.1.2.3:80", true},
		{"[::1]", true},
		{"[::1]:8077", true},
		{"[0:0::1]:8077", true},
		{"localhost", true},
		{"LocalHost:8077", true},
		{"localhost.:8077", true},
		{"edge-admin.internal", true},
		{"EDGE-Admin.Internal:8077", true},

		{"", false},
		{"evil.example", false},
		{"evil.example:8077", false},
		{"localhost.evil.example", false},
		{"127.0.0.1.nip.io", false},
		{"edge-admin.internal.evil.example", false},
		{"admin.internal", false},
		{"127.1", false},
		{"0x7f000001", false},
		{"::1", false},
		{"[::1", false},
		{"[fe80::1%25eth0]", false},
		{"user@127.0.0.1", false},
		{"127.0.0.1:99999", false},
	}
	for _, tt := range tests {
		if got := adminHostAllowed(tt.host, extra); got != tt.want {
			t.Errorf("adminHostAllowed(%q): got %v, want %v", tt.host, got, tt.want)
		}
	}
}

// TestAdminChecksHost: a real edge with its admin listener on 127.0.0.1
// answers 421 to a Host that is not an IP literal, localhost or in
// admin_hosts, on every path, before anything is done: a DELETE of a key
// with such a Host leaves the key in place. admin_hosts takes effect on
// reload.
func TestAdminChecksHost(t *testing.T) {
	path := filepath.Join(t.TempDir(), "edge.yaml")
	config := func(extra string) string {
		return configWithLimit(5, extra)
	}
	if err := os.WriteFile(path, []byte(config("")), 0o600); err != nil {
		t.Fatal(err)
	}
	e := startEdge(t, path)
	admin := e.admin
	_, port, _ := strings.Cut(admin, ":")
	if got := e.get("a.test", "/"); got != 200 {
		t.Fatalf("public GET: got %d, want 200", got)
	}
	do := func(method, host, path string) int {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+admin+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	const key = "/v1/keys/site/per-ip/127.0.0.1"

	if got := do("DELETE", "rebound.example:"+port, key); got != 421 {
		t.Errorf("DELETE with a foreign Host: got %d, want 421", got)
	}
	if got := do("GET", "127.0.0.1:"+port, key); got != 200 {
		t.Errorf("after the refused DELETE, GET the key: got %d, want 200 (still tracked)", got)
	}

	tests := []struct {
		name, method, host, path string
		want                     int
	}{
		{"config, foreign host", "GET", "rebound.example:" + port, "/v1/config", 421},
		{"metrics, foreign host", "GET", "rebound.example:" + port, "/metrics", 421},
		{"readyz, foreign host", "GET", "rebound.example", "/readyz", 421},
		{"healthz, foreign host", "GET", "rebound.example", "/healthz", 421},
		{"unknown path, foreign host", "GET", "rebound.example", "/nope", 421},
		{"status page, foreign host", "GET", "rebound.example:" + port, "/", 421},
		{"status script, foreign host", "GET", "rebound.example:" + port, "/status.js", 421},
		{"status figures, foreign host", "GET", "rebound.example:" + port, "/v1/status", 421},
		{"status page, IPv4 literal", "GET", "127.0.0.1:" + port, "/", 200},
		{"not yet in admin_hosts", "GET", "edge-admin.internal:" + port, "/v1/config", 421},
		{"config, IPv4 literal", "GET", "127.0.0.1:" + port, "/v1/config", 200},
		{"metrics, IPv6 literal", "GET", "[::1]:" + port, "/metrics", 200},
		{"readyz, localhost", "GET", "localhost:" + port, "/readyz", 200},
		{"healthz, localhost without port", "GET", "LOCALHOST", "/healthz", 200},
	}
	for _, tt := range tests {
		if got := do(tt.method, tt.host, tt.path); got != tt.want {
			t.Errorf("%s: %s %s with Host %q: got %d, want %d", tt.name, tt.method, tt.path, tt.host, got, tt.want)
		}
	}

	// admin_hosts takes effect on reload, and so does its removal.
	if err := os.WriteFile(path, []byte(config(`admin_hosts: ["Edge-Admin.internal"]`)), 0o600); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "admin_hosts to take effect", func() bool { return do("GET", "edge-admin.internal:"+port, "/healthz") == 200 })
	if got := do("GET", "rebound.example", "/healthz"); got != 421 {
		t.Errorf("with admin_hosts, an unlisted host: got %d, want 421", got)
	}
	if err := os.WriteFile(path, []byte(config("")), 0o600); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the removal of admin_hosts to take effect", func() bool { return do("GET", "edge-admin.internal", "/healthz") == 421 })

	if got := do("DELETE", "127.0.0.1:"+port, key); got != 204 {
		t.Errorf("DELETE with an IP Host: got %d, want 204", got)
	}
}

// TestAdminOffLoopbackAcceptsAnyHost: a listener that is not on loopback
// is reached by names (Docker, Kubernetes services) and checks no Host.
func TestAdminOffLoopbackAcceptsAnyHost(t *testing.T) {
	a := newAdminUnderTest(t, siteConfig(""), false)
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/v1/config"} {
		if got, _ := a.do("GET", "edge.monitoring.svc.cluster.local:8077", path, ""); got != 200 {
			t.Errorf("GET %s with a service name as Host: got %d, want 200", path, got)
		}
	}
}

// TestReadyzEchoesNoValues: /readyz, open to anyone who reaches the admin
// listener, says that the last reload failed and how many problems it
// found, and nothing else; the problems are in the log and in the
// authenticated /v1/config.
func TestReadyzEchoesNoValues(t *testing.T) {
	const secret = "AnotherSecret"
	tests := []struct {
		name, config string
		want         string
		problems     int
	}{
		{"one problem", siteConfig("admin_token: t0ken\ncluster: {redis: {password: [" + secret + "]}}\n"),
			"ready\nlast reload failed with 1 problem; the previous configuration is running; details in the log and /v1/config\n", 1},
		{"two problems", siteConfig("admin_token: t0ken\nmax_keys: -1\nlog: {level: " + secret + "}\n"),
			"ready\nlast reload failed with 2 problems; the previous configuration is running; details in the log and /v1/config\n", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAdminUnderTest(t, siteConfig("admin_token: t0ken\n"), true)
			a.reload(tt.config)
			code, body := a.do("GET", "", "/readyz", "")
			if code != 200 || body != tt.want {
				t.Errorf("/readyz: got %d %q, want 200 %q", code, body, tt.want)
			}
			code, body = a.do("GET", "", "/v1/config", "t0ken")
			var v struct {
				OK       bool   `json:"last_reload_ok"`
				Error    string `json:"last_reload_error"`
				Problems int    `json:"last_reload_problems"`
			}
			if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil {
				t.Fatalf("/v1/config: %d %v\n%s", code, err, body)
			}
			if v.OK || v.Problems != tt.problems || v.Error == "" {
				t.Errorf("/v1/config: got last_reload_ok=%v last_reload_problems=%d last_reload_error=%q, want false, %d and the problems\n%s",
					v.OK, v.Problems, v.Error, tt.problems, body)
			}
			if !strings.Contains(a.log.String(), "configuration reload failed") {
				t.Errorf("the log lacks the failed reload:\n%s", a.log.String())
			}
			// A good reload clears it.
			a.reload(siteConfig("admin_token: t0ken\n"))
			if _, body := a.do("GET", "", "/readyz", ""); body != "ready\n" {
				t.Errorf("/readyz after a good reload: got %q, want %q", body, "ready\n")
			}
		})
	}
}

// TestReloadWarnsWhenTokenLeavesAdminExposed: a reload that removes the
// token of an admin listener off loopback logs the same warning as a start.
func TestReloadWarnsWhenTokenLeavesAdminExposed(t *testing.T) {
	const warning = "admin listener is not on loopback and has no token"
	t.Setenv("EDGE_ADMIN_TOKEN", "")
	tests := []struct {
		name, listen string
		warn         bool
	}{
		{"all interfaces", "0.0.0.0:19090", true},
		{"loopback", "127.0.0.1:19090", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAdminUnderTest(t, siteConfig(fmt.Sprintf("admin_listen: %q\nadmin_token: t0ken\n", tt.listen)), false)
			a.reload(siteConfig(fmt.Sprintf("admin_listen: %q\nadmin_token: t0ken\nmax_keys: 500\n", tt.listen)))
			if strings.Contains(a.log.String(), warning) {
				t.Fatalf("warned while a token is set:\n%s", a.log.String())
			}
			a.reload(siteConfig(fmt.Sprintf("admin_listen: %q\n", tt.listen)))
			if got := strings.Contains(a.log.String(), warning); got != tt.warn {
				t.Errorf("after the reload that removed the token: warned %v, want %v:\n%s", got, tt.warn, a.log.String())
			}
		})
	}
}

// TestAdminDrainTokenHostAndOrigin: the drain endpoints are behind the
// admin API's rules (the token, the Host check of a loopback listener)
// and refuse a browser's cross-origin POST; a drain made through them
// survives a reload of the file, as SIGHUP makes it, not a restart.
func TestAdminDrainTokenHostAndOrigin(t *testing.T) {
	const token = "drain-token-0123456789"
	config := func(weight int) string {
		return fmt.Sprintf(`admin_token: %s
domains:
  - name: app
    hosts: [app.example.com]
    origins: [{url: "http://10.0.0.1:8080", weight: %d}, {url: "http://10.0.0.2:8080"}]
`, token, weight)
	}
	a := newAdminUnderTest(t, config(1), true)
	const drain = "/v1/origins/app/drain?server=http://10.0.0.2:8080"
	send := func(method, host, tok string, hdr map[string]string) int {
		t.Helper()
		req, _ := http.NewRequest(method, a.url+drain, nil)
		if host != "" {
			req.Host = host
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	self := strings.TrimPrefix(a.url, "http://")
	tests := []struct {
		name, method, host, token string
		hdr                       map[string]string
		want                      int
	}{
		{"no token", "POST", "", "", nil, 401},
		{"wrong token", "POST", "", "not-the-token", nil, 401},
		{"foreign host", "POST", "rebound.example", token, nil, 421},
		{"cross-site fetch", "POST", "", token, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"same-site page of another port", "POST", "", token, map[string]string{"Sec-Fetch-Site": "same-site"}, 403},
		{"foreign Origin", "POST", "", token, map[string]string{"Origin": "http://evil.example"}, 403},
		{"GET", "GET", "", token, nil, 405},
		{"the status page's fetch", "POST", "", token, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://" + self}, 200},
		{"curl", "POST", "localhost", token, nil, 200},
	}
	for _, tt := range tests {
		if got := send(tt.method, tt.host, tt.token, tt.hdr); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
	}
	// drained reports whether 10.0.0.2 alone is drained, and the weight of
	// 10.0.0.1 (what the reload changes).
	drained := func() (bool, int) {
		t.Helper()
		st, body := a.do("GET", "", "/v1/origins", token)
		var v struct {
			Domains []struct {
				Servers []struct {
					Weight  int  `json:"weight"`
					Drained bool `json:"drained"`
				} `json:"servers"`
			} `json:"domains"`
		}
		if err := json.Unmarshal([]byte(body), &v); st != 200 || err != nil || len(v.Domains) != 1 || len(v.Domains[0].Servers) != 2 {
			t.Fatalf("GET /v1/origins: %d %v\n%s", st, err, body)
		}
		return v.Domains[0].Servers[1].Drained && !v.Domains[0].Servers[0].Drained, v.Domains[0].Servers[0].Weight
	}
	if ok, _ := drained(); !ok {
		t.Fatal("the accepted drains did not drain 10.0.0.2")
	}
	a.reload(config(3))
	if ok, weight := drained(); !ok || weight != 3 {
		t.Errorf("after a reload: 10.0.0.2 drained alone %v, 10.0.0.1's weight %d; want drained, 3 (reloaded)", ok, weight)
	}
	if !strings.Contains(a.log.String(), "origin server drained through the admin API") {
		t.Errorf("the log lacks the drain:\n%s", a.log.String())
	}
	// A restart (a new process of the same file) forgets it.
	a = newAdminUnderTest(t, config(3), true)
	if ok, _ := drained(); ok {
		t.Error("after a restart 10.0.0.2 is still drained")
	}
}
