package guard

import (
	"net"
	"sync"
)

// HTTP/2 on the Listener's sockets: the Listener reads HTTP/1.x only, and a
// connection that speaks HTTP/2 is taken away from it by a Stage, for the
// HTTP/2 server above (Go's own, serving Handoffs): over TLS when ALPN
// chose h2 (ALPN), on a plain socket when the connection opens with the
// HTTP/2 preface (PriorKnowledge). Before that server has it, the server
// above wraps it in WatchFrames (frames.go), which ends the floods of
// frames that Go's server lets go on.

// Preface is the connection preface every HTTP/2 client sends first
// (RFC 9113 §3.4).
const Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// ALPN returns a Stage, to run after a TLS handshake (a connection whose
// TLS is known, wire.Secure), that hands a connection whose client chose
// proto by ALPN to handoff, and leaves any other as it is.
func ALPN(proto string, handoff func(net.Conn)) Stage {
	return func(c net.Conn) (StageResult, error) {
		if t := tlsOf(c); t != nil && t.State.NegotiatedProtocol == proto {
			return StageResult{Handoff: handoff}, nil
		}
		return StageResult{}, nil
	}
}

// PriorKnowledge returns a Stage for a plain socket that serves HTTP/2 with
// prior knowledge (h2c, RFC 9113 §3.3): it reads the connection's first
// bytes, and hands a connection that opens with Preface to handoff; any
// other goes on to the Listener, as HTTP/1.x. Either way the bytes it read
// are read again, first, from the connection it leaves (no byte is lost).
//
// It reads until the bytes differ from the preface or hold all of it, in
// one read for any HTTP/1.x request (whose method differs from "PRI" by its
// first bytes) and nearly every HTTP/2 client; a client that stops
// halfway holds its connection until the stages' deadline, as one that
// sends half a request head does. A connection that ends first is refused.
func PriorKnowledge(handoff func(net.Conn)) Stage {
	return func(c net.Conn) (StageResult, error) {
		buf := prefaceBuffers.Get().(*[prefaceRead]byte)
		n := 0
		for {
			m, err := c.Read(buf[n:])
			n += m
			k := min(n, len(Preface))
			switch {
			case string(buf[:k]) != Preface[:k]:
				return StageResult{Conn: newReplayConn(c, buf, n)}, nil
			case n >= len(Preface):
				return StageResult{Conn: newReplayConn(c, buf, n), Handoff: handoff}, nil
			case err != nil:
				prefaceBuffers.Put(buf)
				return StageResult{}, err
			}
		}
	}
}

// prefaceRead is the size of PriorKnowledge's first read: what the
// Listener's own first read takes (framer.go), so that an HTTP/1.x head is
// read in as few reads as without the stage.
const prefaceRead = 4096

var prefaceBuffers = sync.Pool{New: func() any { return new([prefaceRead]byte) }}

// replayConn is a connection whose first bytes were read already, by a
// Stage: its reads return them first. Reads must not be concurrent (no
// server reads one connection from two goroutines at once).
type replayConn struct {
	net.Conn
	buf  *[prefaceRead]byte // nil once replayed, and back in prefaceBuffers
	rest []byte
}

func newReplayConn(c net.Conn, buf *[prefaceRead]byte, n int) *replayConn {
	return &replayConn{Conn: c, buf: buf, rest: buf[:n]}
}

func (c *replayConn) Read(p []byte) (int, error) {
	if c.buf == nil {
		return c.Conn.Read(p)
	}
	n := copy(p, c.rest)
	c.rest = c.rest[n:]
	if len(c.rest) == 0 {
		prefaceBuffers.Put(c.buf)
		c.buf, c.rest = nil, nil
	}
	return n, nil
}

// CloseWrite shuts down the sending side, when the connection can.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Handoffs is a net.Listener whose connections are those handed to it,
// by a Stage's Handoff: what the HTTP/2 server above a Listener serves.
// It is safe for concurrent use; make it with NewHandoffs.
type Handoffs struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewHandoffs returns a Handoffs whose Addr is addr (the Listener's).
func NewHandoffs(addr net.Addr) *Handoffs {
	return &Handoffs{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// Handoff gives c to the next Accept, waiting for one; once the Handoffs
// is closed, it closes c instead. Give it (or a function that calls it)
// to StageResult.Handoff.
func (h *Handoffs) Handoff(c net.Conn) {
	select {
	case h.conns <- c:
	case <-h.done:
		c.Close()
	}
}

// Accept returns the next connection handed off, or net.ErrClosed once
// the Handoffs is closed.
func (h *Handoffs) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		select {
		case <-h.done: // closed meanwhile: a server shutting down must not get it
			c.Close()
			return nil, net.ErrClosed
		default:
			return c, nil
		}
	case <-h.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept return net.ErrClosed, and every later Handoff close
// its connection. The connections accepted stay open: their server ends
// them.
func (h *Handoffs) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

// Addr returns the address NewHandoffs was given.
func (h *Handoffs) Addr() net.Addr { return h.addr }
