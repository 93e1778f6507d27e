//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/proxy"
)

// TestDocsDrainScript runs the drain script of docs/origins.md, "Drain",
// with sh, curl and jq, against two edge nodes (each a proxy with its real
// admin router, a token set) in front of the same two origin servers: it
// drains the server on both nodes, and does not end while a request to it
// is in flight on one of them; it ends once that request is answered, and
// its undrain puts the server back on both.
func TestDocsDrainScript(t *testing.T) {
	for _, tool := range []string{"sh", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not installed: .ci/run must install it", tool)
			}
			t.Skipf("%s not installed: the drain script of docs/origins.md is not run", tool)
		}
	}
	sec := docSection(t, "docs/origins.md", "Drain")
	m := regexp.MustCompile("(?s)```sh\n(#!/bin/sh\n.*?)```").FindStringSubmatch(sec)
	if m == nil {
		t.Fatal("docs/origins.md's Drain section has no #!/bin/sh script")
	}
	script := filepath.Join(t.TempDir(), "drain.sh")
	if err := os.WriteFile(script, []byte(m[1]), 0o755); err != nil {
		t.Fatal(err)
	}

	release := make(chan struct{})
	var held atomic.Int64
	var servers [2]*httptest.Server
	for i := range servers {
		servers[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				held.Add(1)
				<-release
			}
			fmt.Fprint(w, i)
		}))
		defer servers[i].Close()
	}
	const token = "drain-script-token-0123"
	cfg := fmt.Sprintf(`admin_token: %s
domains:
  - name: app
    hosts: [app.example.com]
    origins: [{url: %q}, {url: %q}]
`, token, servers[0].URL, servers[1].URL)
	var nodes []string
	var proxies []*proxy.Proxy
	for range 2 {
		p, _, reg := statusProxy(t, filepath.Join(t.TempDir(), "edge.yaml"), cfg)
		var ready atomic.Bool
		ready.Store(true)
		admin := httptest.NewServer(adminRouter(reg, p, &ready, true))
		t.Cleanup(admin.Close)
		nodes = append(nodes, strings.TrimPrefix(admin.URL, "http://"))
		proxies = append(proxies, p)
	}
	// Two slow requests through node 0: one on each server, held.
	public := httptest.NewServer(proxies[0])
	t.Cleanup(public.Close)
	var wg sync.WaitGroup
	statuses := make(chan int, 2)
	for range 2 {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", public.URL+"/slow", nil)
			req.Host = "app.example.com"
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.StatusCode
		})
	}
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
		wg.Wait()
	}()
	wait.For(t, 10*time.Second, "a request held on each server", func() bool { return held.Load() == 2 })

	a := servers[0].URL
	// drained reads GET /v1/origins of a node: whether a is drained there,
	// and its requests in flight.
	drained := func(node string) (bool, int64) {
		t.Helper()
		v, err := originsAt(t, "http://"+node, token)
		if err != nil || len(v.Domains) != 1 || v.Domains[0].Servers[0].Server != a {
			t.Fatalf("GET /v1/origins of %s: %+v %v", node, v, err)
		}
		s := v.Domains[0].Servers[0]
		return s.Drained, s.InFlight
	}
	run := func(verb string) *exec.Cmd {
		cmd := exec.Command("sh", append([]string{script, "app", a}, nodes...)...)
		cmd.Env = append(os.Environ(), "EDGE_ADMIN_TOKEN="+token, "VERB="+verb)
		return cmd
	}

	cmd := run("drain")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	wait.For(t, 10*time.Second, "the script to drain a on both nodes", func() bool {
		d0, _ := drained(nodes[0])
		d1, _ := drained(nodes[1])
		return d0 && d1
	})
	if _, n := drained(nodes[0]); n != 1 {
		t.Errorf("node 0 has %d requests in flight to a, want the held 1", n)
	}
	select {
	case err := <-exited:
		t.Fatalf("the script ended (%v) while a request to a is in flight on node 0:\n%s", err, out.String())
	default:
	}
	close(release)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the drain script: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the drain script did not end once the request was answered:\n%s", out.String())
	}
	for _, node := range nodes {
		if want := node + ": " + a + " drained, no request in flight\n"; !strings.Contains(out.String(), want) {
			t.Errorf("the script's output lacks %q:\n%s", want, out.String())
		}
	}
	wg.Wait()
	close(statuses)
	for st := range statuses {
		if st != 200 {
			t.Errorf("a request in flight during the drain: %d, want 200", st)
		}
	}

	if b, err := run("undrain").CombinedOutput(); err != nil {
		t.Fatalf("VERB=undrain: %v\n%s", err, b)
	}
	for _, node := range nodes {
		if d, _ := drained(node); d {
			t.Errorf("after VERB=undrain a is still drained on %s", node)
		}
	}
}

// originsDoc is what the drain tests read of GET /v1/origins.
type originsDoc struct {
	Domains []struct {
		Servers []struct {
			Server   string `json:"server"`
			Drained  bool   `json:"drained"`
			InFlight int64  `json:"in_flight"`
		} `json:"servers"`
	} `json:"domains"`
}

// originsAt returns GET /v1/origins of the admin API at base, asked with
// token, decoded.
func originsAt(t *testing.T, base, token string) (originsDoc, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/origins", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v originsDoc
	err = json.NewDecoder(resp.Body).Decode(&v)
	return v, err
}
