package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// newCostOrigin starts an origin that answers as the request's query says:
// status=N answers N (default 200); cost=V (repeatable) reports V in
// X-Edge-Cost; trailer=V reports V in an announced trailer, late=V in one
// that was not announced.
func newCostOrigin(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if vs, ok := q["cost"]; ok {
			w.Header()["X-Edge-Cost"] = vs
		}
		if _, ok := q["trailer"]; ok {
			w.Header().Set("Trailer", "X-Edge-Cost, X-Other")
		}
		status := http.StatusOK
		if s := q.Get("status"); s != "" {
			status, _ = strconv.Atoi(s)
		}
		w.WriteHeader(status)
		io.WriteString(w, "body")
		if _, ok := q["late"]; ok {
			// Chunked, or net/http would send a Content-Length and no
			// trailers it was not told of before the body.
			w.(http.Flusher).Flush()
		}
		if v, ok := q["trailer"]; ok {
			w.Header()["X-Edge-Cost"] = v
			w.Header().Set("X-Other", "kept")
		}
		if v := q.Get("late"); v != "" {
			w.Header().Set(http.TrailerPrefix+"X-Edge-Cost", v)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestResponseCostCharged: the cost an origin reports in its headers or
// trailers is charged to the client's key on top of the request's own
// count, refuses the next requests once over the limit, and never reaches
// the client.
func TestResponseCostCharged(t *testing.T) {
	origin := newCostOrigin(t)
	cpu := rule("cpu", 10, time.Minute)
	cpu.ResponseCostHeader = "x-edge-cost"
	tests := []struct {
		name  string
		steps []string // request targets
		want  []int    // their statuses
	}{
		{"header", []string{"/?cost=8", "/", "/"}, []int{200, 200, 429}},
		{"announced trailer", []string{"/?trailer=8", "/", "/"}, []int{200, 200, 429}},
		{"trailer not announced", []string{"/?late=8", "/", "/"}, []int{200, 200, 429}},
		{"zero costs only the request", []string{"/?cost=0", "/?cost=0", "/?cost=0", "/"}, []int{200, 200, 200, 200}},
		{"charged even on a refusal of the origin", []string{"/?cost=9&status=500", "/"}, []int{500, 429}},
		// It cannot refuse the request already answered.
		{"over the limit at once", []string{"/?cost=1000", "/"}, []int{200, 429}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, oneDomain(origin.URL, cpu))
			var got []int
			for _, target := range tt.steps {
				resp, body := e.get("api.example.com", target)
				got = append(got, resp.StatusCode)
				if v, ok := resp.Header["X-Edge-Cost"]; ok {
					t.Errorf("%s: client saw X-Edge-Cost %q in the headers", target, v)
				}
				if v, ok := resp.Trailer["X-Edge-Cost"]; ok {
					t.Errorf("%s: client saw X-Edge-Cost %q in the trailers", target, v)
				}
				if strings.Contains(target, "trailer") && (resp.Trailer.Get("X-Other") != "kept" || body != "body") {
					t.Errorf("%s: other trailer %q, body %q; want \"kept\", \"body\"", target, resp.Trailer.Get("X-Other"), body)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("statuses: got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestResponseCostInvalid: a reported cost that is not one non-negative
// integer of at most 1000000 is not charged, and is counted.
func TestResponseCostInvalid(t *testing.T) {
	origin := newCostOrigin(t)
	cpu := rule("cpu", 5, time.Minute)
	cpu.ResponseCostHeader = "X-Edge-Cost"
	tests := []struct {
		name    string
		query   string
		allowed int // requests allowed after the reporting one
		invalid float64
	}{
		{"valid", "cost=3", 1, 0},
		{"valid with spaces", "cost=%203%09", 1, 0},
		{"valid at the maximum", "cost=1000000", 0, 0},
		{"valid with leading zeros", "cost=00000000003", 1, 0},
		{"negative", "cost=-3", 4, 1},
		{"plus sign", "cost=%2B3", 4, 1},
		{"not a number", "cost=lots", 4, 1},
		{"fraction", "cost=2.5", 4, 1},
		{"exponent", "cost=1e3", 4, 1},
		{"empty", "cost=", 4, 1},
		{"over the maximum", "cost=1000001", 4, 1},
		{"huge", "cost=99999999999999999999999", 4, 1},
		{"repeated", "cost=3&cost=3", 4, 1},
		{"list in one line", "cost=3,3", 4, 1},
		{"invalid trailer", "trailer=x", 4, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, oneDomain(origin.URL, cpu))
			if resp, _ := e.get("api.example.com", "/?"+tt.query); resp.StatusCode != 200 {
				t.Fatalf("reporting request: got %d, want 200", resp.StatusCode)
			}
			allowed := 0
			for range 6 {
				if resp, _ := e.get("api.example.com", "/"); resp.StatusCode == 200 {
					allowed++
				}
			}
			if allowed != tt.allowed {
				t.Errorf("allowed after it: got %d, want %d", allowed, tt.allowed)
			}
			if got := testutil.ToFloat64(e.proxy.metrics.responseCostInvalid.WithLabelValues("api.example.com", "cpu")); got != tt.invalid {
				t.Errorf("edge_response_cost_invalid_total: got %v, want %v", got, tt.invalid)
			}
		})
	}
}

// TestCostFieldRemovedEverywhere: the domain's cost field is removed from
// responses to requests that no charging rule matched too.
func TestCostFieldRemovedEverywhere(t *testing.T) {
	origin := newCostOrigin(t)
	cpu := rule("cpu", 10, time.Minute)
	cpu.ResponseCostHeader = "X-Edge-Cost"
	cpu.Match = &rules.MatchConfig{PathPrefix: "/api/"}
	e := newEnv(t, oneDomain(origin.URL, cpu))
	for _, target := range []string{"/other?cost=5", "/other?trailer=5", "/other?late=5"} {
		resp, _ := e.get("api.example.com", target)
		if resp.Header.Get("X-Edge-Cost") != "" || resp.Trailer.Get("X-Edge-Cost") != "" {
			t.Errorf("%s: client saw the cost: headers %v, trailers %v", target, resp.Header, resp.Trailer)
		}
	}
}

// tallyWatch is a domain's window.Counter that records how its tallies are
// used: every tally must be ended exactly once, and nothing charged after.
type tallyWatch struct {
	window.Counter
	mu           sync.Mutex
	begun, ended int
	charged      int64
	misuse       []string
}

func (c *tallyWatch) Begin() window.Tally {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.begun++
	return &watchedTally{Tally: c.Counter.Begin(), c: c}
}

func (c *tallyWatch) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.begun - c.ended
}

type watchedTally struct {
	window.Tally
	c     *tallyWatch
	ended bool
}

func (t *watchedTally) Charge(id window.ID, n int64, now time.Time) {
	t.c.mu.Lock()
	if t.ended {
		t.c.misuse = append(t.c.misuse, "charged after End")
	}
	t.c.charged += n
	t.c.mu.Unlock()
	t.Tally.Charge(id, n, now)
}

func (t *watchedTally) End() {
	t.c.mu.Lock()
	if t.ended {
		t.c.misuse = append(t.c.misuse, "ended twice")
	}
	t.ended = true
	t.c.ended++
	t.c.mu.Unlock()
	t.Tally.End()
}

// TestTallyEndsOnceOnEveryPath: a tally kept open for charges after the
// response is ended exactly once, whatever becomes of the request:
// answered, refused, its body too large, its origin down or too slow, its
// client gone in the middle of the response.
func TestTallyEndsOnceOnEveryPath(t *testing.T) {
	release, clientGone := make(chan struct{}), make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Edge-Cost", "2")
		switch r.URL.Path {
		case "/slow":
			<-release
		case "/stream":
			w.WriteHeader(200)
			io.WriteString(w, "first part")
			w.(http.Flusher).Flush()
			<-clientGone
			// edge finds the client gone when it writes this.
			for range 64 {
				if _, err := w.Write(make([]byte, 16<<10)); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(origin.Close)
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()

	cpu := rule("cpu", 1000, time.Minute)
	cpu.ResponseCostHeader = "X-Edge-Cost"
	narrow := rule("narrow", 1000, time.Minute)
	narrow.Match = &rules.MatchConfig{PathPrefix: "/narrow"}
	narrow.Limit = 1
	cfg := oneDomain(origin.URL, cpu, narrow)
	cfg.Domains[0].MaxRequestBody = 4
	cfg.Domains = append(cfg.Domains, rules.DomainConfig{Hosts: []string{"down.example.com"}, Origin: deadURL, Rules: []rules.RuleConfig{cpu}})
	cfg.Timeouts.Upstream = 200 * time.Millisecond
	e := newEnv(t, cfg)
	watches := make([]*tallyWatch, 2)
	for i, d := range e.proxy.state.Load().domains {
		watches[i] = &tallyWatch{Counter: d.counter}
		d.counter = watches[i]
	}

	send := func(host, method, target, body string) int {
		resp, _ := e.do(method, host, target, nil, body)
		return resp.StatusCode
	}
	tests := []struct {
		name string
		run  func() int
		want int
	}{
		{"answered", func() int { return send("api.example.com", "GET", "/", "") }, 200},
		{"answered to HEAD", func() int { return send("api.example.com", "HEAD", "/", "") }, 200},
		{"refused by another rule", func() int {
			send("api.example.com", "GET", "/narrow", "")
			return send("api.example.com", "GET", "/narrow", "")
		}, 429},
		{"body too large", func() int { return send("api.example.com", "POST", "/", "too large") }, 413},
		{"origin down", func() int { return send("down.example.com", "GET", "/", "") }, 502},
		{"origin too slow", func() int { return send("api.example.com", "GET", "/slow", "") }, 504},
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
			wait.For(t, 5*time.Second, "every tally ended", func() bool { return watches[0].open() == 0 && watches[1].open() == 0 })
		})
	}
	releaseOnce.Do(func() { close(release) })
	wait.For(t, 5*time.Second, "every tally ended", func() bool { return watches[0].open() == 0 && watches[1].open() == 0 })
	for i, w := range watches {
		w.mu.Lock()
		if len(w.misuse) > 0 {
			t.Errorf("domain %d: %v", i, w.misuse)
		}
		if w.begun == 0 {
			t.Errorf("domain %d: no tally begun", i)
		}
		w.mu.Unlock()
	}
	// Charged 2 for each response that came: "answered", HEAD, the first
	// request to /narrow and the stream the client left.
	if got := watches[0].charged; got != 8 {
		t.Errorf("charged: got %d, want 8", got)
	}
}

// TestCountStatus: a login rule counts failed logins (the origin answers
// 401 or 403) and not successful ones, and refuses before forwarding once
// the failures so far reach its limit, a success included.
func TestCountStatus(t *testing.T) {
	origin := newCostOrigin(t)
	logins := rule("logins", 5, time.Minute)
	logins.Match = &rules.MatchConfig{PathPrefix: "/login"}
	logins.CountStatus = []int{401, 403}
	const (
		ok     = "/login"
		failed = "/login?status=401"
		denied = "/login?status=403"
		broken = "/login?status=500"
	)
	repeat := func(n int, target string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = target
		}
		return out
	}
	type step struct {
		target string
		want   int
	}
	steps := func(targets []string, want int) []step {
		out := make([]step, len(targets))
		for i, target := range targets {
			out[i] = step{target, want}
		}
		return out
	}
	tests := []struct {
		name    string
		steps   []step
		advance time.Duration // then one failed login
		after   int
	}{
		{"successes never count", steps(repeat(20, ok), 200), 0, 401},
		{"five failures, then refused", append(steps(repeat(5, failed), 401),
			step{failed, 429}, step{ok, 429}, step{denied, 429}), 0, 429},
		{"successes between failures", append(append(steps(repeat(4, failed), 401),
			steps(repeat(10, ok), 200)...), step{denied, 403}, step{ok, 429}), 0, 429},
		{"other statuses do not count", append(steps(repeat(10, broken), 500),
			steps(repeat(5, denied), 403)...), 0, 429},
		{"the window slides", append(steps(repeat(5, failed), 401), step{failed, 429}), 2 * time.Minute, 401},
		{"other paths are not the rule's", append(steps(repeat(5, failed), 401), step{"/other?status=401", 401}), 0, 429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, oneDomain(origin.URL, logins))
			for i, s := range tt.steps {
				if resp, _ := e.get("api.example.com", s.target); resp.StatusCode != s.want {
					t.Fatalf("step %d, %s: got %d, want %d", i, s.target, resp.StatusCode, s.want)
				}
			}
			e.clock.Advance(tt.advance)
			if resp, _ := e.get("api.example.com", failed); resp.StatusCode != tt.after {
				t.Errorf("then a failed login: got %d, want %d", resp.StatusCode, tt.after)
			}
		})
	}
}

// TestCountStatusWithResponseCost: with both keys, the reported cost is
// charged only when the status counts.
func TestCountStatusWithResponseCost(t *testing.T) {
	origin := newCostOrigin(t)
	r := rule("expensive-failures", 10, time.Minute)
	r.CountStatus = []int{401}
	r.ResponseCostHeader = "X-Edge-Cost"
	e := newEnv(t, oneDomain(origin.URL, r))
	for i, s := range []struct {
		target string
		want   int
	}{
		{"/?cost=100", 200},             // not counted: 200 is not listed
		{"/?status=401&cost=3", 401},    // 1 + 3
		{"/?status=401&trailer=5", 401}, // 1 + 5: 10
		{"/", 429},
	} {
		if resp, _ := e.get("api.example.com", s.target); resp.StatusCode != s.want {
			t.Fatalf("step %d, %s: got %d, want %d", i, s.target, resp.StatusCode, s.want)
		}
	}
}

// TestResponseCostAlone: with cost 0 only the reported cost counts (the
// CPU time a request took, as GitHub's secondary limits), and a key with
// no room left is refused even at cost 0.
func TestResponseCostAlone(t *testing.T) {
	origin := newCostOrigin(t)
	zero := 0
	cpu := rule("cpu-ms", 100, time.Minute)
	cpu.Cost = &zero
	cpu.ResponseCostHeader = "X-Edge-Cost"
	e := newEnv(t, oneDomain(origin.URL, cpu))
	for i, s := range []struct {
		target string
		want   int
	}{
		{"/", 200}, {"/", 200}, {"/", 200}, // no reported cost: nothing counted
		{"/?cost=60", 200},
		{"/?trailer=39", 200}, // 99: room for one more
		{"/?cost=5", 200},     // 104
		{"/", 429},
	} {
		if resp, _ := e.get("api.example.com", s.target); resp.StatusCode != s.want {
			t.Fatalf("step %d, %s: got %d, want %d", i, s.target, resp.StatusCode, s.want)
		}
	}
}

// TestAllowSkipsRequestCost: a client a rule exempts is not refused by
// that rule for a cost header it cannot price either.
func TestAllowSkipsRequestCost(t *testing.T) {
	origin := newCostOrigin(t)
	priced := rule("priced", 10, time.Minute)
	priced.CostHeader, priced.MaxCost = "X-Cost", 5
	tests := []struct {
		name  string
		allow []string
		want  int
	}{
		{"client exempt", []string{"127.0.0.0/8"}, 200},
		{"client not exempt", []string{"10.0.0.0/8"}, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := priced
			r.Allow = &rules.AllowConfig{CIDRs: tt.allow}
			e := newEnv(t, oneDomain(origin.URL, r))
			if resp, _ := e.do("GET", "api.example.com", "/", map[string]string{"X-Cost": "lots"}, ""); resp.StatusCode != tt.want {
				t.Errorf("bad X-Cost: got %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
}
