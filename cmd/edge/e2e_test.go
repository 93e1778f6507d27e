package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/edgerate/edge/internal/wait"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// buildEdge compiles the real binary once per test run.
func buildEdge(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "edge")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// edgeProcess is the built binary, running.
type edgeProcess struct {
	cmd           *exec.Cmd
	exited        chan error // cmd.Wait's result
	stderr        *edgeLog
	public, admin string // the listeners' addresses
}

// startBinary runs bin with the configuration at cfgPath and waits until it
// listens. The process is killed when the test ends, if it is still
// running.
func startBinary(t *testing.T, bin, cfgPath string) *edgeProcess {
	t.Helper()
	e := runBinary(t, bin, cfgPath)
	e.public, e.admin = e.stderr.waitStarted(t)
	return e
}

// runBinary starts bin with the config file at cfgPath, killed at the
// end of the test if it is still running, without waiting for it to
// start.
func runBinary(t *testing.T, bin, cfgPath string) *edgeProcess {
	t.Helper()
	e := &edgeProcess{cmd: exec.Command(bin, "-config", cfgPath), exited: make(chan error, 1), stderr: newEdgeLog()}
	e.cmd.Stderr = e.stderr
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { e.exited <- e.cmd.Wait() }()
	t.Cleanup(func() {
		if e.cmd.ProcessState == nil {
			e.cmd.Process.Kill()
			<-e.exited
		}
	})
	return e
}

// startBinaryWith starts bin on a configuration of its listeners (port 0),
// origin and rest, YAML of further top-level keys.
func startBinaryWith(t *testing.T, bin, origin, rest string) *edgeProcess {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "edge.yaml")
	cfg := fmt.Sprintf("listen: %q\nadmin_listen: %q\norigin: %q\n", publicAnyPort, adminAnyPort, origin) + rest
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return startBinary(t, bin, cfgPath)
}

// stop sends SIGTERM and fails t unless edge exits 0 within 15 s.
func (e *edgeProcess) stop(t *testing.T) {
	t.Helper()
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-e.exited:
		if err != nil {
			t.Fatalf("edge exited with %v; stderr:\n%s", err, e.stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("edge did not exit after SIGTERM")
	}
}

// TestEndToEnd starts the built binary with a config file and drives it
// over TCP: allowed requests reach the origin, the limit turns them into
// 429s with valid rate-limit fields, unknown hosts get 421, metrics parse,
// and SIGTERM drains an in-flight request before a clean exit.
func TestEndToEnd(t *testing.T) {
	bin := buildEdge(t)

	var originHits atomic.Int64
	arrived, release := make(chan struct{}), make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		originHits.Add(1)
		if r.URL.Path == "/slow" {
			close(arrived)
			<-release
		}
		fmt.Fprintf(w, "origin saw %s %s from %s", r.Method, r.URL.Path, r.Header.Get("X-Forwarded-For"))
	}))
	defer origin.Close()
	defer func() { // unblock the slow handler if the test ends before it does
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	cfgPath := filepath.Join(t.TempDir(), "edge.yaml")
	// A 30-day period: no test run crosses a period boundary between the
	// few requests below, so no clock needs to be controlled.
	cfg := fmt.Sprintf(`
listen: %q
admin_listen: %q
pop: e2e
origin: %q
domains:
  - hosts: ["api.example.com"]
    rules:
      - name: per-ip
        limit: 3
        period: 720h
        headers: always
  - name: drain
    hosts: ["slow.example.com"]
`, publicAnyPort, adminAnyPort, origin.URL)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	// -check first: the same file is valid.
	if out, err := exec.Command(bin, "-check", "-config", cfgPath).CombinedOutput(); err != nil || !strings.Contains(string(out), "is valid: 2 domains, 1 rule\n") {
		t.Fatalf("-check: %v: %s", err, out)
	}

	edge := startBinary(t, bin, cfgPath)
	cmd, exited, stderr, public, admin := edge.cmd, edge.exited, edge.stderr, edge.public, edge.admin

	send := func(host, path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+public+path, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s%s: %v", host, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for i := range 3 {
		resp := send("api.example.com", "/v1/x")
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: got %d, want 200", i, resp.StatusCode)
		}
		if got, want := resp.Header.Get("X-Ratelimit-Remaining"), fmt.Sprint(2-i); got != want {
			t.Errorf("request %d: X-RateLimit-Remaining = %q, want %q", i, got, want)
		}
	}
	resp := send("api.example.com", "/v1/x")
	if resp.StatusCode != 429 {
		t.Fatalf("4th request: got %d, want 429", resp.StatusCode)
	}
	if ra := resp.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("Retry-After = %q, want ≥ 1", ra)
	}
	policy, err := httpsfv.UnmarshalList(resp.Header.Values("Ratelimit-Policy"))
	if err != nil || len(policy) != 1 {
		t.Fatalf("RateLimit-Policy %q: %v", resp.Header.Values("Ratelimit-Policy"), err)
	}
	if q, _ := policy[0].(httpsfv.Item).Params.Get("q"); q != int64(3) {
		t.Errorf("RateLimit-Policy q = %v, want 3", q)
	}
	if _, err := httpsfv.UnmarshalList(resp.Header.Values("Ratelimit")); err != nil {
		t.Errorf("RateLimit %q: %v", resp.Header.Values("Ratelimit"), err)
	}
	if resp := send("unknown.example.com", "/"); resp.StatusCode != 421 {
		t.Errorf("unknown host: got %d, want 421", resp.StatusCode)
	}
	// Smuggling attempts over raw TCP are refused by the real binary's
	// listener and never reach the origin.
	for _, raw := range []string{
		"POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"OPTIONS * HTTP/1.1\r\nHost: not a host\r\n\r\n",
		"GET / HTTP/1.1\nHost: api.example.com\n\n",
	} {
		conn, err := net.Dial("tcp", public)
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, raw)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != 400 {
			t.Errorf("raw %q: got %v, %v; want 400", raw[:min(len(raw), 40)], resp, err)
		}
		conn.Close()
	}
	if got := originHits.Load(); got != 3 {
		t.Errorf("origin saw %d requests, want 3", got)
	}

	// Metrics, read with Prometheus's own text parser.
	mresp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(mresp.Body)
	mresp.Body.Close()
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	counts := map[string]float64{}
	for _, m := range families["edge_requests_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["pop"] != "e2e" {
			t.Errorf("edge_requests_total without pop=e2e: %v", labels)
		}
		counts[labels["domain"]+"/"+labels["outcome"]] = m.GetCounter().GetValue()
	}
	if counts["api.example.com/served"] != 3 || counts["api.example.com/blocked"] != 1 {
		t.Errorf("edge_requests_total = %v, want 3 served and 1 blocked", counts)
	}
	if families["edge_misdirected_requests_total"].GetMetric()[0].GetCounter().GetValue() != 1 {
		t.Errorf("edge_misdirected_requests_total != 1")
	}
	// The two framing attempts (TE+CL, duplicate Content-Length), OPTIONS *
	// and the bare-LF head were refused by the listener and counted.
	if got := families["edge_framing_refused_total"].GetMetric()[0].GetCounter().GetValue(); got != 4 {
		t.Errorf("edge_framing_refused_total = %v, want 4", got)
	}

	// SIGTERM while a request is in flight: it completes, edge exits 0.
	slow := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("GET", "http://"+public+"/slow", nil)
		req.Host = "slow.example.com"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			slow <- 0
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	<-arrived
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The public listener closes when the drain begins; the request at the
	// origin is still in flight and must be answered.
	wait.For(t, 10*time.Second, "the public listener to close", func() bool { return !accepting(public) })
	close(release) // the deferred close then does nothing
	if code := <-slow; code != 200 {
		t.Errorf("in-flight request across SIGTERM: got %d, want 200", code)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("edge exited with %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("edge did not exit after SIGTERM")
	}
	if accepting(public) {
		t.Errorf("public listener still accepting after exit")
	}
	if !strings.Contains(stderr.String(), "edge stopped") {
		t.Errorf("log lacks the shutdown line:\n%s", stderr.String())
	}
}
