package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
)

// TestEndToEndShed runs the built binary with a domain of max_in_flight 2
// that keeps one slot for critical requests and holds requests at a slow
// origin: with one normal request in flight, sheddable and normal ones
// get 503 with their class, a critical one (by header) still reaches the
// origin, and with two in flight a critical one is refused too; the
// refusals are counted by class.
func TestEndToEndShed(t *testing.T) {
	bin := buildEdge(t)
	arrived := make(chan string, 10)
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.Method + " " + r.URL.Path
		<-gate
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	defer release()

	edge := startBinaryWith(t, bin, origin.URL, `
domains:
  - name: api
    hosts: ["api.example.com"]
    shed: {max_in_flight: 2, critical_reserve: 0.5, sheddable_share: 0.5}
    priorities:
      - match: {headers: {X-Priority: high}}
        class: critical
      - match: {methods: [GET]}
        class: sheddable
    rules: [{name: per-ip, limit: 100, period: 720h}]
`)

	type answer struct {
		status int
		body   string
	}
	answers := make(chan answer, 10)
	var wg sync.WaitGroup
	defer wg.Wait()
	send := func(method, priority string) {
		wg.Go(func() {
			req, _ := http.NewRequest(method, "http://"+edge.public+"/x", nil)
			req.Host = "api.example.com"
			req.Header.Set("Accept", "application/json")
			if priority != "" {
				req.Header.Set("X-Priority", priority)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- answer{0, err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- answer{resp.StatusCode, string(b)}
		})
	}
	steps := []struct {
		name, method, priority string
		want                   string // "origin", or the 503 body
	}{
		{"normal", "POST", "", "origin"},
		{"sheddable at 1", "GET", "", `{"error":"overloaded","class":"sheddable","retry_after":1}` + "\n"},
		{"normal at 1", "POST", "", `{"error":"overloaded","class":"normal","retry_after":1}` + "\n"},
		{"critical at 1", "GET", "high", "origin"},
		{"critical at 2", "POST", "high", `{"error":"overloaded","class":"critical","retry_after":1}` + "\n"},
	}
	for _, s := range steps {
		send(s.method, s.priority)
		select {
		case <-arrived:
			if s.want != "origin" {
				t.Fatalf("%s: reached the origin, want 503 %s", s.name, s.want)
			}
		case a := <-answers:
			if a.status != 503 || a.body != s.want {
				t.Fatalf("%s: got %d %q, want 503 %q", s.name, a.status, a.body, s.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: neither forwarded nor answered", s.name)
		}
	}
	release()
	for range 2 {
		if a := <-answers; a.status != 200 {
			t.Errorf("a request at the origin: got %d %q, want 200", a.status, a.body)
		}
	}

	// The slots are given back as the handlers return, just after the
	// responses are sent.
	want := []string{
		`edge_shed_requests_total{class="critical",domain="api",pop="local"} 1`,
		`edge_shed_requests_total{class="normal",domain="api",pop="local"} 1`,
		`edge_shed_requests_total{class="sheddable",domain="api",pop="local"} 1`,
		`edge_shed_in_flight{domain="api",pop="local"} 0`,
	}
	var text string
	wait.For(t, 10*time.Second, "the shed metrics", func() bool {
		resp, err := http.Get("http://" + edge.admin + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text = string(b)
		for _, w := range want {
			if !strings.Contains(text, w) {
				return false
			}
		}
		return true
	})
	edge.stop(t)
}
