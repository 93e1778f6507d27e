package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
