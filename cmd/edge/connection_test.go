package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
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
	tc := tls.Client(connect("127.0.0.3", e.tls, ""), &tls.Config{ServerName: "api.example.com", RootCAs: e.ca.pool})
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
	tc = tls.Client(connect("127.0.0.2", e.tls, ppV2("198.51.100.2", false)), &tls.Config{ServerName: "api.example.com", RootCAs: e.ca.pool})
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
