package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
)

// TestEndToEndConcurrencyRedis runs two built binaries of one PoP sharing
// a concurrency limit of 2 through a real redis-server: of five parallel
// slow requests of one client spread over both, two reach the origin and
// three get 429 at once, and each node exports the slots it holds; then a
// node holding both slots is killed, and the other refuses the client
// until the dead node's leases (1s) run out.
func TestEndToEndConcurrencyRedis(t *testing.T) {
	bin := buildEdge(t)
	srv := redistest.Start(t)
	arrived := make(chan string, 16)
	gate, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.URL.Path
		switch r.URL.Path {
		case "/slow":
			<-gate
		case "/hold":
			select {
			case <-hold:
			case <-r.Context().Done(): // its edge node was killed
			}
		}
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	defer close(hold)
	defer release()

	cfg := fmt.Sprintf(`
pop: e2e
cluster:
  store: redis
  redis: {addresses: [%q]}
  sync: exact
  budget: 200ms
  heartbeat_interval: 100ms
  on_store_failure: closed
domains:
  - name: api
    hosts: ["api.test"]
    rules: [{name: parallel, algorithm: concurrency, limit: 2, lease: 1s}]
`, srv.Addr)
	nodes := []*edgeProcess{startBinaryWith(t, bin, origin.URL, cfg), startBinaryWith(t, bin, origin.URL, cfg)}
	get := func(node int, path string) (int, http.Header) {
		req, _ := http.NewRequest("GET", "http://"+nodes[node].public+path, nil)
		req.Host = "api.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	// Both nodes answer from Redis before the test starts.
	for i := range nodes {
		wait.For(t, 10*time.Second, "node answering", func() bool { code, _ := get(i, "/"); return code == 200 })
		<-arrived
	}

	type answer struct {
		status int
		header http.Header
	}
	answers := make(chan answer, 5)
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			code, h := get(i%2, "/slow")
			answers <- answer{code, h}
		})
	}
	for range 3 {
		a := <-answers
		if a.status != http.StatusTooManyRequests {
			t.Fatalf("a request came back with %d before the origin answered, want 429", a.status)
		}
		if got, want := a.header.Get("RateLimit-Policy"), `"parallel";q=2;qu="concurrent-requests"`; got != want {
			t.Errorf("RateLimit-Policy: %q, want %q", got, want)
		}
		if got := a.header.Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After: %q, want 1", got)
		}
	}
	<-arrived
	<-arrived
	held := 0
	for _, n := range nodes {
		held += slotsMetric(t, n)
	}
	if held != 2 {
		t.Errorf("edge_concurrency_slots_in_use over the two nodes: %d, want 2", held)
	}
	release()
	wg.Wait()
	for range 2 {
		if a := <-answers; a.status != http.StatusOK {
			t.Errorf("held request: %d, want 200", a.status)
		}
	}
	if len(arrived) != 0 {
		t.Fatalf("%d more requests reached the origin", len(arrived))
	}

	// Node 0 takes both slots and dies holding them.
	var holders sync.WaitGroup
	for range 2 {
		holders.Go(func() { get(0, "/hold") })
	}
	<-arrived
	<-arrived
	if code, _ := get(1, "/"); code != http.StatusTooManyRequests {
		t.Fatalf("node 1 while node 0 holds both slots: %d, want 429", code)
	}
	nodes[0].cmd.Process.Kill()
	<-nodes[0].exited
	holders.Wait()
	took := wait.For(t, 10*time.Second, "the dead node's leases to run out", func() bool {
		code, _ := get(1, "/")
		return code == http.StatusOK
	})
	t.Logf("node 1 had the slots back %v after node 0 was killed (lease 1s)", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("the slots came back after %v, want within the lease (1s) and a second", took)
	}
}

// slotsMetric is node n's edge_concurrency_slots_in_use for rule parallel.
func slotsMetric(t *testing.T, n *edgeProcess) int {
	t.Helper()
	resp, err := http.Get("http://" + n.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, `edge_concurrency_slots_in_use{domain="api",pop="e2e",rule="parallel"} `) {
			var v int
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			return v
		}
	}
	t.Fatalf("/metrics lacks edge_concurrency_slots_in_use of rule parallel:\n%s", grepLines(string(b), "edge_concurrency"))
	return 0
}
