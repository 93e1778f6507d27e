package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/proxy"
)

// edgeUnderTest runs edge in-process, on the ports its config's listen
// addresses (publicAnyPort, adminAnyPort) let the kernel choose, with the config at path.
type edgeUnderTest struct {
	t             *testing.T
	public, admin string
	token         string
	stop          func() int
	log           *edgeLog
}

// syncBuffer is a log that a test reads while edge writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startEdge(t *testing.T, path string) *edgeUnderTest {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	e := &edgeUnderTest{t: t, log: newEdgeLog()}
	go func() { done <- run(ctx, []string{"-config", path}, io.Discard, e.log) }()
	var once sync.Once
	code := -1
	e.stop = func() int {
		once.Do(func() {
			cancel()
			select {
			case code = <-done:
			case <-time.After(20 * time.Second):
				t.Error("edge did not stop")
			}
		})
		return code
	}
	t.Cleanup(func() { e.stop() })
	e.public, e.admin = e.log.waitStarted(t)
	return e
}

func (e *edgeUnderTest) get(host, path string) int {
	e.t.Helper()
	req, _ := http.NewRequest("GET", "http://"+e.public+path, nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Errorf("GET %s%s: %v", host, path, err)
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func (e *edgeUnderTest) adminGet(path string) (int, string) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", "http://"+e.admin+path, nil)
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("GET admin %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// configWithLimit is a config of one site with a rule of limit requests
// per 30 days, listening on publicAnyPort and adminAnyPort, with extra top-level keys.
func configWithLimit(limit int, extra string) string {
	return fmt.Sprintf(`
listen: %q
admin_listen: %q
domains:
  - name: site
    hosts: ["*"]
    respond: {body: "ok"}
    rules:
      - {name: per-ip, limit: %d, period: 720h}
%s`, publicAnyPort, adminAnyPort, limit, extra)
}

func loadedHash(t *testing.T, e *edgeUnderTest) string {
	t.Helper()
	code, body := e.adminGet("/v1/config")
	var v struct {
		Hash string `json:"hash"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &v) != nil {
		t.Fatalf("/v1/config: %d %s", code, body)
	}
	return v.Hash
}

// TestReloadOnFileChange covers the ways a config file is replaced: written
// in place, renamed over (atomic save), and swapped behind a symlink as
// Kubernetes does with ConfigMaps; SIGHUP; and an invalid file, which keeps
// the running configuration and is reported by metrics and /readyz.
func TestReloadOnFileChange(t *testing.T) {
	dir := t.TempDir()
	// ConfigMap layout: edge.yaml -> ..data/edge.yaml, ..data -> ..v1
	must(t, os.MkdirAll(filepath.Join(dir, "..v1"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "..v1", "edge.yaml"), []byte(configWithLimit(2, "")), 0o644))
	must(t, os.Symlink("..v1", filepath.Join(dir, "..data")))
	path := filepath.Join(dir, "edge.yaml")
	must(t, os.Symlink(filepath.Join("..data", "edge.yaml"), path))

	e := startEdge(t, path)
	for range 2 {
		e.get("a.test", "/")
	}
	if got := e.get("a.test", "/"); got != 429 {
		t.Fatalf("over limit 2: got %d, want 429", got)
	}
	h1 := loadedHash(t, e)

	// 1. Symlink swap to a config with limit 3: the client's 2 counted
	// requests survive, so exactly one more is allowed.
	must(t, os.MkdirAll(filepath.Join(dir, "..v2"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "..v2", "edge.yaml"), []byte(configWithLimit(3, "")), 0o644))
	must(t, os.Symlink("..v2", filepath.Join(dir, "..data.tmp")))
	must(t, os.Rename(filepath.Join(dir, "..data.tmp"), filepath.Join(dir, "..data")))
	wait.For(t, 10*time.Second, "reload after symlink swap", func() bool { return loadedHash(t, e) != h1 })
	if got := e.get("a.test", "/"); got != 200 {
		t.Errorf("after raising the limit to 3: got %d, want 200 (one more)", got)
	}
	if got := e.get("a.test", "/"); got != 429 {
		t.Errorf("after raising the limit to 3: 4th request got %d, want 429 (counters kept)", got)
	}
	_, body := e.adminGet("/v1/config")
	if !strings.Contains(body, `"rules_changed": [`) || !strings.Contains(body, "site/per-ip") || !strings.Contains(body, `"keys_carried": 1`) {
		t.Errorf("/v1/config does not report the change:\n%s", body)
	}

	// 2. An invalid file: the running config stays; metrics and /readyz say so.
	h2 := loadedHash(t, e)
	must(t, os.WriteFile(filepath.Join(dir, "..v2", "edge.yaml"), []byte(configWithLimit(0, "")), 0o644))
	wait.For(t, 10*time.Second, "the failed reload to be reported", func() bool {
		_, body := e.adminGet("/readyz")
		return strings.Contains(body, "last reload failed")
	})
	// /readyz is open to anyone: it counts the problems; /v1/config names them.
	if _, body = e.adminGet("/readyz"); !strings.Contains(body, "last reload failed with 1 problem;") || strings.Contains(body, "limit") {
		t.Errorf("/readyz: got %q, want the count of problems only", body)
	}
	if _, body = e.adminGet("/v1/config"); !strings.Contains(body, "domains[0] (site).rules[0] (per-ip).limit: must be at least 1, got 0") {
		t.Errorf("/v1/config lacks the problem:\n%s", body)
	}
	_, metrics := e.adminGet("/metrics")
	if !strings.Contains(metrics, `edge_config_reloads_total{pop="local",result="failure"} 1`) ||
		!strings.Contains(metrics, `edge_config_last_reload_successful{pop="local"} 0`) {
		t.Errorf("metrics do not report the failed reload")
	}
	if loadedHash(t, e) != h2 {
		t.Errorf("an invalid config replaced the running one")
	}
	if !strings.Contains(e.log.String(), "configuration reload failed") {
		t.Errorf("log lacks the failure")
	}

	// 3. Atomic rename over the path (an editor's save), fixing the file.
	tmp := filepath.Join(dir, "..v2", "edge.yaml.tmp")
	must(t, os.WriteFile(tmp, []byte(configWithLimit(10, "")), 0o644))
	must(t, os.Rename(tmp, filepath.Join(dir, "..v2", "edge.yaml")))
	wait.For(t, 10*time.Second, "reload after rename", func() bool { return loadedHash(t, e) != h2 })
	if _, body := e.adminGet("/readyz"); strings.Contains(body, "failed") {
		t.Errorf("/readyz still reports a failure after a good reload:\n%s", body)
	}

	// 4. SIGHUP reloads even when nothing changed on disk.
	before := strings.Count(e.log.String(), "configuration reloaded")
	must(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	wait.For(t, 10*time.Second, "SIGHUP reload", func() bool { return strings.Count(e.log.String(), "configuration reloaded") > before })

	if code := e.stop(); code != 0 {
		t.Errorf("exit code %d", code)
	}
}

// TestAdminToken: with a token, /metrics and /v1 need it; probes do not.
func TestAdminToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "edge.yaml")
	must(t, os.WriteFile(path, []byte(configWithLimit(5, `admin_token: "s3cret"`)), 0o644))
	e := startEdge(t, path)
	for _, p := range []string{"/metrics", "/v1/config"} {
		if code, _ := e.adminGet(p); code != 401 {
			t.Errorf("%s without token: %d, want 401", p, code)
		}
	}
	if code, _ := e.adminGet("/healthz"); code != 200 {
		t.Errorf("/healthz without token: %d, want 200", code)
	}
	e.token = "s3cret"
	for _, p := range []string{"/metrics", "/v1/config"} {
		if code, _ := e.adminGet(p); code != 200 {
			t.Errorf("%s with token: %d, want 200", p, code)
		}
	}
	e.token = "wrong"
	if code, _ := e.adminGet("/v1/config"); code != 401 {
		t.Errorf("wrong token: %d, want 401", code)
	}
	// The token never appears in the config view.
	e.token = "s3cret"
	if _, body := e.adminGet("/v1/config"); strings.Contains(body, "s3cret") {
		t.Errorf("/v1/config shows the token")
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8077": true, "[::1]:8077": true, "localhost:8077": true,
		":8077": false, "0.0.0.0:8077": false, "10.0.0.1:8077": false, "bad": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestMetricsPassPromtool runs `promtool check metrics` (Debian package
// prometheus, installed by .ci/run) on a real scrape after traffic of every
// kind and a reload.
func TestMetricsPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not installed: .ci/run must install the prometheus package")
		}
		t.Skip("promtool not installed (apt-get install prometheus)")
	}
	path := filepath.Join(t.TempDir(), "edge.yaml")
	must(t, os.WriteFile(path, []byte(configWithLimit(1, "")), 0o644))
	e := startEdge(t, path)
	e.get("a.test", "/")
	e.get("a.test", "/")
	must(t, os.WriteFile(path, []byte(configWithLimit(2, "")), 0o644))
	h := loadedHash(t, e)
	must(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	wait.For(t, 10*time.Second, "reload", func() bool { return loadedHash(t, e) != h })
	_, body := e.adminGet("/metrics")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	for _, name := range []string{"edge_requests_total", "edge_rule_decisions_total", "edge_blocked_requests_total",
		"edge_tracked_keys", "edge_key_evictions_total", "edge_config_reloads_total",
		"edge_config_last_reload_success_timestamp_seconds", "edge_build_info"} {
		if !strings.Contains(body, "\n"+name) {
			t.Errorf("scrape lacks %s", name)
		}
	}
}

// TestWarnsWhenAdminIsExposed: an admin listener off loopback without a
// token is logged as a warning at start; on loopback it is not.
func TestWarnsWhenAdminIsExposed(t *testing.T) {
	for _, tc := range []struct {
		name, host string
		warn       bool
	}{
		{"all interfaces", "0.0.0.0", true},
		{"loopback", "127.0.0.1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "edge.yaml")
			config := strings.Replace(configWithLimit(5, ""), "admin_listen: "+strconv.Quote(adminAnyPort), "admin_listen: "+strconv.Quote(tc.host+":0"), 1)
			must(t, os.WriteFile(path, []byte(config), 0o644))
			e := startEdge(t, path)
			warned := strings.Contains(e.log.String(), "admin listener is not on loopback")
			if warned != tc.warn {
				t.Errorf("warned = %v, want %v; log:\n%s", warned, tc.warn, e.log.String())
			}
		})
	}
}

// TestReloadRestartRequired: a real reload of a file that changes a
// setting taking effect only at a restart lists exactly that setting in
// restart_required and logs it as a warning. Every such setting has a case.
// tlsKeys are a tls section's listener and certificate (files this test
// never reads: the reloader of newAdminUnderTest serves no TLS).
const tlsKeys = `listen: "127.0.0.1:18443", certificates: [{cert_file: a.pem, key_file: a.key}]`

func TestReloadRestartRequired(t *testing.T) {
	const redis = `cluster: {redis: {addresses: ["127.0.0.1:1"]}}`
	tests := []struct {
		key, from, to string
	}{
		{"listen", "", `listen: "127.0.0.1:18080"`},
		{"admin_listen", "", `admin_listen: "127.0.0.1:19091"`},
		{"check.listen", `check: {listen: "127.0.0.1:18082"}`, `check: {listen: "127.0.0.1:18083"}`},
		{"pop", "", "pop: fra1"},
		{"timeouts.read_header", "", "timeouts: {read_header: 5s}"},
		{"timeouts.read", "", "timeouts: {read: 5s}"},
		{"timeouts.write", "", "timeouts: {write: 5s}"},
		{"timeouts.idle", "", "timeouts: {idle: 5s}"},
		{"max_header_bytes", "", "max_header_bytes: 4096"},
		{"max_connections", "", "max_connections: 500"},
		{"log.format", "", "log: {format: json}"},
		{"cluster.store", redis, `cluster: {store: redis, redis: {addresses: ["127.0.0.1:1"]}}`},
		{"cluster.redis.addresses", "", redis},
		{"cluster.redis.cluster", "", "cluster: {redis: {cluster: true}}"},
		{"cluster.redis.username", "", "cluster: {redis: {username: edge}}"},
		{"cluster.redis.password", "", "cluster: {redis: {password: n3wSecret}}"},
		{"cluster.redis.pool_size", "", "cluster: {redis: {pool_size: 8}}"},
		{"cluster.redis.dial_timeout", "", "cluster: {redis: {dial_timeout: 2s}}"},
		{"cluster.sync", "", "cluster: {sync: batched}"},
		{"cluster.batch_interval", "", "cluster: {batch_interval: 50ms}"},
		{"cluster.budget", "", "cluster: {budget: 10ms}"},
		{"cluster.on_store_failure", "", "cluster: {on_store_failure: open}"},
		{"cluster.heartbeat_interval", "", "cluster: {heartbeat_interval: 2s}"},
		{"cluster.nodes", "cluster: {sync: share, nodes: 3}", "cluster: {sync: share, nodes: 4}"},
		{"cluster.split", "cluster: {sync: share, nodes: 3}", "cluster: {sync: share, nodes: 3, split: poisson}"},
		{"cluster.split_confidence", "cluster: {sync: share, nodes: 3, split: poisson}", "cluster: {sync: share, nodes: 3, split: poisson, split_confidence: 0.99}"},
		{"rls.listen", "", `rls: {listen: "127.0.0.1:18081", config: ["ratelimit/*.yaml"]}`},
		{"tls.listen", "", "tls: {" + tlsKeys + "}"},
		{"tls.default_certificate", "tls: {" + tlsKeys + "}", "tls: {" + tlsKeys + ", default_certificate: a.pem}"},
		{"tls.unknown_sni", "tls: {" + tlsKeys + "}", "tls: {" + tlsKeys + ", unknown_sni: reject}"},
		{"tls.min_version", "tls: {" + tlsKeys + "}", "tls: {" + tlsKeys + ", min_version: 1.3}"},
		{"tls.fingerprint_header", "tls: {" + tlsKeys + "}", "tls: {" + tlsKeys + ", fingerprint_header: X-JA4}"},
		{"tls.http2", "tls: {" + tlsKeys + "}", "tls: {" + tlsKeys + ", http2: false}"},
		{"h2c", "", "h2c: true"},
		{"tls.http3", "tls: {" + tlsKeys + "}", "tls: {" + tlsKeys + ", http3: true}"},
		{"http3.allow_0rtt", "tls: {" + tlsKeys + ", http3: true}", "tls: {" + tlsKeys + ", http3: true}\nhttp3: {allow_0rtt: true}"},
		{"http3.max_concurrent_streams", "tls: {" + tlsKeys + ", http3: true}", "tls: {" + tlsKeys + ", http3: true}\nhttp3: {max_concurrent_streams: 50}"},
		{"http2.max_concurrent_streams", "h2c: true", "h2c: true\nhttp2: {max_concurrent_streams: 50}"},
		{"http2.max_header_bytes", "h2c: true", "h2c: true\nhttp2: {max_header_bytes: 4096}"},
		{"proxy_protocol.listeners", "", "proxy_protocol: {from: [10.0.0.1]}"},
		{"tls.acme.email", "tls: {" + tlsKeys + ", acme: {}}", "tls: {" + tlsKeys + ", acme: {email: ops@example.com}}"},
		{"tls.acme.ca", "tls: {" + tlsKeys + ", acme: {}}", "tls: {" + tlsKeys + ", acme: {ca: \"https://ca.internal/dir\"}}"},
		{"tls.acme.ca_root", "tls: {" + tlsKeys + ", acme: {}}", "tls: {" + tlsKeys + ", acme: {ca_root: ca.pem}}"},
		{"tls.acme.storage", "tls: {" + tlsKeys + ", acme: {}}", "tls: {" + tlsKeys + ", acme: {storage: /var/lib/edge/acme}}"},
		{"tls.acme.challenges", "tls: {" + tlsKeys + ", acme: {}}", "tls: {" + tlsKeys + ", acme: {challenges: [http-01]}}"},
	}
	var keys []string
	for _, tt := range tests {
		keys = append(keys, tt.key)
		t.Run(tt.key, func(t *testing.T) {
			a := newAdminUnderTest(t, siteConfig(tt.from), true)
			a.reload(siteConfig(tt.to))
			if n := len(a.proxy.ReloadStatus().Problems); n != 0 {
				t.Fatalf("the reload failed:\n%s", a.log.String())
			}
			if got := a.proxy.Result().RestartRequired; !slices.Equal(got, []string{tt.key}) {
				t.Errorf("restart_required: got %q, want [%s]", got, tt.key)
			}
			log := a.log.String()
			if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "restart_required=["+tt.key+"]") {
				t.Errorf("the log lacks a warning naming %s:\n%s", tt.key, log)
			}
			if strings.Contains(log, "n3wSecret") {
				t.Errorf("the log shows the password:\n%s", log)
			}
		})
	}
	if want := proxy.RestartRequiredSettings(); !slices.Equal(keys, want) {
		t.Errorf("cases cover %q, want every restart setting, in order: %q", keys, want)
	}
}

// TestReloadAppliesLogLevel: log.level takes effect on reload: lines of
// the new level are written at once.
func TestReloadAppliesLogLevel(t *testing.T) {
	a := newAdminUnderTest(t, siteConfig("log: {level: error}"), true)
	a.reload(siteConfig("log: {level: error}\nmax_keys: 500"))
	if strings.Contains(a.log.String(), "configuration reloaded") {
		t.Fatalf("at level error an info line was written:\n%s", a.log.String())
	}
	a.reload(siteConfig("log: {level: info}"))
	if got := strings.Count(a.log.String(), "configuration reloaded"); got != 1 {
		t.Errorf("after the reload to level info: got %d info lines \"configuration reloaded\", want 1:\n%s", got, a.log.String())
	}
	if got := a.proxy.Result().RestartRequired; len(got) != 0 {
		t.Errorf("restart_required: got %q, want none", got)
	}
}

// TestReloadAppliesShutdownTimeouts: timeouts.shutdown and drain_delay are
// read when a shutdown begins, so a reload changes them.
func TestReloadAppliesShutdownTimeouts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(path, []byte(configWithLimit(5, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	e := startEdge(t, path)
	h := loadedHash(t, e)
	if err := os.WriteFile(path, []byte(configWithLimit(5, "timeouts: {shutdown: 7s, drain_delay: 10ms}")), 0o600); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the reload", func() bool { return loadedHash(t, e) != h })
	if code := e.stop(); code != 0 {
		t.Errorf("exit code %d", code)
	}
	if log := e.log.String(); !strings.Contains(log, "drain_delay=10ms drain_timeout=7s") {
		t.Errorf("the shutdown did not use the reloaded timeouts:\n%s", log)
	}
}

// TestDocsListRestartRequiredSettings: docs/configuration.md's "What a reload changes"
// names exactly the settings that take effect only at a restart (a mapping
// such as `cluster` stands for all its keys), and none of them among the
// keys it says take effect on reload.
func TestDocsListRestartRequiredSettings(t *testing.T) {
	_, para, ok := strings.Cut(docSection(t, "docs/configuration.md", "Configuration reference"), "**What a reload changes.**")
	para, _, _ = strings.Cut(para, "\n\n")
	restartPart, reloadPart, ok2 := strings.Cut(para, "Every other key takes effect on reload")
	if !ok || !ok2 {
		t.Fatal(`docs/configuration.md lacks the paragraph "**What a reload changes.** ... Every other key takes effect on reload"`)
	}
	backticked := regexp.MustCompile("`([^`]+)`")
	covers := func(doc, key string) bool { return key == doc || strings.HasPrefix(key, doc+".") }
	want := proxy.RestartRequiredSettings()
	var named []string
	for _, m := range backticked.FindAllStringSubmatch(restartPart, -1) {
		doc := m[1]
		if doc == "restart_required" || doc == "last_load" || doc == "/v1/config" {
			continue
		}
		named = append(named, doc)
		if !slices.ContainsFunc(want, func(k string) bool { return covers(doc, k) }) {
			t.Errorf("docs/configuration.md lists `%s` as taking effect only at a restart; it takes effect on reload", doc)
		}
	}
	for _, k := range want {
		if !slices.ContainsFunc(named, func(doc string) bool { return covers(doc, k) }) {
			t.Errorf("docs/configuration.md does not list %s among the keys that take effect only at a restart", k)
		}
	}
	for _, m := range backticked.FindAllStringSubmatch(reloadPart, -1) {
		if slices.ContainsFunc(want, func(k string) bool { return covers(m[1], k) }) {
			t.Errorf("docs/configuration.md says `%s` takes effect on reload; it needs a restart", m[1])
		}
	}
}
