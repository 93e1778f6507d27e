package proxyproto

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// memConn is a connection from peer whose reads return in, in pieces of
// at most chunk bytes, then EOF.
type memConn struct {
	net.Conn // nil: only what a stage uses is implemented
	in       *bytes.Reader
	chunk    int
	peer     *net.TCPAddr
}

func (c *memConn) Read(p []byte) (int, error) {
	if len(p) > c.chunk {
		p = p[:c.chunk]
	}
	return c.in.Read(p)
}
func (c *memConn) RemoteAddr() net.Addr             { return c.peer }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }
func (c *memConn) Close() error                     { return nil }

// FuzzStage: whatever a connection sends, from a balancer or not, in
// pieces of any size, the stage never panics; a connection it keeps from a
// stranger reads exactly what was sent, one that it keeps from a balancer
// reads a suffix of it, and a kept balancer connection's client is a
// valid address; a stranger's connection that begins with a PROXY
// signature is never kept.
func FuzzStage(f *testing.F) {
	f.Add([]byte("PROXY TCP4 203.0.113.9 192.0.2.1 4567 443\r\nGET / HTTP/1.1\r\n\r\n"), true, 64)
	f.Add(v2(0x21, 0x21, v6, ssl(0x01)), true, 5)
	f.Add(v2(0x20, 0x00, nil, nil), true, 1)
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), false, 3)
	f.Add([]byte("\r\n\r\n\x00\r\nQUIT\n"), false, 2)
	f.Fuzz(func(t *testing.T, in []byte, fromBalancer bool, chunk int) {
		chunk = 1 + (chunk&0xff)%64
		peer := stranger
		if fromBalancer {
			peer = balancer
		}
		r, err := New(Options{Trusted: func(a netip.Addr) bool { return a == balancer }})
		if err != nil {
			t.Fatal(err)
		}
		c := &memConn{in: bytes.NewReader(in), chunk: chunk, peer: net.TCPAddrFromAddrPort(netip.AddrPortFrom(peer, 1234))}
		res, err := r.Stage(c)
		if err != nil {
			return
		}
		if res.Conn == nil {
			t.Fatal("kept the connection without a Conn")
		}
		got, _ := io.ReadAll(res.Conn)
		if !fromBalancer {
			if !bytes.Equal(got, in) {
				t.Fatalf("a stranger's connection reads %q, sent %q", got, in)
			}
			if signed(in) == isSigned {
				t.Fatalf("kept a stranger's connection that begins with a signature: %q", in)
			}
			return
		}
		if !bytes.HasSuffix(in, got) {
			t.Fatalf("a balancer's connection reads %q, not a suffix of %q", got, in)
		}
		if a := addrOf(res.Conn.RemoteAddr()); !a.IsValid() || a.IsUnspecified() {
			t.Fatalf("a balancer's connection's client is %v", res.Conn.RemoteAddr())
		}
	})
}
