package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// lineBuffer is standard output for an access log of path "-".
type lineBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lineBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines writes out p's access log and returns its lines.
func (l *lineBuffer) lines(p *Proxy) []string {
	p.FlushAccessLog()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSuffix(l.b.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// newLogProxy makes a Proxy of cfg with an access log to standard output
// (captured) in format, closed when the test ends.
func newLogProxy(t *testing.T, cfg rules.Config, format string, sample int) (*Proxy, *lineBuffer, *prometheus.Registry) {
	t.Helper()
	cfg.AccessLog = &rules.AccessLogConfig{Path: "-", Format: format, RefusedSample: sample}
	out := new(lineBuffer)
	reg := prometheus.NewRegistry()
	p, err := New(Options{Table: compile(t, cfg), Registerer: reg, AccessLogStdout: out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, out, reg
}

// TestAccessLogRefusedSample: with refused_sample 3, one refusal in three
// is written, with sample 3; the others are counted as skipped; allowed
// requests are all written.
func TestAccessLogRefusedSample(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	p, out, reg := newLogProxy(t, oneDomain(origin.URL, rule("per-ip", 1, time.Minute)), "json", 3)
	srv := httptest.NewServer(p)
	defer srv.Close()
	for range 10 {
		getThrough(t, srv.URL+"/", "api.example.com")
	}
	lines := out.lines(p)
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want 4 (1 allowed, 3 of 9 refused):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, l := range lines[1:] {
		if !strings.Contains(l, `"outcome":"blocked"`) || !strings.HasSuffix(l, `,"sample":3}`) {
			t.Errorf("refused line %d: %s, want blocked with sample 3", i+1, l)
		}
	}
	if strings.Contains(lines[0], "sample") {
		t.Errorf("allowed line %s has a sample", lines[0])
	}
	if got := testutil.ToFloat64(p.metrics.alogSkipped); got != 6 {
		t.Errorf("edge_access_log_skipped_total: got %v, want 6", got)
	}
	_ = reg
}

// TestAccessLogHTTP2: over HTTP/2 the request line carries HTTP/2.0, as
// nginx's $request does; an HTTP/2 client that resets its stream before
// the origin answers is logged 499.
func TestAccessLogHTTP2(t *testing.T) {
	release := make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	defer close(release)
	p, out, _ := newLogProxy(t, oneDomain(origin.URL), "combined", 0)
	srv := httptest.NewUnstartedServer(p)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	client := srv.Client()
	req, _ := http.NewRequest("GET", srv.URL+"/fast?q=1", nil)
	req.Host = "api.example.com"
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("proto %s, want HTTP/2", resp.Proto)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, "GET", srv.URL+"/slow", nil)
	req.Host = "api.example.com"
	if _, err := client.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow request: got %v, want the client's deadline", err)
	}
	var lines []string
	deadline := time.Now().Add(10 * time.Second)
	for len(lines) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		lines = out.lines(p)
	}
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[0], `"GET /fast?q=1 HTTP/2.0" 200 2 `) {
		t.Errorf("line 1: %s, want GET /fast?q=1 HTTP/2.0 200 with 2 bytes", lines[0])
	}
	if !strings.Contains(lines[1], `"GET /slow HTTP/2.0" 499 0 `) {
		t.Errorf("line 2: %s, want 499 for a client that left", lines[1])
	}
}

// TestAccessLogCheckListener: a question of the check listener is logged
// with the request it asks about and its answer.
func TestAccessLogCheckListener(t *testing.T) {
	cfg := oneDomain("http://127.0.0.1:9", rule("per-ip", 1, time.Minute))
	cfg.Check = &rules.CheckConfig{Listen: "127.0.0.1:2"}
	p, out, _ := newLogProxy(t, cfg, "json", 0)
	srv := httptest.NewServer(p.CheckHandler())
	defer srv.Close()
	for range 2 {
		getThrough(t, srv.URL+"/check", "", "X-Forwarded-Method: POST", "X-Forwarded-Uri: /login?next=%2F", "X-Forwarded-Host: api.example.com")
	}
	lines := out.lines(p)
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, want := range []string{`"status":200,`, `"status":429,`} {
		l := lines[i]
		if !strings.Contains(l, `"host":"api.example.com","method":"POST","target":"/login?next=%2F"`) || !strings.Contains(l, want) ||
			!strings.Contains(l, `"domain":"api.example.com"`) {
			t.Errorf("line %d: %s, want the question's request, %s", i+1, l, want)
		}
	}
	if !strings.Contains(lines[1], `"outcome":"blocked"`) || !strings.Contains(lines[1], `"refused_by":"per-ip"`) {
		t.Errorf("line 2: %s, want blocked by per-ip", lines[1])
	}
}

// TestAccessLogReload: a reload that changes the path opens the new file
// and closes the old one's writer (the leak check sees its goroutine
// gone), one that names a path it cannot open fails and keeps the
// running log, one without access_log stops logging.
func TestAccessLogReload(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	cfg := oneDomain(origin.URL)
	cfg.AccessLog = &rules.AccessLogConfig{Path: a}
	p, err := New(Options{Table: compile(t, cfg)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	srv := httptest.NewServer(p)
	defer srv.Close()
	get := func() {
		getThrough(t, srv.URL+"/", "api.example.com")
	}
	count := func(path string) int {
		p.FlushAccessLog()
		data, _ := os.ReadFile(path)
		return bytes.Count(data, []byte("\n"))
	}
	get()
	cfg.AccessLog = &rules.AccessLogConfig{Path: filepath.Join(dir, "missing", "c.log")}
	if _, err := p.Reload(compile(t, cfg), "bad"); err == nil || !strings.Contains(err.Error(), "access_log.path") {
		t.Errorf("reload to a path in a missing directory: got %v, want an access_log.path error", err)
	}
	get() // still logged to a
	cfg.AccessLog = &rules.AccessLogConfig{Path: b, Format: "json"}
	if _, err := p.Reload(compile(t, cfg), "b"); err != nil {
		t.Fatal(err)
	}
	get()
	if got, want := [2]int{count(a), count(b)}, [2]int{2, 1}; got != want {
		t.Errorf("lines in a and b: got %v, want %v", got, want)
	}
	cfg.AccessLog = nil
	if _, err := p.Reload(compile(t, cfg), "none"); err != nil {
		t.Fatal(err)
	}
	get()
	if got := count(b); got != 1 {
		t.Errorf("lines in b after the log was turned off: got %d, want 1", got)
	}
}

// TestAccessLogDomainOff: a domain with access_log: false has no line, on
// either path's handler; another domain's requests do.
func TestAccessLogDomainOff(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	off := false
	cfg := oneDomain(origin.URL)
	cfg.Domains = append(cfg.Domains, rules.DomainConfig{Name: "quiet", Hosts: []string{"quiet.example.com"}, AccessLog: &off})
	p, out, _ := newLogProxy(t, cfg, "combined", 0)
	srv := httptest.NewServer(p)
	defer srv.Close()
	for _, host := range []string{"quiet.example.com", "api.example.com"} {
		getThrough(t, srv.URL+"/", host)
	}
	if lines := out.lines(p); len(lines) != 1 || !strings.Contains(lines[0], "200 8 ") {
		t.Errorf("got %q, want the one line of api.example.com", lines)
	}
}

// TestAccessLogQueue: a request that waited for a queue's turn carries
// queued_ms; one whose client left while it waited is logged 499, as
// nginx logs a client that closed first.
func TestAccessLogQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := oneDomain("http://origin.test", queueRule(time.Second))
		cfg.AccessLog = &rules.AccessLogConfig{Path: "-", Format: "json"}
		out := new(lineBuffer)
		p, err := New(Options{Table: compile(t, cfg), Transport: &memoryOrigin{}, Registerer: prometheus.NewRegistry(), AccessLogStdout: out})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		send(p, 2, context.Background()) // the second waits 100ms
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		send(p, 1, context.Background())
		send(p, 1, ctx) // its turn is far: its client leaves first
		lines := out.lines(p)
		if len(lines) != 4 {
			t.Fatalf("got %d lines, want 4:\n%s", len(lines), strings.Join(lines, "\n"))
		}
		if strings.Contains(lines[0], "queued_ms") || !strings.Contains(lines[1], `"queued_ms":100.000`) {
			t.Errorf("lines 1 and 2:\n%s\n%s\nwant no wait, then 100ms", lines[0], lines[1])
		}
		if !strings.Contains(lines[3], `"status":499,`) {
			t.Errorf("line 4: %s, want 499", lines[3])
		}
	})
}

// TestAccessLogNoSecrets: a request's Authorization, cookies and API key
// (a rule's key) are in no line while keys is false.
func TestAccessLogNoSecrets(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	r := rule("per-token", 10, time.Minute)
	r.Key = []string{"header:X-Api-Key"}
	p, out, _ := newLogProxy(t, oneDomain(origin.URL, r), "json", 0)
	srv := httptest.NewServer(p)
	defer srv.Close()
	getThrough(t, srv.URL+"/", "api.example.com", "Authorization: Bearer s3cret-bearer", "Cookie: session=s3cret-cookie", "X-Api-Key: s3cret-key")
	lines := out.lines(p)
	if len(lines) != 1 || strings.Contains(lines[0], "s3cret") || !strings.Contains(lines[0], `"name":"per-token"`) {
		t.Errorf("got %q, want one line without any secret", lines)
	}
}

// getThrough sends GET url with Host host ("" for the URL's) and the
// fields "Name: value", and reads the answer whole.
func getThrough(t *testing.T, url, host string, fields ...string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if host != "" {
		req.Host = host
	}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, ": ")
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
