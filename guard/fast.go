package guard

import (
	"bufio"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/edgerate/edge/internal/wire"
)

// The fast path: a request head that is complete, simple, and the only
// request on its connection is offered to ListenerOptions.Answer before
// net/http sees it. If the hook answers, the Listener writes the answer
// to the connection itself and reads on; net/http never sees the request.
// If it declines, the head goes on to net/http as if nobody had asked.
//
// "Simple" means that net/http would parse the head exactly as Request
// says and serve it on a connection that stays open: HTTP/1.1; an
// origin-form target of printable ASCII; one Host whose bytes net/http
// accepts; no Upgrade; no Expect but one "100-continue" on a request with
// a body; no Connection field other than keep-alive; field values without
// control bytes other than HTAB; a head of at most MaxHeaderBytes and 64
// field lines. Its body, if it has one (a Content-Length or chunked, as
// the framer found), the hook reads through Request.Body (body.go).
// Anything else goes to net/http, which answers it as always.
//
// "The only request" means net/http has answered everything it was handed
// on the connection and waits for the next request: the server reported
// the connection new or idle through ConnState (which the fast path needs
// installed), and no byte has been handed to net/http since. (A new
// connection's first request is offered too because the Listener keeps
// ReadTimeout itself: deadline.go.) Pipelined requests behind one that
// net/http serves go to net/http too.
//
// While it answers, the Listener keeps the deadlines net/http would keep
// between requests: the idle timeout from each answer to the next head's
// first byte, the header timeout (or ReadTimeout, if shorter) from that
// byte to the head's end, each write bounded as net/http's WriteTimeout
// and WriteIdleTimeout bound it.
// Read deadlines that only move later are re-armed at most once a second
// (each re-arm updates a runtime timer), so the idle bound may be up to a
// second shorter. A connection being answered is not idle for the
// connection cap; once answered it is the most recently idle one. After
// Close, nothing is answered here.

// Request is a request head offered to ListenerOptions.Answer: a
// wire.Head (which says what the Listener guarantees of it), with the
// whole head. Its byte slices point into the connection's buffer: they are
// valid only during the call and must not be kept or changed. Client is
// the connection's Writer (forward.go), Body its Body (body.go) when the
// request has one.
type Request struct {
	wire.Head
	// Raw is the whole head, from the request line to the empty line.
	Raw []byte

	expect bool // "Expect: 100-continue"
}

// Field is one field line of a Request.
type Field = wire.Field

// maxFastFields bounds the field lines of a head the fast path offers.
const maxFastFields = 64

// fastConn is a connection's fast-path state, made on its first offer.
type fastConn struct {
	out   []byte // the answer, reused
	peer  netip.Addr
	tls   *wire.TLS   // the connection's, nil without TLS
	front *wire.Front // what its PROXY header said, nil without
	w     Writer
	used  bool // the last answer went through w
	body  Body
	br    *bufio.Reader // a chunked body's, reused
	// held is the buffer with the head while its body is read into
	// another (body.go); spare is one to read into next time.
	held, spare []byte
}

// fastConns recycles the fast-path state of connections that ended in
// their first stage (first.go), as headBuffers does their buffers.
var fastConns = sync.Pool{New: func() any { return new(fastConn) }}

// recycle gives fc back for another connection, keeping its answer
// buffer, once the connection is done with it.
func (fc *fastConn) recycle() {
	out := fc.out[:0]
	if cap(out) > 64<<10 {
		out = nil
	}
	*fc = fastConn{out: out}
	fastConns.Put(fc)
}

// simpleTarget reports whether a request target may be offered: in origin
// form, of printable ASCII (net/http refuses control bytes), with every
// '%' followed by two hexadecimal digits (net/http refuses an invalid
// escape in the path; one in the query it passes on, and such a head goes
// to it too).
func simpleTarget(t []byte) bool {
	if len(t) == 0 || t[0] != '/' {
		return false
	}
	for i := 0; i < len(t); i++ {
		switch c := t[i]; {
		case c <= ' ' || c >= 0x7f:
			return false
		case c == '%':
			if i+2 >= len(t) || !wire.IsHexDigit(t[i+1]) || !wire.IsHexDigit(t[i+2]) {
				return false
			}
		}
	}
	return true
}

// simpleValue reports whether a field value has no control bytes but HTAB
// (net/http answers 400 for one).
func simpleValue(v []byte) bool {
	for _, c := range v {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// validHost reports whether h is a non-empty Host of letters, digits and
// ".-:[]" only: a subset of what net/http accepts.
func validHost(h []byte) bool {
	for _, c := range h {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '.' || c == '-' || c == ':' || c == '[' || c == ']') {
			return false
		}
	}
	return len(h) > 0
}

// peerAddr is the client address of a connection, as Request.Peer.
func peerAddr(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}

// tlsOf is the TLS of a connection as the stages left it, nil without.
func tlsOf(c net.Conn) *wire.TLS {
	if s, ok := c.(wire.Secure); ok {
		return s.TLS()
	}
	return nil
}

// offer offers the head the framer holds (state stFast) to the Listener's
// hook, with c.mu held, which it releases while the hook runs and the
// answer is written. An answered head is dropped from the stream; a
// declined one is cleared for delivery to net/http. A failed write is
// returned: the connection is then of no more use.
func (c *guardConn) offer() error {
	f := &c.f
	end := f.fastEnd
	if c.fast == nil {
		c.fast = fastConns.Get().(*fastConn)
		c.fast.peer = peerAddr(c.Conn)
		c.fast.tls = tlsOf(c.Conn)
		c.fast.front = c.front
	}
	fc := c.fast
	req := &f.simple.req // read by parseHead as the framer took the head up
	if c.l.closing.Load() || req.expect && f.fastBody == 0 {
		f.pass(end)
		return nil
	}
	now := time.Now()
	c.begin(now)
	c.busy = true
	c.l.answering.Add(1)
	c.mu.Unlock()
	fc.w = Writer{c: c, start: now}
	req.Peer, req.TLS, req.Front, req.Now, req.Client = fc.peer, fc.tls, fc.front, now, &fc.w
	if n := f.fastBody; n != 0 {
		fc.body = Body{c: c, size: n, left: n, expect: req.expect}
		req.BodyLen, req.Body = n, &fc.body
	}
	// Busy while the hook decides and an answer (a refusal, or a
	// forwarded response) is written, then the most recently idle
	// connection, as if net/http had served the request; a declined
	// request is net/http's, which reports its state itself.
	c.l.markIdle(c, false)
	out, answered := c.l.answer(req, fc.out[:0])
	taken := req.Body != nil && fc.body.started
	if answered && req.Body != nil {
		// A body the answer left unread, or whose framing broke, leaves
		// the connection where no next request can be found: close it.
		c.mu.Lock()
		if !taken || f.st != stHead {
			// The client may still be sending it: Close lingers, so
			// that the answer is not lost to a reset.
			fc.w.close, c.linger = true, true
		}
		c.mu.Unlock()
	}
	err := fc.w.finish(out, answered)
	fc.used = fc.w.used
	if answered {
		c.l.markIdle(c, true)
	}
	if cap(out) <= 64<<10 {
		fc.out = out[:0]
	}
	if req.Body != nil {
		fc.body = Body{}
	}
	*req, fc.w = Request{}, Writer{}
	if fc.held != nil {
		if cap(fc.held) <= 64<<10 {
			fc.spare = fc.held[:0]
		}
		fc.held = nil
	}
	c.mu.Lock()
	c.busy = false
	c.l.answering.Add(-1)
	if c.closeLater {
		return c.closeNow()
	}
	if !answered {
		if taken {
			return c.closeNow() // the hook broke its contract: part of the body is gone
		}
		f.pass(end)
		return nil
	}
	if err != nil {
		return err
	}
	if taken {
		// The head went when the body was taken up, and the body is
		// read: net/http still waits for the next request.
		f.free = true
		f.release()
	} else {
		f.answered(end)
	}
	if fc.used {
		now = time.Now() // the answer took its time (forward.go)
	}
	c.owned, c.lastAnswer = true, now
	if f.lo != f.hi {
		c.begin(now) // the next head has begun already
	}
	return nil
}

// fastWrite writes an answer within the write bounds net/http would set
// for a request read at now.
func (c *guardConn) fastWrite(b []byte, now time.Time) error {
	var d time.Time
	if c.writeIdle > 0 {
		d = now.Add(c.writeIdle)
	}
	if wt := c.l.writeTimeout; wt > 0 && (d.IsZero() || now.Add(wt).Before(d)) {
		d = now.Add(wt)
	}
	c.mu.Lock()
	err := c.applyWriteDeadline(d)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	_, err = c.Conn.Write(b)
	return err
}
