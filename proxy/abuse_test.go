package proxy

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

// TestSlowClients runs slow-header (slowloris), slow-body and slow-read
// attackers against a real server with short timeouts, while a normal
// client keeps sending requests: the normal client is served throughout,
// every attacking connection is cut by its timeout, the origin request a
// slow reader started is cancelled, and no goroutine is left behind.
func TestSlowClients(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	var bigCancelled atomic.Int64 // /big responses whose writes failed
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path != "/big" {
			io.WriteString(w, "ok")
			return
		}
		chunk := make([]byte, 64<<10)
		for range 1024 { // 64 MiB: more than any socket buffers hold
			if _, err := w.Write(chunk); err != nil {
				bigCancelled.Add(1)
				return
			}
		}
	}))
	defer origin.Close()
	cfg := oneDomain(origin.URL)
	cfg.Timeouts = rules.TimeoutsConfig{ReadHeader: 300 * time.Millisecond, Read: time.Second, Idle: time.Second}
	const writeIdle = 300 * time.Millisecond
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	transport := newTransport(table.Timeouts)
	defer transport.CloseIdleConnections()
	p, err := New(Options{Table: table, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	s := startHostileServer(t, p, table, guard.ListenerOptions{WriteIdleTimeout: writeIdle})
	defer s.stop(t)

	// Each attacker runs until the server closes its connection, which
	// must happen within the attack's limit. The server's view is what
	// counts: a closed socket may still hold unsent bytes in the kernel,
	// and that is no longer edge's memory or goroutine.
	type attack struct {
		name  string
		n     int
		limit time.Duration
		run   func(c net.Conn) error
	}
	drip := func(c net.Conn, head string, every time.Duration, b byte) error {
		if _, err := io.WriteString(c, head); err != nil {
			return err
		}
		for {
			time.Sleep(every)
			if _, err := c.Write([]byte{b}); err != nil {
				return err
			}
		}
	}
	attacks := []attack{
		{"slow headers", 40, 1500 * time.Millisecond, func(c net.Conn) error {
			return drip(c, "GET / HTTP/1.1\r\nHost: api.example.com\r\nX-A: ", 50*time.Millisecond, 'a')
		}},
		{"slow body", 10, 2500 * time.Millisecond, func(c net.Conn) error {
			return drip(c, hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Content-Length: 100000"), 50*time.Millisecond, 'a')
		}},
		{"slow chunked body", 10, 2500 * time.Millisecond, func(c net.Conn) error {
			return drip(c, hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked")+"100000\r\n", 50*time.Millisecond, 'a')
		}},
		{"slow read", 5, 2500 * time.Millisecond, func(c net.Conn) error {
			// Ask for a big response and never read it.
			if err := c.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
				return err
			}
			_, err := io.WriteString(c, hostile.Get("/big"))
			return err
		}},
	}

	var wg sync.WaitGroup
	failures := make(chan string, 100)
	start := time.Now()
	for _, a := range attacks {
		for range a.n {
			wg.Go(func() {
				c, err := net.Dial("tcp", s.addr)
				if err != nil {
					failures <- fmt.Sprintf("%s: dial: %v", a.name, err)
					return
				}
				defer c.Close()
				begun := time.Now()
				wg.Go(func() { a.run(c) }) // ends with an error once c is closed
				for {
					if at, ok := s.closedAt(c.LocalAddr().String()); ok {
						if d := at.Sub(begun); d > a.limit {
							failures <- fmt.Sprintf("%s: server closed the connection after %v, want under %v", a.name, d.Round(time.Millisecond), a.limit)
						}
						return
					}
					if time.Since(begun) > a.limit+time.Second {
						failures <- fmt.Sprintf("%s: server did not close the connection within %v", a.name, a.limit+time.Second)
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
	}

	// Meanwhile a normal client is served promptly.
	client := &http.Client{Transport: &http.Transport{}, Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	var served, slowest = 0, time.Duration(0)
	for time.Since(start) < 2500*time.Millisecond {
		r, _ := http.NewRequest("GET", "http://"+s.addr+"/", nil)
		r.Host = "api.example.com"
		begun := time.Now()
		resp, err := client.Do(r)
		if err != nil {
			t.Fatalf("normal client failed during the attack: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("normal client got %d during the attack", resp.StatusCode)
		}
		served++
		slowest = max(slowest, time.Since(begun))
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	if slowest > time.Second {
		t.Errorf("slowest normal request took %v during the attack, want under 1s", slowest)
	}
	wait.For(t, 5*time.Second, "the origin to see 5 slow readers' responses cancelled", func() bool { return bigCancelled.Load() >= 5 })
	if n := bigCancelled.Load(); n != 5 {
		t.Errorf("origin saw %d of 5 slow readers' responses cancelled", n)
	}
	t.Logf("%d normal requests served during the attack, slowest %v", served, slowest.Round(time.Millisecond))
}

// TestBadClock moves the injected clock back and forward by an hour, and
// to absurd values, through the proxy: no panic, Retry-After never below
// 1, and no more than the limit admitted in any period the counters live
// in.
func TestBadClock(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	const limit = 5
	penalty := rule("penalty", 1, 10*time.Second)
	penalty.MitigationTimeout = time.Hour
	penalty.Match = &rules.MatchConfig{PathPrefix: "/penalty"}
	perIP := rule("per-ip", limit, time.Minute)
	perIP.Match = &rules.MatchConfig{PathPrefix: "/api"}
	e := newEnv(t, oneDomain(origin.URL, perIP, penalty))
	t0 := e.clock.Now()
	set := func(tm time.Time) { e.clock.ns.Store(tm.UnixNano()) }
	send := func(target string) (allowed bool) {
		t.Helper()
		resp, _ := e.get("api.example.com", target)
		switch resp.StatusCode {
		case 200:
			return true
		case 429:
			ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if err != nil || ra < 1 {
				t.Fatalf("clock %v: Retry-After %q, want an integer ≥ 1", e.clock.Now(), resp.Header.Get("Retry-After"))
			}
			return false
		}
		t.Fatalf("clock %v: got %d", e.clock.Now(), resp.StatusCode)
		return false
	}
	count := func(n int) (allowed int) {
		for range n {
			if send("/api") {
				allowed++
			}
		}
		return allowed
	}

	steps := []struct {
		name string
		at   time.Time
		n    int
		want int // admitted
	}{
		{"fill the window", t0, 20, limit},
		{"an hour back", t0.Add(-time.Hour), 20, 0},
		{"a second back", t0.Add(-time.Second), 20, 0},
		{"back to now", t0.Add(30 * time.Second), 20, 0},
		{"an hour forward", t0.Add(time.Hour), 20, limit},
		{"an hour back again", t0, 20, 0},
		{"an hour forward again", t0.Add(time.Hour + time.Second), 20, 0},
	}
	for _, s := range steps {
		set(s.at)
		if got := count(s.n); got != s.want {
			t.Errorf("%s: admitted %d of %d, want %d", s.name, got, s.n, s.want)
		}
	}

	// A mitigation outlives the clock going back.
	set(t0)
	send("/penalty")
	if send("/penalty") {
		t.Fatal("penalty: second request allowed")
	}
	set(t0.Add(-time.Hour))
	if send("/penalty") {
		t.Error("penalty: allowed after the clock went back an hour")
	}

	// A random walk within ±1h: never more than the limit per period
	// the counters were in.
	rng := rand.New(rand.NewPCG(1, 2))
	periods := map[int64]bool{}
	allowed := 0
	for range 400 {
		at := t0.Add(time.Duration(rng.Int64N(int64(2*time.Hour))) - time.Hour)
		set(at)
		periods[at.Unix()/60] = true
		if send("/api") {
			allowed++
		}
	}
	if allowed > limit*len(periods) {
		t.Errorf("random walk: admitted %d over %d periods, want at most %d", allowed, len(periods), limit*len(periods))
	}

	// Absurd clocks: the zero time, the epoch, before it, far future.
	for _, at := range []time.Time{{}, time.Unix(0, 0), time.Unix(-1, 0), time.Unix(-1<<40, 0), time.Unix(0, 1<<63-1), time.Unix(1<<40, 0)} {
		set(at)
		for range 3 {
			send("/api")
			send("/penalty")
		}
	}
}

// TestKeyAndHostFlood sends requests from many client addresses and with
// many Host values: the counters never track more keys than max_keys, the
// heap does not grow with the flood, a host-keyed rule keeps limiting
// while client keys churn, and no request creates a metric series.
func TestKeyAndHostFlood(t *testing.T) {
	perIP := rule("per-ip", 1, time.Minute)
	perSite := rule("per-site", 100, time.Minute)
	perSite.Key = []string{"host"}
	cfg := rules.Config{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1",
		MaxKeys: 500,
		Domains: []rules.DomainConfig{{
			Hosts:   []string{"api.example.com"},
			Respond: &rules.ResponseConfig{Status: 200, Body: "ok"},
			Rules:   []rules.RuleConfig{perIP, perSite},
		}},
	}
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	clk := newClock()
	p, err := New(Options{Table: table, Registerer: reg, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	series := func() int {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, mf := range mfs {
			n += len(mf.GetMetric())
		}
		return n
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	serve := func(host, remote string) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host, r.RemoteAddr = host, remote
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		return w.Code
	}
	serve("api.example.com", "192.0.2.1:1")
	series0, heap0 := series(), heap()

	rng := rand.New(rand.NewPCG(3, 4))
	const flood = 10000
	allowed := 0
	for i := range flood {
		var remote string
		if i%2 == 0 {
			remote = net.JoinHostPort(net.IPv4(byte(rng.UintN(224)), byte(rng.UintN(256)), byte(rng.UintN(256)), byte(rng.UintN(256))).String(), "1")
		} else {
			remote = fmt.Sprintf("[2001:db8:%x:%x::1]:1", rng.UintN(1<<16), rng.UintN(1<<16))
		}
		if serve("api.example.com", remote) == 200 {
			allowed++
		}
		host := fmt.Sprintf("h%d.example.%d", rng.Uint64(), i)
		if code := serve(host, remote); code != 421 {
			t.Fatalf("random host %q: got %d, want 421", host, code)
		}
	}
	d := p.state.Load().domains[0]
	if n, c := d.store.Len(), d.store.Capacity(); n > c || c > 500 {
		t.Errorf("store tracks %d keys with capacity %d, want at most max_keys 500", n, c)
	}
	if allowed > 100 {
		t.Errorf("admitted %d requests in one period, want at most the per-site limit 100", allowed)
	}
	if got := series(); got != series0 {
		t.Errorf("metric series went from %d to %d during the flood", series0, got)
	}
	if grown := int64(heap()) - int64(heap0); grown > 8<<20 {
		t.Errorf("heap grew by %d bytes during the flood, want under 8 MiB", grown)
	}
	if got := testutil.ToFloat64(p.metrics.misdirected); got != flood {
		t.Errorf("misdirected = %v, want %d", got, flood)
	}
}

// TestIdentityThroughProxy: addresses in one IPv6 /64 are one client, an
// IPv4-mapped address is the IPv4 client, and forwarding fields from an
// untrusted peer are ignored.
func TestIdentityThroughProxy(t *testing.T) {
	cfg := oneDomain("", rule("per-ip", 1, time.Minute))
	cfg.Origin = ""
	cfg.Domains[0].Respond = &rules.ResponseConfig{Status: 200}
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Table: table, Now: newClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(remote string, hdr ...string) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host, r.RemoteAddr = "api.example.com", remote
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		return w.Code
	}
	steps := []struct {
		remote string
		hdr    []string
		want   int
	}{
		{"[2001:db8:1:2::1]:1", nil, 200},
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:2", nil, 429},
		{"[2001:db8:1:3::1]:1", nil, 200},
		{"192.0.2.1:1", nil, 200},
		{"[::ffff:192.0.2.1]:2", nil, 429},
		{"[::ffff:192.0.2.2]:2", nil, 200},
		{"192.0.2.2:3", []string{"X-Forwarded-For", "203.0.113.9", "X-Real-IP", "203.0.113.9", "Forwarded", "for=203.0.113.9"}, 429},
	}
	for _, s := range steps {
		if got := serve(s.remote, s.hdr...); got != s.want {
			t.Errorf("%s %v: got %d, want %d", s.remote, s.hdr, got, s.want)
		}
	}
}
