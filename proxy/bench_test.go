package proxy

import (
	"errors"
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// nopWriter is a ResponseWriter that keeps one header map and discards the
// body, so the benchmarks measure edge's work, not the recorder's.
type nopWriter struct {
	h      http.Header
	status int
}

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(s int)           { w.status = s }

// BenchmarkServeHTTP measures one request through edge with no network: host
// lookup, client identity, every rule's decision, response fields, and a
// static response. Forwarding is left out (it is net/http's cost).
func BenchmarkServeHTTP(b *testing.B) {
	cases := []struct {
		name    string
		limit   int
		headers string
		status  int
	}{
		{"allowed", 1_000_000_000, "blocked", 200},
		{"allowed-with-fields", 1_000_000_000, "always", 200},
		{"blocked", 1, "blocked", 429},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p := benchProxy(b, rules.RuleConfig{Name: "per-ip", Limit: c.limit, Period: time.Minute, Headers: c.headers})
			req, _ := http.NewRequest("GET", "http://api.example.com/v1/items", nil)
			req.RemoteAddr = "203.0.113.9:41000"
			w := &nopWriter{h: make(http.Header)}
			p.ServeHTTP(w, req)
			p.ServeHTTP(w, req)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				clear(w.h)
				p.ServeHTTP(w, req)
			}
			if w.status != c.status {
				b.Fatalf("status %d, want %d", w.status, c.status)
			}
		})
	}
}

// benchProxy returns a Proxy answering api.example.com with a static
// response under rule r, on a clock that stands still.
func benchProxy(b *testing.B, r rules.RuleConfig) *Proxy {
	b.Helper()
	table, err := rules.Compile(rules.Config{
		Domains: []rules.DomainConfig{{
			Hosts:   []string{"api.example.com"},
			Respond: &rules.ResponseConfig{Body: "ok"},
			Rules:   []rules.RuleConfig{r},
		}},
	})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	p, err := New(Options{Table: table, Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkConnMemory measures what one connection costs edge's process
// while its client holds an unfinished request head of 64 KB (64,000
// bytes of fields, the head's end never sent), the slow-client attack that
// max_connections bounds. 500 connections (a bounded local test: run with
// -benchtime=1x) go to a real http.Server configured as cmd/edge's public
// one, serving the Proxy through the Listener; the figures are the growth
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
	p, err := New(Options{Table: table})
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
			Handler: p, ReadHeaderTimeout: table.Timeouts.ReadHeader, IdleTimeout: table.Timeouts.Idle,
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
		waitFor := func(what string, ok func() bool) {
			deadline := time.Now().Add(30 * time.Second)
			for !ok() {
				if time.Now().After(deadline) {
					b.Fatalf("timed out waiting for %s", what)
				}
				time.Sleep(5 * time.Millisecond)
			}
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
		waitFor("the server to see every connection", func() bool { mu.Lock(); defer mu.Unlock(); return len(guards) == conns })
		connected := live()
		for _, c := range clients {
			if _, err := c.Write(head); err != nil {
				b.Fatal(err)
			}
		}
		waitFor("the server to read every head", func() bool { return received() == conns*len(head) })
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
