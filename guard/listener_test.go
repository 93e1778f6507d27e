package guard

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"go.uber.org/goleak"
)

var discardLog = log.New(io.Discard, "", 0)

// TestListenerCapCloseWhileWaiting: an Accept waiting for room returns when
// the listener closes, so that Serve, and shutdown, do not hang.
func TestListenerCapCloseWhileWaiting(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tests := []struct {
		name string
		stop func(srv *http.Server) error
	}{
		{"Close", func(srv *http.Server) error { return srv.Close() }},
		{"Shutdown", func(srv *http.Server) error {
			// Shutdown closes the listener first; with its context already
			// canceled it then returns at once instead of waiting for the
			// held handler, which Close ends.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := srv.Shutdown(ctx); !errors.Is(err, context.Canceled) {
				return err
			}
			return srv.Close()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			capped := make(chan CapEvent, 1)
			l := NewListener(ln, ListenerOptions{MaxConnections: 1, OnCapped: func(ev CapEvent) { capped <- ev }})
			hold := make(chan struct{})
			entered := make(chan struct{}, 1)
			srv := &http.Server{
				ErrorLog:  discardLog,
				ConnState: l.ConnState,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					entered <- struct{}{}
					<-hold
				}),
			}
			done := make(chan error, 1)
			go func() { done <- srv.Serve(l) }()
			c1, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c1.Close()
			io.WriteString(c1, hostile.Get("/"))
			<-entered
			c2, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			<-capped // Accept now waits for room
			stopped := make(chan error, 1)
			go func() { stopped <- tt.stop(srv) }()
			if err := <-done; !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve: got %v, want http.ErrServerClosed", err)
			}
			close(hold)
			if err := <-stopped; err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			// The held connection was closed, never served.
			c2.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := c2.Read(make([]byte, 1)); n != 0 || err == nil {
				t.Errorf("held connection: read %d, %v, want 0 and an error", n, err)
			}
		})
	}
}

// BenchmarkConnMemory measures what one connection costs edge's process
// while its client holds an unfinished request head of 64 KB (64,000
// bytes of fields, the head's end never sent), the slow-client attack that
// max_connections bounds. 500 connections (a bounded local test: run with
// -benchtime=1x) go to a real http.Server configured as cmd/edge's public
// one, through the Listener (no head completes, so no handler runs, and
// the proxy is not needed to measure it); the figures are the growth
// of live heap and of goroutine stacks after a full GC, divided by the
// connections. The clients' ends of the connections are in this process
// too and are included (their share is under 1 KB each: a socket and its
// poll descriptor); kernel socket buffers are not.
//
//	head-bytes/conn   heap and stacks, unfinished 64 KB head
//	idle-bytes/conn   heap and stacks, connected, nothing sent
func BenchmarkConnMemory(b *testing.B) {
	const conns = 500
	table, err := rules.Compile(rules.Config{Domains: []rules.DomainConfig{{
		Hosts: []string{"api.example.com"}, Respond: &rules.ResponseConfig{Body: "ok"},
	}}})
	if err != nil {
		b.Fatal(err)
	}
	head := []byte("GET / HTTP/1.1\r\nHost: api.example.com\r\n")
	for len(head) < 64_000 {
		head = append(head, "X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"...)
	}
	head = head[:64_000-2]
	head = append(head, "\r\n"...) // a complete field line; the empty line never comes

	live := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc + ms.StackInuse
	}
	for range b.N {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		var guards []*guardConn
		l := NewListener(ln, ListenerOptions{MaxHeaderBytes: table.MaxHeaderBytes})
		srv := &http.Server{
			Handler: http.NotFoundHandler(), ReadHeaderTimeout: table.Timeouts.ReadHeader, IdleTimeout: table.Timeouts.Idle,
			MaxHeaderBytes: table.MaxHeaderBytes, DisableGeneralOptionsHandler: true,
			ConnState: func(c net.Conn, st http.ConnState) {
				l.ConnState(c, st)
				if st == http.StateNew {
					mu.Lock()
					guards = append(guards, c.(*guardConn))
					mu.Unlock()
				}
			},
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(l) }()
		// received is how many head bytes the server holds.
		received := func() int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, g := range guards {
				g.mu.Lock()
				n += g.f.hi - g.f.lo
				g.mu.Unlock()
			}
			return n
		}

		before := live()
		clients := make([]net.Conn, 0, conns)
		for range conns {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			clients = append(clients, c)
		}
		wait.For(b, 30*time.Second, "the server to see every connection", func() bool { mu.Lock(); defer mu.Unlock(); return len(guards) == conns })
		connected := live()
		for _, c := range clients {
			if _, err := c.Write(head); err != nil {
				b.Fatal(err)
			}
		}
		wait.For(b, 30*time.Second, "the server to read every head", func() bool { return received() == conns*len(head) })
		held := live()
		b.ReportMetric(float64(connected-before)/conns, "idle-bytes/conn")
		b.ReportMetric(float64(held-before)/conns, "head-bytes/conn")

		for _, c := range clients {
			c.Close()
		}
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			b.Fatal(err)
		}
	}
}

// TestIdleList: the connection cap's list keeps the longest idle first
// through every kind of removal, and marking a connection busy and idle
// again, as the fast path does around each answer, allocates nothing.
func TestIdleList(t *testing.T) {
	l := &Listener{maxConns: 10}
	l.freed = sync.NewCond(&l.mu)
	conns := make([]*guardConn, 4)
	for i := range conns {
		conns[i] = &guardConn{l: l}
	}
	a, b, c, d := conns[0], conns[1], conns[2], conns[3]
	order := func() []*guardConn {
		var got []*guardConn
		for g := l.idle.first; g != nil; g = g.idleNext {
			got = append(got, g)
		}
		var back []*guardConn
		for g := l.idle.last; g != nil; g = g.idlePrev {
			back = append([]*guardConn{g}, back...)
		}
		if len(got) != len(back) {
			t.Fatalf("forward links give %d connections, backward links %d", len(got), len(back))
		}
		for i := range got {
			if got[i] != back[i] {
				t.Fatalf("forward and backward links disagree at %d", i)
			}
		}
		return got
	}
	steps := []struct {
		name string
		do   func()
		want []*guardConn
	}{
		{"idle in turn", func() { l.markIdle(a, true); l.markIdle(b, true); l.markIdle(c, true) }, []*guardConn{a, b, c}},
		{"idle again keeps its place", func() { l.markIdle(a, true) }, []*guardConn{a, b, c}},
		{"middle busy", func() { l.markIdle(b, false) }, []*guardConn{a, c}},
		{"middle idle again goes last", func() { l.markIdle(b, true) }, []*guardConn{a, c, b}},
		{"first busy", func() { l.markIdle(a, false) }, []*guardConn{c, b}},
		{"last closed", func() { l.open = 4; l.release(b) }, []*guardConn{c}},
		{"closed never comes back", func() { l.markIdle(b, true); l.markIdle(d, true) }, []*guardConn{c, d}},
		{"busy twice", func() { l.markIdle(c, false); l.markIdle(c, false); l.markIdle(d, false) }, nil},
	}
	for _, s := range steps {
		s.do()
		got := order()
		if len(got) != len(s.want) {
			t.Fatalf("%s: %d idle, want %d", s.name, len(got), len(s.want))
		}
		for i := range got {
			if got[i] != s.want[i] {
				t.Fatalf("%s: idle connection %d is not the one expected", s.name, i)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { l.markIdle(a, false); l.markIdle(a, true) }); n != 0 {
		t.Errorf("marking a connection busy and idle again: %v allocations, want 0", n)
	}
}
