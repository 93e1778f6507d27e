package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
)

// TestEndToEndShare runs the built binary with cluster.sync share: a node
// of three allows a client its Poisson share of a limit of 30 (15), shows
// the PoP's limit in RateLimit-Policy and its own remaining share in r, and
// exports the share as edge_rule_node_share.
func TestEndToEndShare(t *testing.T) {
	bin := buildEdge(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	edge := startBinaryWith(t, bin, origin.URL, `
cluster: {sync: share, nodes: 3, split: poisson}
domains:
  - name: api
    hosts: ["api.test"]
    rules: [{name: per-client, limit: 30, period: 720h, headers: always}]
`)
	for i := range 16 {
		req, err := http.NewRequest("GET", "http://"+edge.public+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "api.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		want := http.StatusOK
		if i == 15 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d: got %d, want %d", i+1, resp.StatusCode, want)
		}
		if got, want := resp.Header.Get("RateLimit-Policy"), `"per-client";q=30;w=2592000`; got != want {
			t.Errorf("request %d: RateLimit-Policy %q, want %q", i+1, got, want)
		}
		if got, want := resp.Header.Get("RateLimit"), fmt.Sprintf(`"per-client";r=%d;`, max(14-i, 0)); !strings.HasPrefix(got, want) {
			t.Errorf("request %d: RateLimit %q, want it to start %q", i+1, got, want)
		}
	}
	resp, err := http.Get("http://" + edge.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `edge_rule_node_share{domain="api",pop="local",rule="per-client"} 15`; !strings.Contains(string(b), want) {
		t.Errorf("/metrics lacks %s:\n%s", want, grepLines(string(b), "edge_rule_node_share"))
	}
}

// TestEndToEndShareRedis runs two built binaries with cluster.sync share
// over a real redis-server: the first, alone, allows a client the whole
// limit of 10 and exports a share of 10; once the second node's heartbeat
// appears both export an even share of 5 and allow a new client 5 each,
// with the PoP's limit in RateLimit-Policy.
func TestEndToEndShareRedis(t *testing.T) {
	bin := buildEdge(t)
	srv := redistest.Start(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	cfg := fmt.Sprintf(`
pop: e2e
cluster:
  store: redis
  redis: {addresses: [%q]}
  sync: share
  heartbeat_interval: 100ms
domains:
  - name: api
    hosts: ["api.test"]
    rules: [{name: per-client, limit: 10, period: 720h, key: ["header:X-Client"]}]
`, srv.Addr)
	through := func(e *edgeProcess, client string) int {
		for n := range 11 {
			req, _ := http.NewRequest("GET", "http://"+e.public+"/", nil)
			req.Host = "api.test"
			req.Header.Set("X-Client", client)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				if got, want := resp.Header.Get("RateLimit-Policy"), `"per-client";q=10;w=2592000`; got != want {
					t.Errorf("RateLimit-Policy %q, want %q", got, want)
				}
				return n
			}
		}
		return 11
	}
	share := func(e *edgeProcess) string {
		resp, err := http.Get("http://" + e.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return grepLines(string(b), "edge_rule_node_share{")
	}
	const alone, split = `edge_rule_node_share{domain="api",pop="e2e",rule="per-client"} 10`, `edge_rule_node_share{domain="api",pop="e2e",rule="per-client"} 5`
	first := startBinaryWith(t, bin, origin.URL, cfg)
	if got := share(first); !strings.Contains(got, alone) {
		t.Errorf("the first node alone: %s, want %s", got, alone)
	}
	if got := through(first, "a"); got != 10 {
		t.Errorf("the first node alone let a client through %d times, want 10", got)
	}
	second := startBinaryWith(t, bin, origin.URL, cfg)
	for _, e := range []*edgeProcess{first, second} {
		wait.For(t, 5*time.Second, "the share split between two nodes", func() bool { return strings.Contains(share(e), split) })
		if got := through(e, "b"); got != 5 {
			t.Errorf("a node of two let a new client through %d times, want 5", got)
		}
	}
}
