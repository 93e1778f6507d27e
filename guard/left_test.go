package guard

import (
	"net"
	"runtime"
	"testing"
	"time"
)

// leftPair returns a guardConn over the server side of a loopback TCP
// connection and the client side.
func leftPair(t testing.TB) (*guardConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return &guardConn{Conn: server, sock: server}, client.(*net.TCPConn)
}

// eventually reports whether cond holds within a second (the kernel
// delivers a FIN or an RST on loopback at once, but not synchronously).
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestLeft: Left is false while the client is there, unread bytes
// (a pipelined request) included, and true once its FIN or RST arrived,
// unread bytes before it included.
func TestLeft(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("poll(2) with POLLRDHUP is Linux's")
	}
	for _, tc := range []struct {
		name  string
		leave func(c *net.TCPConn)
		left  bool
	}{
		{"there", func(c *net.TCPConn) {}, false},
		{"unread bytes", func(c *net.TCPConn) { c.Write([]byte("GET / HTTP/1.1\r\n\r\n")) }, false},
		{"close", func(c *net.TCPConn) { c.Close() }, true},
		{"half-close", func(c *net.TCPConn) { c.CloseWrite() }, true},
		{"reset", func(c *net.TCPConn) { c.SetLinger(0); c.Close() }, true},
		{"unread bytes, then close", func(c *net.TCPConn) { c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); c.Close() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, c := leftPair(t)
			if g.left() {
				t.Fatal("left before the client did anything")
			}
			tc.leave(c)
			if tc.left {
				if !eventually(g.left) {
					t.Error("left: got false, want true")
				}
				return
			}
			time.Sleep(20 * time.Millisecond)
			if g.left() {
				t.Error("left: got true, want false")
			}
		})
	}
}

// BenchmarkLeft is the cost of asking, which a forwarded request the
// access log reports pays once.
func BenchmarkLeft(b *testing.B) {
	g, _ := leftPair(b)
	b.ReportAllocs()
	for b.Loop() {
		if g.left() {
			b.Fatal("left")
		}
	}
}
