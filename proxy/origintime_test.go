package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// TestOriginTimeCharged: a rule with cost_from: origin_time charges each
// request the milliseconds its origin took (here an origin that "sleeps"
// by moving the proxy's injected clock), when the response ends, at most
// the rule's limit: the next requests are refused, not the one answered;
// the rule's cost is charged when deciding unless it is 0.
func TestOriginTimeCharged(t *testing.T) {
	tests := []struct {
		name  string
		cost  *int
		sleep []time.Duration // the origin's time for each request
		want  []int
	}{
		// 3 s of origin time a minute: 1.5 s, 1.5 s, then no room.
		{"cost 0", new(0), []time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond, 0}, []int{200, 200, 429}},
		// A request over the limit is answered: the next is refused.
		{"capped at the limit, next refused", new(0), []time.Duration{time.Hour, 0}, []int{200, 429}},
		// The decision's cost 1 is charged too: 1 + 2998 leaves 1; one
		// more request takes it, then none.
		{"cost 1 as well", nil, []time.Duration{2998 * time.Millisecond, 0, 0}, []int{200, 200, 429}},
		{"quick requests cost their decision only", new(1), []time.Duration{0, 0, 0, 0}, []int{200, 200, 200, 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e *env
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				d, _ := time.ParseDuration(r.URL.Query().Get("sleep"))
				e.clock.Advance(d) // the origin "sleeps" d
				io.WriteString(w, "done")
			}))
			t.Cleanup(origin.Close)
			r := rule("origin-time", 3000, time.Minute)
			r.CostFrom, r.Cost = "origin_time", tt.cost
			e = newEnv(t, oneDomain(origin.URL, r))
			var got []int
			for _, d := range tt.sleep {
				resp, _ := e.get("api.example.com", "/?sleep="+d.String())
				got = append(got, resp.StatusCode)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("statuses: got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestOriginTimeStreamed: the time is charged when the response's body
// ends, not when its head arrives.
func TestOriginTimeStreamed(t *testing.T) {
	var e *env
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		e.clock.Advance(time.Duration(ms) * time.Millisecond) // the body takes ms to come
		io.WriteString(w, "end")
	}))
	t.Cleanup(origin.Close)
	r := rule("origin-time", 1000, time.Minute)
	r.CostFrom, r.Cost, r.Headers = "origin_time", new(0), "always"
	e = newEnv(t, oneDomain(origin.URL, r))
	e.get("api.example.com", "/?ms=700")
	resp, _ := e.get("api.example.com", "/?ms=0")
	if got := resp.Header.Get("X-RateLimit-Remaining"); got != "300" {
		t.Errorf("after 700 ms streamed: X-RateLimit-Remaining %q, want 300", got)
	}
}
