package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
)

// connectionLimitsConfig: each client may hold 3 connections open and
// open 5 a minute, 127.0.0.9 is exempt, the balancer 127.0.0.2 sends PROXY
// headers, and the public listener holds 4 connections at most.
func connectionLimitsConfig(origin string) string {
	return fmt.Sprintf(`
listen: "127.0.0.1:0"
admin_listen: %q
origin: %q
max_connections: 4
proxy_protocol: {from: [127.0.0.2]}
connections:
  max_per_client: 3
  rate_per_client: {limit: 5, period: 1m}
  allow: {cidrs: [127.0.0.9]}
tls:
  listen: "127.0.0.1:0"
  certificates: [{cert_file: api.pem, key_file: api.key}]
domains:
  - name: api
    hosts: [api.example.com]
`, adminAnyPort, origin)
}

// closedConn is a connection reset before its dial returned.
type closedConn struct{ net.Conn }

func (closedConn) Read([]byte) (int, error)         { return 0, syscall.ECONNRESET }
func (closedConn) Write([]byte) (int, error)        { return 0, syscall.ECONNRESET }
func (closedConn) Close() error                     { return nil }
func (closedConn) SetDeadline(time.Time) error      { return nil }
func (closedConn) SetReadDeadline(time.Time) error  { return nil }
func (closedConn) SetWriteDeadline(time.Time) error { return nil }

// served sends a GET on c and reports whether it was answered 200.
func served(c net.Conn) bool {
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n"); err != nil {
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == 200
}

// refusedUnread reports whether c was closed by edge without a byte
// (reset, or ended), within 5 seconds.
func refusedUnread(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	return n == 0 && err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestConnectionLimits: a client that opens connections in a loop is
// refused past rate_per_client, one that holds them past max_per_client,
// each connection closed before any read and, on the TLS listener, before
// any handshake; other clients keep connecting, the exempt client is
// never refused, and a client behind the balancer is limited by the
// address its PROXY header names. The refusals come before
// max_connections: a client's flood at the cap closes nobody's idle
// connection. They are counted and listed by GET /v1/top/connections.
func TestConnectionLimits(t *testing.T) {
	e := startTLSEdge(t, connectionLimitsConfig(forwardOrigin(t).URL))
	// connect dials addr from from and sends header; a connection
	// refused so fast that the dial sees the reset is a closed one.
	connect := func(from, addr, header string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatal(err)
			}
			c = closedConn{}
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, header)
		return c
	}
	metric := func(want string) {
		t.Helper()
		wait.For(t, 5*time.Second, want, func() bool {
			_, body := httpGet(t, "http://"+e.admin+"/metrics")
			return strings.Contains(body, want)
		})
	}

	// rate_per_client: five new connections a minute, then refused; a
	// refused one is closed unread.
	for i := range 6 {
		c := connect("127.0.0.3", e.public, "")
		if ok := served(c); ok != (i < 5) {
			t.Errorf("127.0.0.3's connection %d: served %v, want %v", i, ok, i < 5)
		}
		c.Close()
	}
	if c := connect("127.0.0.4", e.public, ""); !served(c) {
		t.Error("another client's connection was not served")
	} else {
		c.Close()
	}
	// On the TLS listener, no handshake: the refused client gets no
	// ServerHello.
	tc := tls.Client(connect("127.0.0.3", e.tls, ""), &tls.Config{ServerName: "api.example.com", RootCAs: e.ca.Pool})
	if err := tc.Handshake(); err == nil {
		t.Error("a refused client's TLS handshake succeeded")
	}
	metric(`edge_connections_refused_total{pop="local",reason="rate"} 2`)
	_, handshakes := httpGet(t, "http://"+e.admin+"/metrics")
	if strings.Contains(handshakes, `edge_tls_handshakes_total{pop="local",result="error"}`) {
		t.Errorf("the refused TLS connection was handshaken:\n%s", grepLines(handshakes, "edge_tls_handshakes"))
	}
	// The exempt client.
	for i := range 7 {
		c := connect("127.0.0.9", e.public, "")
		if !served(c) {
			t.Errorf("the exempt client's connection %d was not served", i)
		}
		c.Close()
	}
	// Behind the balancer: by the header's client.
	for i := range 6 {
		c := connect("127.0.0.2", e.public, ppV1("198.51.100.1"))
		if ok := served(c); ok != (i < 5) {
			t.Errorf("198.51.100.1's connection %d through the balancer: served %v, want %v", i, ok, i < 5)
		}
		c.Close()
	}
	// Another client behind the balancer connects, TLS after its header.
	tc = tls.Client(connect("127.0.0.2", e.tls, ppV2("198.51.100.2", false)), &tls.Config{ServerName: "api.example.com", RootCAs: e.ca.Pool})
	if err := tc.Handshake(); err != nil || !served(tc) {
		t.Errorf("another client behind the balancer: %v", err)
	}
	tc.Close()
	metric(`edge_connections_open{listener="public",pop="local"} 0`)
	metric(`edge_connections_open{listener="tls",pop="local"} 0`)
	metric(`edge_connections_refused_total{pop="local",reason="rate"} 3`)

	// max_per_client at max_connections: 127.0.0.5 holds 3 idle
	// connections and 127.0.0.6 one, the cap of 4; 127.0.0.5's fourth is
	// refused, and no idle connection is closed for it.
	var idle []net.Conn
	for _, from := range []string{"127.0.0.5", "127.0.0.5", "127.0.0.5", "127.0.0.6"} {
		c := connect(from, e.public, "")
		if !served(c) {
			t.Fatalf("%s's connection was not served", from)
		}
		idle = append(idle, c)
	}
	for range 3 {
		if c := connect("127.0.0.5", e.public, ""); !refusedUnread(c) {
			t.Error("127.0.0.5's fourth connection was not refused unread")
		}
	}
	metric(`edge_connections_refused_total{pop="local",reason="per_client"} 3`)
	for i, c := range idle {
		if !served(c) {
			t.Errorf("idle connection %d was closed by another client's refused connections", i)
		}
	}
	_, m := httpGet(t, "http://"+e.admin+"/metrics")
	if !strings.Contains(m, `edge_connections_capped_total{pop="local"} 0`) {
		t.Errorf("the refused connections reached the cap:\n%s", grepLines(m, "edge_connections_capped"))
	}
	_, top := httpGet(t, "http://"+e.admin+"/v1/top/connections")
	for _, want := range []string{`"client": "127.0.0.5"`, `"per_client": 3`, `"client": "127.0.0.3"`, `"client": "198.51.100.1"`} {
		if !strings.Contains(top, want) {
			t.Errorf("/v1/top/connections lacks %s:\n%s", want, top)
		}
	}
}

// TestConnectionFloodProxyV2: connections from the balancer, each with a
// PROXY v2 header naming a client of its own (an IPv6 /64 each), 20,000
// of them (EDGE_CONNECTION_FLOOD=1000000 runs the million: see
// docs/connections.md), through rate_per_client with max_clients 1,000:
// every new client is served, a busy client among them (every 100th
// connection) is refused past its limit throughout, and edge's heap stays
// bounded.
func TestConnectionFloodProxyV2(t *testing.T) {
	flood := 20_000
	if s := os.Getenv("EDGE_CONNECTION_FLOOD"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("EDGE_CONNECTION_FLOOD=%q: want a count", s)
		}
		flood = n
	}
	path := filepath.Join(t.TempDir(), "edge.yaml")
	must(t, os.WriteFile(path, []byte(fmt.Sprintf(`
listen: "127.0.0.1:0"
admin_listen: %q
proxy_protocol: {from: [127.0.0.2]}
connections:
  max_per_client: 2
  rate_per_client: {limit: 3, period: 1h}
  max_clients: 1000
domains:
  - {name: api, hosts: [api.example.com], respond: {body: ok}}
`, adminAnyPort)), 0o644))
	e := startEdge(t, path)

	// header is a v2 header naming client i's address, 2001:db8:i::1, or
	// the busy client's.
	header := func(i int, busy bool) []byte {
		src := [16]byte{0x20, 0x01, 0x0d, 0xb8, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i), 15: 1}
		if busy {
			src = netip.MustParseAddr("2001:db8:ffff:ffff::1").As16()
		}
		b := []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x21\x00\x24")
		b = append(b, src[:]...)
		b = append(b, netip.MustParseAddr("2001:db8::80").AsSlice()...)
		b = append(b, 0x9c, 0x40, 0x01, 0xbb)
		return append(b, "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n"...)
	}
	// once opens one connection from the balancer and reports whether it
	// was answered 200. It closes with a reset, so that a million leave no
	// port of the balancer's address in TIME_WAIT.
	once := func(h []byte, br *bufio.Reader) (bool, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", e.public)
		if err != nil {
			if errors.Is(err, syscall.ECONNRESET) {
				return false, nil
			}
			return false, err
		}
		defer func() {
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(h); err != nil {
			return false, nil
		}
		br.Reset(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return false, nil
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const workers = 8
	type tally struct{ refusedNew, busyServed, busy int }
	tallies := make([]tally, workers)
	errs := make(chan error, workers)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			br := bufio.NewReaderSize(nil, 1024)
			for i := w; i < flood; i += workers {
				ok, err := once(header(i, false), br)
				if err != nil {
					errs <- err
					return
				}
				if !ok {
					tallies[w].refusedNew++
				}
				if i%100 == 0 {
					ok, err := once(header(0, true), br)
					if err != nil {
						errs <- err
						return
					}
					tallies[w].busy++
					if ok {
						tallies[w].busyServed++
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	var sum tally
	for _, tl := range tallies {
		sum.refusedNew += tl.refusedNew
		sum.busyServed += tl.busyServed
		sum.busy += tl.busy
	}
	if sum.refusedNew != 0 {
		t.Errorf("%d of %d new clients refused, want none", sum.refusedNew, flood)
	}
	if sum.busyServed > 3 {
		t.Errorf("the busy client was served %d of %d times, want at most its limit, 3", sum.busyServed, sum.busy)
	}
	want := fmt.Sprintf(`edge_connections_refused_total{pop="local",reason="rate"} %d`, sum.busy-sum.busyServed)
	wait.For(t, 5*time.Second, want, func() bool {
		_, m := httpGet(t, "http://"+e.admin+"/metrics")
		return strings.Contains(m, want)
	})
	// The test's own goroutines and buffers are in the heap too: the
	// bound is loose, far below what a table of every client would hold
	// at a million.
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 32<<20 {
		t.Errorf("edge's heap grew by %d MiB over %d clients, want at most 32 MiB", grown>>20, flood)
	}
	t.Logf("%d clients (and %d busy connections) in %v, %.0f connections/s; heap %d → %d KiB",
		flood, sum.busy, elapsed.Round(time.Millisecond), float64(flood+sum.busy)/elapsed.Seconds(), before.HeapAlloc>>10, after.HeapAlloc>>10)
}
