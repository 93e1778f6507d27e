package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
)

// TestEveryConfigLoads loads each file in configs/ so that no example can
// rot, and the embedded default.
func TestEveryConfigLoads(t *testing.T) {
	files, err := filepath.Glob("../../configs/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no configs found: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			table, _, err := loadConfig(f)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			// The Lyft files an rls section names load too.
			if rc, err := loadRLS(f, table); err != nil {
				t.Fatalf("%s: rls: %v", f, err)
			} else if rc != nil && len(rc.Warnings) > 0 {
				t.Errorf("%s: rls warnings %q", f, rc.Warnings)
			}
		})
	}
	table, _, err := loadConfig("")
	if err != nil {
		t.Fatalf("embedded default: %v", err)
	}
	if table.Listen != ":8080" || table.AdminListen != "127.0.0.1:8077" {
		t.Errorf("embedded default listens on %q and %q, want :8080 and 127.0.0.1:8077", table.Listen, table.AdminListen)
	}
	if d, ok := table.Lookup("anything.example"); !ok || d.Respond == nil || len(d.Rules) == 0 {
		t.Errorf("embedded default: want a catch-all demo domain with a static response and a rule")
	}
}

func TestCheckFlag(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	two := filepath.Join(dir, "two.yaml")
	none := filepath.Join(dir, "none.yaml")
	for name, content := range map[string]string{
		good: "domains: [{hosts: [\"*\"], respond: {body: ok}, rules: [{name: a, limit: 1, period: 1s}]}]\n",
		bad:  "max_keys: -1\ndomains: [{hosts: [\"*\"], rules: [{name: a, limit: 0, period: 1s}]}]\n",
		two: "domains: [{hosts: [a.example], respond: {body: ok}, rules: [{name: a, limit: 1, period: 1s}, {name: b, limit: 1, period: 1s}]}," +
			" {hosts: [b.example], respond: {body: ok}}]\n",
		none: "domains: [{hosts: [\"*\"], respond: {body: ok}}]\n",
	} {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  []string
	}{
		{"valid", []string{"-check", "-config", good}, 0, "is valid: 1 domain, 1 rule\n", nil},
		{"valid, plurals", []string{"-check", "-config", two}, 0, "is valid: 2 domains, 2 rules\n", nil},
		{"valid, no rules", []string{"-check", "-config", none}, 0, "is valid: 1 domain, 0 rules\n", nil},
		{"embedded default", []string{"-check"}, 0, "(embedded default) is valid", nil},
		{"invalid lists every problem", []string{"-check", "-config", bad}, 1, "", []string{
			"max_keys: must be", "domains[0] (_): no upstream", "domains[0] (_).rules[0] (a).limit: must be at least 1, got 0",
		}},
		{"missing file", []string{"-check", "-config", filepath.Join(dir, "nope.yaml")}, 1, "", []string{"no such file"}},
		{"version", []string{"-version"}, 0, "edge ", nil},
		{"help lists replay", []string{"-h"}, 0, "", []string{"edge replay [flags] LOG...", "-check"}},
		{"bad flag", []string{"-nope"}, 2, "", []string{"flag provided but not defined"}},
		{"stray argument", []string{"serve"}, 2, "", []string{`unexpected argument "serve"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantOut) {
				t.Errorf("stdout %q does not contain %q", stdout.String(), tt.wantOut)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q does not contain %q", stderr.String(), w)
				}
			}
		})
	}
}

// TestRunServesAndDrains runs edge in-process on ports the kernel chose:
// it serves, keeps its admin endpoints off the public listener, and on
// cancellation finishes an in-flight request before returning 0.
func TestRunServesAndDrains(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(arrived)
			<-release
		}
		fmt.Fprint(w, "origin")
	}))
	t.Cleanup(origin.Close)
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before origin.Close, if the test ends early

	cfg := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
listen: %q
admin_listen: %q
origin: %q
domains:
  - hosts: ["*"]
    rules: [{name: per-ip, limit: 100, period: 1m}]
`, publicAnyPort, adminAnyPort, origin.URL)), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	log := newEdgeLog()
	go func() { done <- run(ctx, []string{"-config", cfg}, io.Discard, log) }()
	public, admin := log.waitStarted(t)

	if code, body := httpGet(t, "http://"+public+"/"); code != 200 || body != "origin" {
		t.Fatalf("public: got %d %q, want 200 origin", code, body)
	}
	// The public listener forwards /metrics like any path: edge's own
	// metrics are never served there.
	if _, body := httpGet(t, "http://"+public+"/metrics"); body != "origin" {
		t.Errorf("public /metrics: got %q, want the origin's answer", body)
	}
	if code, body := httpGet(t, "http://"+admin+"/metrics"); code != 200 || !strings.Contains(body, "edge_requests_total") {
		t.Errorf("admin /metrics: got %d", code)
	}

	slow := make(chan int, 1)
	go func() {
		code, _ := httpGet(t, "http://"+public+"/slow")
		slow <- code
	}()
	<-arrived
	cancel()
	// The public listener closes when the drain begins; the request at the
	// origin is still in flight and must be answered.
	wait.For(t, 10*time.Second, "the public listener to close", func() bool { return !accepting(public) })
	unblock()
	if code := <-slow; code != 200 {
		t.Errorf("in-flight request during shutdown: got %d, want 200", code)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("run returned %d, want 0; log:\n%s", code, log)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancellation")
	}
}

// The listen and admin_listen addresses of every edge a test starts: the
// kernel picks a free port when edge binds, and the test reads it from the
// "edge started" log line (edgeLog). A port chosen by the test beforehand
// could be taken by another process before edge binds it. The two are
// written differently because a config may not name one address twice;
// both bind 127.0.0.1.
const (
	publicAnyPort = "localhost:0"
	adminAnyPort  = "127.0.0.1:0"
)

// edgeLog is an edge's log, written by run or serve in-process or copied
// from the binary's stderr. At the "edge started" line it learns the
// addresses the listeners bound.
type edgeLog struct {
	mu            sync.Mutex
	b             bytes.Buffer
	scanned       int           // bytes of b searched for the start line
	started       chan struct{} // closed at the start line, or at a failure to start
	public, admin string        // dialable addresses of the listeners
	check         string        // the check listener's, if edge has one
	tls           string        // the HTTPS listener's, if edge has one
}

func newEdgeLog() *edgeLog { return &edgeLog{started: make(chan struct{})} }

// listenAttr matches the listen, admin_listen and check_listen attributes
// of a text or JSON log line.
var listenAttr = regexp.MustCompile(`\b(listen|admin_listen|check_listen|tls_listen)(?:=|":")([^\s"]+)`)

func (l *edgeLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.b.Write(p)
	select {
	case <-l.started:
		return n, err
	default:
	}
	text := l.b.String()
	end := strings.LastIndexByte(text, '\n') + 1
	for _, line := range strings.Split(text[l.scanned:end], "\n") {
		switch {
		case strings.Contains(line, "edge started"):
			for _, m := range listenAttr.FindAllStringSubmatch(line, -1) {
				addr := dialable(m[2])
				switch m[1] {
				case "listen":
					l.public = addr
				case "admin_listen":
					l.admin = addr
				case "tls_listen":
					l.tls = addr
				default:
					l.check = addr
				}
			}
			close(l.started)
			return n, err
		case strings.Contains(line, "edge stopped"), strings.HasPrefix(line, "edge: "):
			close(l.started) // no addresses: waitStarted fails
			return n, err
		}
	}
	l.scanned = end
	return n, err
}

func (l *edgeLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitStarted waits for edge to start and returns the addresses its public
// and admin listeners bound, with 127.0.0.1 for an unspecified host.
func (l *edgeLog) waitStarted(t *testing.T) (public, admin string) {
	t.Helper()
	public, admin = l.waitListening(t)
	if public == "" || admin == "" {
		t.Fatalf("edge did not start; log:\n%s", l)
	}
	return public, admin
}

// waitListening waits for edge to start and returns the addresses its
// public and admin listeners bound, "" for one it did not bind.
func (l *edgeLog) waitListening(t *testing.T) (public, admin string) {
	t.Helper()
	select {
	case <-l.started:
	case <-time.After(20 * time.Second):
		t.Fatalf("edge did not start within 20s; log:\n%s", l)
	}
	l.mu.Lock()
	public, admin = l.public, l.admin
	l.mu.Unlock()
	if admin == "" {
		t.Fatalf("edge did not start; log:\n%s", l)
	}
	return public, admin
}

// dialable turns a bound address into one to dial: 127.0.0.1 for an
// unspecified host (0.0.0.0, [::]).
func dialable(bound string) string {
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return bound
}

// accepting reports whether a TCP connection to addr is accepted.
func accepting(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// must fails t at once if a setup step failed.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0, ""
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// TestDrainDelay: on shutdown /readyz turns 503 while the public listener
// still serves, for timeouts.drain_delay. The test stands in for the
// drain delay's timer, so that it checks edge during the delay and then
// ends it, instead of waiting for it.
func TestDrainDelay(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
listen: %q
admin_listen: %q
timeouts: {drain_delay: 2s}
domains: [{hosts: ["*"], respond: {body: "static"}}]
`, publicAnyPort, adminAnyPort)), 0o644); err != nil {
		t.Fatal(err)
	}
	table, hash, err := loadConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	asked := make(chan time.Duration, 1)
	expire := make(chan time.Time)
	drainTimer := func(d time.Duration) <-chan time.Time {
		asked <- d
		return expire
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	log := newEdgeLog()
	level := new(slog.LevelVar)
	go func() {
		done <- serve(ctx, table, hash, cfg, os.Environ(), newLogger(log, "text", level), level, drainTimer)
	}()
	public, admin := log.waitStarted(t)
	if code, _ := httpGet(t, "http://"+admin+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz before shutdown: got %d, want 200", code)
	}

	cancel()
	select {
	case d := <-asked:
		if d != 2*time.Second {
			t.Errorf("drain delay: got %v, want 2s", d)
		}
	case err := <-done:
		t.Fatalf("serve returned %v without a drain delay", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no drain delay within 10s of the shutdown")
	}
	if code, _ := httpGet(t, "http://"+admin+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz during the drain delay: got %d, want 503", code)
	}
	if code, body := httpGet(t, "http://"+public+"/"); code != 200 || body != "static" {
		t.Errorf("public during the drain delay: got %d %q, want 200 static", code, body)
	}
	close(expire)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after the drain delay")
	}
	if accepting(public) {
		t.Errorf("public listener still accepting after serve returned")
	}
}

// TestLoggerDurations checks that both log formats write a time.Duration
// as a duration string, at the top level and inside a group, rather than
// slog's JSON default of integer nanoseconds.
func TestLoggerDurations(t *testing.T) {
	for _, tt := range []struct {
		format string
		want   []string
	}{
		{"json", []string{`"drain_delay":"20s"`, `"reload":{"took":"1.5ms"}`, `"n":3`}},
		{"text", []string{"drain_delay=20s", "reload.took=1.5ms", "n=3"}},
	} {
		t.Run(tt.format, func(t *testing.T) {
			table, err := parseConfig([]byte("log: {format: " + tt.format + "}\ndomains: [{hosts: [\"*\"], respond: {body: ok}}]\n"))
			if err != nil {
				t.Fatalf("test configuration: %v", err)
			}
			var buf bytes.Buffer
			level := new(slog.LevelVar)
			level.Set(table.LogLevel)
			newLogger(&buf, table.LogFormat, level).Info("x", "drain_delay", 20*time.Second,
				slog.Group("reload", "took", 1500*time.Microsecond), "n", 3)
			got := buf.String()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("got %s, want it to contain %s", got, w)
				}
			}
		})
	}
}
