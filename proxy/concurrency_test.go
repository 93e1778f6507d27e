package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func concurrencyRule(name string, limit int) rules.RuleConfig {
	return rules.RuleConfig{Name: name, Limit: limit, Algorithm: "concurrency"}
}

// TestConcurrencyLimit: five parallel slow requests of one key under a
// concurrency limit of 2: two reach the origin, three get 429 at once with
// Retry-After 1 and a policy in concurrent requests; once the two end, the
// key's slots are free again.
func TestConcurrencyLimit(t *testing.T) {
	arrived, release := make(chan struct{}, 5), make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		io.WriteString(w, "done")
	}))
	t.Cleanup(origin.Close)
	t.Cleanup(free)
	e := newEnv(t, oneDomain(origin.URL, concurrencyRule("parallel", 2)))
	type result struct {
		status int
		header http.Header
	}
	results := make(chan result, 5)
	for range 5 {
		go func() {
			req, _ := http.NewRequest("GET", e.srv.URL+"/", nil)
			req.Host = "api.example.com"
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				results <- result{}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- result{resp.StatusCode, resp.Header}
		}()
	}
	// Three refusals come back while two requests are held at the origin.
	for range 3 {
		r := <-results
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("a request came back with %d before the origin answered, want 429", r.status)
		}
		if got := r.header.Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After: %q, want 1", got)
		}
		if got, want := r.header.Get("RateLimit-Policy"), `"parallel";q=2;qu="concurrent-requests"`; got != want {
			t.Errorf("RateLimit-Policy: %q, want %q", got, want)
		}
		if got, want := r.header.Get("RateLimit"), `"parallel";r=0;t=1`; got != want {
			t.Errorf("RateLimit: %q, want %q", got, want)
		}
	}
	<-arrived
	<-arrived
	metric := `
# HELP edge_concurrency_slots_in_use Requests in flight holding a slot of a concurrency rule, by domain and rule.
# TYPE edge_concurrency_slots_in_use gauge
edge_concurrency_slots_in_use{domain="api.example.com",rule="parallel"} %d
`
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(fmt.Sprintf(metric, 2)), "edge_concurrency_slots_in_use"); err != nil {
		t.Error(err)
	}
	free()
	for range 2 {
		if r := <-results; r.status != http.StatusOK {
			t.Errorf("held request: %d, want 200", r.status)
		}
	}
	if len(arrived) != 0 {
		t.Errorf("%d more requests reached the origin", len(arrived))
	}
	// The slots are given back as the handlers end, which may be just
	// after the client has read the whole response.
	wait.For(t, 5*time.Second, "the slots given back", func() bool {
		return testutil.GatherAndCompare(e.reg, strings.NewReader(fmt.Sprintf(metric, 0)), "edge_concurrency_slots_in_use") == nil
	})
	for range 2 {
		if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != http.StatusOK {
			t.Errorf("after the slots were freed: %d, want 200", resp.StatusCode)
		}
		<-arrived
	}
}

// TestConcurrencySlotFreed: a request's slot is given back exactly once
// whatever becomes of it: answered, refused by another rule, its body too
// large, its origin down or too slow, its client gone before the origin
// answered or in the middle of the response. One request of the key stays
// in flight throughout, so a slot given back twice would show as 0.
func TestConcurrencySlotFreed(t *testing.T) {
	hold, slow, clientGone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	reached := make(chan string, 16)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- r.URL.Path
		switch r.URL.Path {
		case "/hold":
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-hold
		case "/slow":
			<-slow
		case "/fail":
			panic(http.ErrAbortHandler) // the origin drops the connection: 502
		case "/stream":
			w.WriteHeader(200)
			io.WriteString(w, "first part")
			w.(http.Flusher).Flush()
			<-clientGone
			for range 64 {
				if _, err := w.Write(make([]byte, 16<<10)); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}
	}))
	var once sync.Once
	t.Cleanup(origin.Close)
	t.Cleanup(func() { once.Do(func() { close(hold); close(slow) }) })

	narrow := rule("narrow", 1, time.Minute)
	narrow.Match = &rules.MatchConfig{PathPrefix: "/narrow"}
	cfg := oneDomain(origin.URL, concurrencyRule("parallel", 2), narrow)
	cfg.Domains[0].MaxRequestBody = 4
	cfg.Timeouts.Upstream = 200 * time.Millisecond
	e := newEnv(t, cfg)
	store := e.proxy.state.Load().domains[0].store

	holding := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("GET", e.srv.URL+"/hold", nil)
		req.Host = "api.example.com"
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			holding <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		holding <- resp.StatusCode
	}()
	if p := <-reached; p != "/hold" {
		t.Fatalf("origin reached at %s first", p)
	}

	send := func(method, target, body string) int {
		resp, _ := e.do(method, "api.example.com", target, nil, body)
		return resp.StatusCode
	}
	tests := []struct {
		name string
		run  func() int
		want int
	}{
		{"answered", func() int { return send("GET", "/", "") }, 200},
		{"answered to HEAD", func() int { return send("HEAD", "/", "") }, 200},
		{"refused by another rule", func() int {
			send("GET", "/narrow", "")
			return send("GET", "/narrow", "")
		}, 429},
		{"body too large", func() int { return send("POST", "/", "too large") }, 413},
		{"origin fails", func() int { return send("GET", "/fail", "") }, 502},
		{"origin too slow", func() int { return send("GET", "/slow", "") }, 504},
		{"client gone before the answer", func() int {
			c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "GET /slow HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
			<-reached
			c.Close()
			return 0
		}, 0},
		{"client gone mid-response", func() int {
			c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "GET /stream HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			c.Close() // mid-body
			close(clientGone)
			return resp.StatusCode
		}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.run(); got != tt.want {
				t.Errorf("status: got %d, want %d", got, tt.want)
			}
			wait.For(t, 5*time.Second, "the request's slot given back", func() bool { return store.SlotsInUse(0) == 1 })
			// Both slots: the held one and one free, not two free.
			if got := send("GET", "/", ""); got != 200 {
				t.Errorf("next request: %d, want 200", got)
			}
			wait.For(t, 5*time.Second, "the next request's slot given back", func() bool { return store.SlotsInUse(0) == 1 })
			for len(reached) > 0 {
				<-reached
			}
		})
	}
	once.Do(func() { close(hold); close(slow) })
	if got := <-holding; got != 200 {
		t.Errorf("held request: %d, want 200", got)
	}
	wait.For(t, 5*time.Second, "every slot given back", func() bool { return store.SlotsInUse(0) == 0 })
}
