package origin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"
)

// group makes an Upstream of n servers (weights w, or 1) with o's
// policies.
func group(t *testing.T, n int, o UpstreamOptions, weights ...int) *Upstream {
	t.Helper()
	for i := range n {
		w := 1
		if i < len(weights) {
			w = weights[i]
		}
		u, _ := url.Parse(fmt.Sprintf("http://10.0.0.%d:80", i+1))
		o.Servers = append(o.Servers, ServerOptions{URL: u, Name: u.String(), Weight: w})
	}
	g, err := NewUpstream(o)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// pick runs one trip's first try at now and ends it with status and f.
func pick(g *Upstream, now time.Time, key []byte, status int, f Failure) *Server {
	trip := g.Start(now, key)
	s := next(&trip, now)
	if s != nil {
		trip.End(s, status, f, 0, now)
	}
	return s
}

// next is trip.Next for a trip that never waits (no group here has a
// limit).
func next(trip *Trip, now time.Time) *Server {
	s, err := trip.Next(context.Background(), now)
	if err != nil {
		panic(err)
	}
	return s
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestWeightedRoundRobinShares(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
	}{
		{"equal", []int{1, 1, 1}},
		{"5:3:2", []int{5, 3, 2}},
		{"1:10", []int{1, 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := group(t, len(tt.weights), UpstreamOptions{}, tt.weights...)
			count := make(map[*Server]int)
			const n = 10000
			for range n {
				count[pick(g, t0, nil, 200, 0)]++
			}
			total := 0
			for _, w := range tt.weights {
				total += w
			}
			for i, s := range g.Servers() {
				got, want := float64(count[s])/n, float64(tt.weights[i])/float64(total)
				if math.Abs(got-want) > 0.01 {
					t.Errorf("server %d: got share %.4f, want %.4f within 0.01", i, got, want)
				}
			}
		})
	}
}

func TestSmoothRoundRobinSpreads(t *testing.T) {
	// nginx's example: weights 5, 1, 1 give a a b a c a a, not a a a a a b c.
	g := group(t, 3, UpstreamOptions{}, 5, 1, 1)
	var got []int
	for range 7 {
		s := pick(g, t0, nil, 200, 0)
		for i, o := range g.Servers() {
			if o == s {
				got = append(got, i)
			}
		}
	}
	want := []int{0, 0, 1, 0, 2, 0, 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got order %v, want %v", got, want)
	}
}

func TestHashMovesFewKeys(t *testing.T) {
	for _, n := range []int{3, 5, 10} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			g := group(t, n, UpstreamOptions{Balance: Hash, Passive: &PassiveOptions{MaxFails: 1, FailWindow: time.Minute, EjectFor: time.Hour, On: FailConnect}})
			const keys = 10000
			before := make([]*Server, keys)
			for k := range keys {
				before[k] = pick(g, t0, fmt.Appendf(nil, "client-%d", k), 200, 0)
			}
			// One server goes (ejected).
			gone := g.Servers()[1]
			g.failed(gone, t0)
			if gone.Healthy(t0) {
				t.Fatal("server not ejected")
			}
			moved := 0
			for k := range keys {
				s := pick(g, t0, fmt.Appendf(nil, "client-%d", k), 200, 0)
				if s == gone {
					t.Fatalf("key %d still goes to the ejected server", k)
				}
				if s != before[k] {
					moved++
				}
			}
			limit := keys/n + keys*2/100
			if moved > limit {
				t.Errorf("%d of %d keys moved, want at most 1/N + 2%% = %d", moved, keys, limit)
			}
			// Sticky: the same key, the same server.
			for k := range 100 {
				key := fmt.Appendf(nil, "client-%d", k)
				if a, b := pick(g, t0, key, 200, 0), pick(g, t0, key, 200, 0); a != b {
					t.Fatalf("key %d went to two servers", k)
				}
			}
		})
	}
}

func TestHashRetryGoesToNextInOrder(t *testing.T) {
	g := group(t, 4, UpstreamOptions{Balance: Hash, Retries: RetryOptions{Attempts: 3, On: FailConnect, Budget: 1}})
	key := []byte("sticky")
	var first [2][]*Server
	for round := range 2 {
		trip := g.Start(t0, key)
		for range 4 {
			s := next(&trip, t0)
			first[round] = append(first[round], s)
			trip.End(s, 0, FailConnect, 0, t0)
		}
	}
	if fmt.Sprint(first[0]) != fmt.Sprint(first[1]) {
		t.Errorf("hash order differs between trips: %v, %v", first[0], first[1])
	}
}

func TestPassiveEjection(t *testing.T) {
	po := &PassiveOptions{MaxFails: 3, FailWindow: 10 * time.Second, EjectFor: 30 * time.Second, On: FailConnect | Fail502}
	var ejected []string
	g := group(t, 4, UpstreamOptions{Passive: po, OnEject: func(s *Server, r string) { ejected = append(ejected, s.Name+" "+r) }})
	bad := g.Servers()[0]
	trip := g.Start(t0, nil)
	fail := func(s *Server, at time.Time, f Failure) {
		s.st.inFlight.Add(1)
		trip.End(s, 0, f, 0, at)
	}
	fail(bad, t0, FailConnect)
	fail(bad, t0.Add(time.Second), Fail502)
	if !bad.Healthy(t0.Add(time.Second)) {
		t.Fatal("ejected after 2 failures, want 3")
	}
	fail(bad, t0.Add(2*time.Second), FailTimeout) // not among On
	if !bad.Healthy(t0.Add(2 * time.Second)) {
		t.Fatal("a failure not among passive.on counted")
	}
	fail(bad, t0.Add(3*time.Second), FailConnect)
	if bad.Healthy(t0.Add(3 * time.Second)) {
		t.Fatal("not ejected after max_fails")
	}
	if p, _ := bad.Ejections(); p != 1 || len(ejected) != 1 {
		t.Errorf("ejections %d, hooks %v; want 1", p, ejected)
	}
	for range 100 {
		if s := pick(g, t0.Add(4*time.Second), nil, 200, 0); s == bad {
			t.Fatal("an ejected server was chosen")
		}
	}
	// Re-admitted after eject_for.
	if !bad.Healthy(t0.Add(33*time.Second + time.Nanosecond)) {
		t.Error("not re-admitted after eject_for")
	}
	// Failures further apart than fail_window do not add up.
	other := g.Servers()[1]
	for i := range 5 {
		fail(other, t0.Add(time.Duration(i)*11*time.Second), FailConnect)
	}
	if !other.Healthy(t0.Add(45 * time.Second)) {
		t.Error("failures 11 s apart ejected, with fail_window 10s")
	}
}

func TestPassiveEjectsAtMostHalf(t *testing.T) {
	po := &PassiveOptions{MaxFails: 1, FailWindow: time.Minute, EjectFor: time.Minute, On: FailConnect}
	g := group(t, 4, UpstreamOptions{Passive: po})
	for _, s := range g.Servers() {
		g.failed(s, t0)
	}
	out := 0
	for _, s := range g.Servers() {
		if !s.Healthy(t0) {
			out++
		}
	}
	if out != 2 {
		t.Errorf("%d of 4 ejected, want at most half (2)", out)
	}
}

func TestPanicMode(t *testing.T) {
	var panics int
	g := group(t, 4, UpstreamOptions{OnPanic: func() { panics++ }})
	o := CheckOptions{HealthyAfter: 2, UnhealthyAfter: 1}
	// Active checks may take out any number: three of four are down.
	for _, s := range g.Servers()[:3] {
		s.Checked(false, "status 500", o, t0)
	}
	seen := make(map[*Server]bool)
	for range 100 {
		seen[pick(g, t0, nil, 200, 0)] = true
	}
	if len(seen) != 4 || panics != 100 || g.Panics() != 100 {
		t.Errorf("in panic mode %d servers chosen, %d panics counted; want all 4 and 100", len(seen), panics)
	}
	// With two of four healthy (half), no panic: only the healthy ones.
	g.Servers()[0].Checked(true, "passed", o, t0)
	g.Servers()[0].Checked(true, "passed", o, t0)
	clear(seen)
	for range 100 {
		seen[pick(g, t0, nil, 200, 0)] = true
	}
	if len(seen) != 2 || !seen[g.Servers()[0]] || !seen[g.Servers()[3]] {
		t.Errorf("with half healthy chose %d servers, want the 2 healthy ones", len(seen))
	}
}

func TestActiveChecks(t *testing.T) {
	g := group(t, 2, UpstreamOptions{Passive: &PassiveOptions{MaxFails: 1, FailWindow: time.Minute, EjectFor: time.Hour, On: FailConnect}})
	s := g.Servers()[0]
	o := CheckOptions{HealthyAfter: 2, UnhealthyAfter: 3}
	tests := []struct {
		ok      bool
		healthy bool
	}{{false, true}, {false, true}, {true, true}, {false, true}, {false, true}, {false, false}, {true, false}, {false, false}, {true, false}, {true, true}}
	for i, tt := range tests {
		now := t0.Add(time.Duration(i) * time.Second)
		s.Checked(tt.ok, "", o, now)
		if got := s.Healthy(now); got != tt.healthy {
			t.Fatalf("after check %d (ok %v): healthy %v, want %v", i, tt.ok, got, tt.healthy)
		}
	}
	if _, a := s.Ejections(); a != 1 {
		t.Errorf("active ejections %d, want 1", a)
	}
	// A passive ejection ends after healthy_after passed checks.
	g.failed(s, t0.Add(time.Minute))
	if s.Healthy(t0.Add(time.Minute)) {
		t.Fatal("not ejected")
	}
	s.Checked(true, "", o, t0.Add(61*time.Second))
	if s.Healthy(t0.Add(61 * time.Second)) {
		t.Fatal("re-admitted after one passed check, want healthy_after 2")
	}
	s.Checked(true, "", o, t0.Add(62*time.Second))
	if !s.Healthy(t0.Add(62 * time.Second)) {
		t.Error("not re-admitted after healthy_after passed checks")
	}
}

var refused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Failure
	}{
		{"dial refused", refused, FailConnect},
		{"dial wrapped", fmt.Errorf("x: %w", refused), FailConnect},
		{"timeout", &net.OpError{Op: "read", Err: timeoutErr{}}, FailTimeout},
		{"reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, FailReset},
		{"eof", errors.New("EOF"), FailReset},
	}
	for _, tt := range tests {
		if got := Classify(tt.err); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestMayRetry(t *testing.T) {
	ro := RetryOptions{Attempts: 1, On: FailConnect | FailReset, Budget: 1}
	tests := []struct {
		name string
		f    Failure
		safe bool
		want bool
	}{
		{"connect error", FailConnect, true, true},
		{"reset, safe", FailReset, true, true},
		{"unsafe (a POST that reached the origin)", FailReset, false, false},
		{"502 not in on", Fail502, true, false},
		{"no failure", 0, true, false},
	}
	for _, tt := range tests {
		g := group(t, 3, UpstreamOptions{Retries: ro})
		trip := g.Start(t0, nil)
		next(&trip, t0)
		if got := trip.MayRetry(tt.f, tt.safe, t0); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
	// Attempts 1: one more server, not two.
	g := group(t, 3, UpstreamOptions{Retries: ro})
	trip := g.Start(t0, nil)
	a := next(&trip, t0)
	if !trip.MayRetry(FailConnect, true, t0) {
		t.Fatal("first retry refused")
	}
	if b := next(&trip, t0); b == a {
		t.Fatal("retried on the same server")
	}
	if trip.MayRetry(FailConnect, true, t0) {
		t.Error("a second retry allowed with attempts 1")
	}
	// Every server tried.
	g = group(t, 2, UpstreamOptions{Retries: RetryOptions{Attempts: 5, On: FailConnect, Budget: 1}})
	trip = g.Start(t0, nil)
	next(&trip, t0)
	trip.MayRetry(FailConnect, true, t0)
	next(&trip, t0)
	if trip.MayRetry(FailConnect, true, t0) || next(&trip, t0) != nil {
		t.Error("a retry allowed with every server tried")
	}
	if n := g.RetryCounts()["no_server"]; n != 1 {
		t.Errorf("no_server retries %d, want 1", n)
	}
}

func TestRetryBudget(t *testing.T) {
	ro := RetryOptions{Attempts: 1, On: FailConnect, Budget: 0.2}
	g := group(t, 3, UpstreamOptions{Retries: ro})
	retry := func(now time.Time) bool {
		trip := g.Start(now, nil)
		next(&trip, now)
		return trip.MayRetry(FailConnect, true, now)
	}
	// A quiet group still retries: 3 a second whatever the share.
	for i := range 3 {
		if !retry(t0) {
			t.Fatalf("retry %d of a quiet second refused", i)
		}
	}
	if retry(t0) {
		t.Error("a 4th retry in a second of 4 requests allowed (20% budget)")
	}
	// 100 requests over the next seconds: 20% of the 10 s window.
	for i := range 100 {
		g.Start(t0.Add(time.Second+time.Duration(i)*time.Millisecond), nil)
	}
	allowed := 0
	for i := range 40 {
		if retry(t0.Add(2*time.Second + time.Duration(i)*time.Millisecond)) {
			allowed++
		}
	}
	// 144 requests, of which 3+allowed retries: at most 20%.
	if allowed < 20 || allowed > 26 {
		t.Errorf("%d retries allowed among 144 requests, want about 20%% in all", allowed)
	}
	if n := g.RetryCounts()["budget_exhausted"]; n == 0 {
		t.Error("no budget_exhausted retries counted")
	}
	// The window moves on: 11 s later the old requests are gone, and the
	// floor of 3 a second holds again.
	later := t0.Add(20 * time.Second)
	for i := range 3 {
		if !retry(later) {
			t.Errorf("retry %d after the window refused", i)
		}
	}
}

func TestReloadKeepsState(t *testing.T) {
	po := &PassiveOptions{MaxFails: 1, FailWindow: time.Minute, EjectFor: time.Hour, On: FailConnect}
	old := group(t, 3, UpstreamOptions{Passive: po})
	old.failed(old.Servers()[1], t0)
	old.Servers()[2].Checked(false, "status 500", CheckOptions{UnhealthyAfter: 1, HealthyAfter: 1}, t0)
	// The new configuration keeps servers 1 and 2 (weights changed) and
	// adds one.
	var o UpstreamOptions
	o.Passive, o.Previous = po, old
	for i, s := range old.Servers()[1:] {
		o.Servers = append(o.Servers, ServerOptions{URL: s.URL, Name: s.Name, Weight: i + 2})
	}
	u, _ := url.Parse("http://10.0.0.9:80")
	o.Servers = append(o.Servers, ServerOptions{URL: u, Name: u.String(), Weight: 1})
	g, err := NewUpstream(o)
	if err != nil {
		t.Fatal(err)
	}
	s := g.Servers()
	if s[0].Healthy(t0) || s[1].Healthy(t0) || !s[2].Healthy(t0) {
		t.Errorf("healthy after reload: %v %v %v, want false false true", s[0].Healthy(t0), s[1].Healthy(t0), s[2].Healthy(t0))
	}
	if _, outcome := s[1].LastCheck(); outcome != "status 500" {
		t.Errorf("last check after reload %q, want kept", outcome)
	}
	if s[0].Weight != 2 {
		t.Errorf("weight %d, want the new config's 2", s[0].Weight)
	}
}

// BenchmarkTrip is one request's passage through a group, a try that
// answers 200: one server against three (round robin, passive on, the
// retry budget counted), and three with one drained, side by side.
func BenchmarkTrip(b *testing.B) {
	po := &PassiveOptions{MaxFails: 3, FailWindow: 10 * time.Second, EjectFor: 30 * time.Second, On: FailConnect}
	for _, c := range []struct{ n, drained int }{{1, 0}, {3, 0}, {3, 1}} {
		n := c.n
		b.Run(fmt.Sprintf("servers=%d,drained=%d", n, c.drained), func(b *testing.B) {
			o := UpstreamOptions{Retries: RetryOptions{Attempts: 1, On: FailConnect, Budget: 0.2}, Drains: new(Drains)}
			if n > 1 {
				o.Passive = po
			}
			var t testing.T
			g := group(&t, n, o)
			for _, s := range g.Servers()[:c.drained] {
				o.Drains.Drain(s.Name)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					trip := g.Start(t0, nil)
					s := next(&trip, t0)
					trip.End(s, 200, 0, time.Millisecond, t0)
				}
			})
		})
	}
}
