package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

// capEnv is a real http.Server serving a Proxy through a Listener with a
// connection cap, wired as cmd/edge wires its public server. Its origin
// answers /block only once the test releases it.
type capEnv struct {
	t       *testing.T
	p       *Proxy
	srv     *http.Server
	addr    string
	done    chan error
	logs    *syncBuffer
	clk     *clock
	idle    chan string         // remote address of each connection the server saw go idle
	capped  chan guard.CapEvent // each OnCapped call
	blocked chan struct{}       // one per /block request that reached the origin
	release chan struct{}       // one per /block request allowed to finish
	served  atomic.Int64        // requests other than /block that reached the origin
}

// syncBuffer is a bytes.Buffer safe for concurrent use, for logs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func startCapEnv(t *testing.T, maxConns int) *capEnv {
	t.Helper()
	e := &capEnv{
		t:       t,
		done:    make(chan error, 1),
		logs:    &syncBuffer{},
		clk:     newClock(),
		idle:    make(chan string, 16),
		capped:  make(chan guard.CapEvent, 16),
		blocked: make(chan struct{}, 16),
		release: make(chan struct{}, 16),
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			e.blocked <- struct{}{}
			<-e.release
		} else {
			e.served.Add(1)
		}
		io.WriteString(w, "origin "+r.URL.Path)
	}))
	t.Cleanup(origin.Close)
	table, err := rules.Compile(oneDomain(origin.URL))
	if err != nil {
		t.Fatal(err)
	}
	transport := newTransport(table.Timeouts)
	t.Cleanup(transport.CloseIdleConnections)
	e.p, err = New(Options{Table: table, Registerer: prometheus.NewRegistry(), Transport: transport,
		Now: e.clk.Now, Logger: slog.New(slog.NewTextHandler(e.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	l := guard.NewListener(ln, guard.ListenerOptions{
		MaxConnections: maxConns,
		OnReject:       e.p.FramingRefused,
		OnCapped: func(ev guard.CapEvent) {
			e.p.ConnectionsCapped(ev.Max, ev.ClosedIdle)
			e.capped <- ev
		},
		OnConnections: e.p.ConnectionsOpen,
	})
	var conns sync.WaitGroup
	e.srv = &http.Server{
		Handler:  e.p,
		ErrorLog: discardLog,
		ConnState: func(c net.Conn, st http.ConnState) {
			l.ConnState(c, st)
			switch st {
			case http.StateNew:
				conns.Add(1)
			case http.StateIdle:
				e.idle <- c.RemoteAddr().String()
			case http.StateClosed, http.StateHijacked:
				conns.Done()
			}
		},
	}
	go func() { e.done <- e.srv.Serve(l) }()
	t.Cleanup(func() {
		close(e.release) // let blocked origin handlers finish
		e.srv.Close()
		if err := <-e.done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		conns.Wait()
	})
	return e
}

// capClient is one client connection.
type capClient struct {
	conn net.Conn
	br   *bufio.Reader
}

func (e *capEnv) dial() *capClient {
	e.t.Helper()
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		e.t.Fatal(err)
	}
	return &capClient{conn: conn, br: bufio.NewReader(conn)}
}

// send writes a keep-alive GET of path.
func (c *capClient) send(t *testing.T, path string) {
	t.Helper()
	if _, err := io.WriteString(c.conn, hostile.Get(path)); err != nil {
		t.Fatalf("writing GET %s: %v", path, err)
	}
}

// read reads one response and returns its status and body, or 0 and the
// error.
func (c *capClient) read() (int, string) {
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(b)
}

func (c *capClient) get(t *testing.T, path string) (int, string) {
	t.Helper()
	c.send(t, path)
	return c.read()
}

// waitIdle waits until the server has seen n connections go idle, and
// returns their addresses in that order.
func (e *capEnv) waitIdle(n int) []string {
	var addrs []string
	for range n {
		addrs = append(addrs, <-e.idle)
	}
	return addrs
}

func TestListenerCapClosesIdleConnections(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after startCapEnv's cleanup
	e := startCapEnv(t, 3)

	clients := []*capClient{e.dial(), e.dial(), e.dial()}
	for i, c := range clients {
		if got, body := c.get(t, "/a"); got != 200 {
			t.Fatalf("client %d: got %d (%s), want 200", i, got, body)
		}
		// One at a time, so that the order they went idle is known.
		if idle := e.waitIdle(1); idle[0] != c.conn.LocalAddr().String() {
			t.Fatalf("client %d: idle %v, want %s", i, idle, c.conn.LocalAddr())
		}
	}

	// A fourth connection: the longest idle one (client 0) is closed for it.
	fourth := e.dial()
	if got, body := fourth.get(t, "/b"); got != 200 || body != "origin /b" {
		t.Fatalf("fourth: got %d %q, want 200 %q", got, body, "origin /b")
	}
	if ev := <-e.capped; ev != (guard.CapEvent{Max: 3, ClosedIdle: true}) {
		t.Errorf("cap event: got %+v, want {Max:3 ClosedIdle:true}", ev)
	}
	if n, err := clients[0].conn.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("client 0 (longest idle): read %d, %v, want io.EOF", n, err)
	}
	e.waitIdle(1) // the fourth's
	// The others are still open and served.
	for i, c := range clients[1:] {
		if got, body := c.get(t, "/c"); got != 200 {
			t.Errorf("client %d: got %d (%s), want 200", i+1, got, body)
		}
	}
	e.waitIdle(2)

	if got := testutil.ToFloat64(e.p.metrics.capped); got != 1 {
		t.Errorf("edge_connections_capped_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.p.metrics.connsOpen.WithLabelValues(ListenerPublic)); got != 3 {
		t.Errorf("edge_connections_open = %v, want 3", got)
	}
	if got := strings.Count(e.logs.String(), "connection cap reached"); got != 1 {
		t.Errorf("cap log lines: got %d, want 1\n%s", got, e.logs)
	}
	if !strings.Contains(e.logs.String(), "max_connections=3 closed_idle=true suppressed=0") {
		t.Errorf("cap log: got %q, want max_connections=3 closed_idle=true suppressed=0", e.logs)
	}
}

func TestListenerCapWaitsForAConnectionToClose(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after startCapEnv's cleanup
	e := startCapEnv(t, 3)

	// Three connections, each with a request the origin holds.
	clients := []*capClient{e.dial(), e.dial(), e.dial()}
	for _, c := range clients {
		c.send(t, "/block")
		<-e.blocked
	}

	// A fourth connection arrives: none is idle, so the listener holds it
	// and accepts nothing more. Its request does not reach the origin.
	fourth := e.dial()
	fourth.send(t, "/d")
	if ev := <-e.capped; ev != (guard.CapEvent{Max: 3, ClosedIdle: false}) {
		t.Errorf("cap event: got %+v, want {Max:3 ClosedIdle:false}", ev)
	}
	if got := testutil.ToFloat64(e.p.metrics.connsOpen.WithLabelValues(ListenerPublic)); got != 3 {
		t.Errorf("edge_connections_open while capped = %v, want 3", got)
	}
	if got := e.served.Load(); got != 0 {
		t.Errorf("origin served %d requests while capped, want 0", got)
	}
	// Client 0's request ends, and client 0 closes its connection: the
	// fourth is accepted and served.
	e.release <- struct{}{}
	if got, body := clients[0].read(); got != 200 {
		t.Fatalf("client 0: got %d (%s), want 200", got, body)
	}
	clients[0].conn.Close()
	if got, body := fourth.read(); got != 200 || body != "origin /d" {
		t.Errorf("fourth: got %d %q, want 200 %q", got, body, "origin /d")
	}

	if got := testutil.ToFloat64(e.p.metrics.capped); got != 1 {
		t.Errorf("edge_connections_capped_total = %v, want 1", got)
	}
	if !strings.Contains(e.logs.String(), "max_connections=3 closed_idle=false") {
		t.Errorf("cap log: got %q, want max_connections=3 closed_idle=false", e.logs)
	}
}

// TestConnectionsCappedLogsOnceASecond: a burst at the cap is counted
// whole and logged at most once a second, each line saying how many were
// held back.
func TestConnectionsCappedLogsOnceASecond(t *testing.T) {
	logs := &syncBuffer{}
	clk := newClock()
	table, err := rules.Compile(oneDomain("http://127.0.0.1:9"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Table: table, Registerer: prometheus.NewRegistry(), Now: clk.Now,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name      string
		advance   time.Duration
		events    int
		wantLines []string // suppressed= of each line logged
	}{
		{"first event logs", 0, 1, []string{"suppressed=0"}},
		{"burst in the same second", 0, 500, nil},
		{"999 ms later", 999 * time.Millisecond, 10, nil},
		{"a second after the first", time.Millisecond, 1, []string{"suppressed=510"}},
		{"clock goes back", -time.Hour, 1, []string{"suppressed=0"}},
		{"then forward half a second", 500 * time.Millisecond, 3, nil},
	}
	total := 0
	for _, s := range steps {
		before := len(strings.Split(strings.TrimSpace(logs.String()), "\n"))
		if logs.String() == "" {
			before = 0
		}
		clk.Advance(s.advance)
		for range s.events {
			p.ConnectionsCapped(10, false)
		}
		total += s.events
		var got []string
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		if logs.String() == "" {
			lines = nil
		}
		for _, l := range lines[before:] {
			i := strings.Index(l, "suppressed=")
			got = append(got, l[i:])
		}
		if strings.Join(got, ",") != strings.Join(s.wantLines, ",") {
			t.Errorf("%s: got lines %q, want %q", s.name, got, s.wantLines)
		}
		if got := testutil.ToFloat64(p.metrics.capped); got != float64(total) {
			t.Errorf("%s: edge_connections_capped_total = %v, want %d", s.name, got, total)
		}
	}
}
