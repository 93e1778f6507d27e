package proxy

import (
	"bytes"
	"container/list"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/edgerate/edge/rules"
)

// ListenerOptions configure a Listener. The zero value is usable.
type ListenerOptions struct {
	// MaxHeaderBytes must be the MaxHeaderBytes of the http.Server that
	// serves the listener; 0 means http.DefaultMaxHeaderBytes, as for the
	// server. A request head longer than net/http could accept is not
	// screened but handed on whole, for net/http to answer 431.
	MaxHeaderBytes int
	// WriteIdleTimeout bounds each write to a client: a connection whose
	// client reads nothing for this long is closed, however long the
	// response is allowed to stream. It is what cuts off a slow reader
	// when http.Server.WriteTimeout is 0 (so that streams are not cut).
	// The server's own write deadlines still apply when earlier. 0 means
	// no bound.
	WriteIdleTimeout time.Duration
	// OnReject, if set, is called once for each request the Listener
	// refuses for its framing (cmd/edge counts them in a metric). It must
	// be quick and must not block.
	OnReject func()

	// MaxConnections bounds the connections open at once; 0 means no
	// bound. When a connection arrives while MaxConnections are open,
	// Accept closes the connection that has been idle longest between
	// requests, if there is one (the server must report idle connections
	// through [Listener.ConnState]); otherwise it holds the new connection,
	// unserved, and accepts nothing more until a connection closes. Clients
	// that arrive meanwhile wait in the kernel's listen queue.
	MaxConnections int
	// OnCapped, if set, is called for each connection that arrives while
	// MaxConnections are open, before Accept closes an idle connection or
	// starts to wait. It must be quick and must not block.
	OnCapped func(CapEvent)
	// OnConnections, if set, is called with 1 when Accept returns a
	// connection and with -1 when that connection closes, so that a gauge
	// can follow the connections open. It must be quick and must not block.
	OnConnections func(delta int)
}

// CapEvent describes a connection that arrived while a Listener had its
// MaxConnections open.
type CapEvent struct {
	Max int // the Listener's MaxConnections
	// ClosedIdle is true when an idle keep-alive connection was closed to
	// admit the new one, false when Accept waits for a connection to close.
	ClosedIdle bool
}

// Listener screens the HTTP/1.x framing of every request on its
// connections before net/http parses it. net/http is lenient where a
// gateway must not be, and loses the evidence before a handler runs: it
// drops Content-Length when Transfer-Encoding is present (RFC 9112 §6.3
// allows that, and says the message "ought to be handled as an error"),
// merges duplicate Content-Length fields, ignores Transfer-Encoding in
// HTTP/1.0 (then reads what was the chunked body as the next request), and
// keeps only the target's authority when it disagrees with Host; it also
// reads a bare LF as a line end, and answers OPTIONS * itself. Listener
// rejects each of these, and checks chunked bodies strictly (CRLF line
// ends, hex sizes, a bounded trailer with CRLF lines) as they stream.
//
// A rejected head never reaches net/http: Listener hands it an invalid
// request line instead, which net/http answers with 400 Bad Request and
// "Connection: close" before closing, so no handler runs and nothing is
// forwarded. A chunked body that breaks its framing fails the handler's
// body read with an error, and the connection is closed.
//
// To know where each request starts, Listener follows the framing of every
// message on the connection exactly as RFC 9112 §6 defines it; it stops
// screening (passes bytes through) after a 101 Switching Protocols, after a
// head longer than net/http accepts, and after a head net/http will refuse
// and close the connection on (a Transfer-Encoding other than chunked, a
// version other than HTTP/1.x).
//
// Listener also bounds the connections open at once (see
// ListenerOptions.MaxConnections).
//
// Listener serves plain-text HTTP/1.x: behind TLS it must wrap the
// connection inside the TLS layer, which this type does not do.
type Listener struct {
	net.Listener
	onReject  func()
	maxHead   int
	writeIdle time.Duration

	maxConns int
	onCapped func(CapEvent)
	onConns  func(delta int)

	mu     sync.Mutex
	freed  *sync.Cond // signalled when a connection closes or becomes idle, and on Close
	open   int        // connections returned by Accept and not closed
	idle   list.List  // of *guardConn idle between requests, longest idle first
	closed bool
}

// NewListener returns ln with every accepted connection screened.
func NewListener(ln net.Listener, opts ListenerOptions) *Listener {
	mhb := opts.MaxHeaderBytes
	if mhb <= 0 {
		mhb = http.DefaultMaxHeaderBytes
	}
	l := &Listener{
		Listener: ln,
		// net/http reads at most MaxHeaderBytes plus its 4 KiB bufio
		// buffer before it answers 431, so a longer head can never be
		// served.
		maxHead:   mhb + 4096,
		writeIdle: max(opts.WriteIdleTimeout, 0),
		onReject:  opts.OnReject,
		maxConns:  max(opts.MaxConnections, 0),
		onCapped:  opts.OnCapped,
		onConns:   opts.OnConnections,
	}
	l.freed = sync.NewCond(&l.mu)
	return l
}

// Accept returns the next connection, wrapped. At MaxConnections it first
// makes room (see ListenerOptions.MaxConnections); it returns net.ErrClosed
// if the Listener is closed while it waits.
//
// The connection that arrives at the cap is accepted from the kernel before
// the cap is checked, so that an idle connection is closed only for a
// client that is really there: at most MaxConnections+1 sockets are open.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	g := &guardConn{Conn: c, f: framer{maxHead: l.maxHead, onReject: l.onReject}, writeIdle: l.writeIdle, l: l}
	if err := l.admit(); err != nil {
		c.Close()
		return nil, err
	}
	if l.onConns != nil {
		l.onConns(1)
	}
	return g, nil
}

// admit counts a new connection in, once there is room for it.
func (l *Listener) admit() error {
	l.mu.Lock()
	reported := false
	for !l.closed && l.maxConns > 0 && l.open >= l.maxConns {
		var victim *guardConn
		if e := l.idle.Front(); e != nil {
			victim = l.idle.Remove(e).(*guardConn)
			victim.idleAt = nil
		}
		if !reported && l.onCapped != nil {
			reported = true
			l.mu.Unlock()
			l.onCapped(CapEvent{Max: l.maxConns, ClosedIdle: victim != nil})
			l.mu.Lock()
		}
		if victim != nil {
			l.mu.Unlock()
			victim.evict()
			l.mu.Lock()
			continue
		}
		l.freed.Wait()
	}
	if l.closed {
		l.mu.Unlock()
		return net.ErrClosed
	}
	l.open++
	l.mu.Unlock()
	return nil
}

// Close closes the listener; an Accept waiting for room returns
// net.ErrClosed. Connections already accepted stay open.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.freed.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// ConnState records which connections are idle between requests, the ones
// Accept may close at MaxConnections. Install it as the http.Server's
// ConnState (or call it from that hook). Connections that did not come
// from this Listener are ignored.
func (l *Listener) ConnState(c net.Conn, st http.ConnState) {
	g, ok := c.(*guardConn)
	if !ok || g.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if g.gone {
		return
	}
	if st == http.StateIdle {
		if g.idleAt == nil {
			g.idleAt = l.idle.PushBack(g)
			l.freed.Signal() // an Accept waiting at the cap can close it
		}
		return
	}
	if g.idleAt != nil {
		l.idle.Remove(g.idleAt)
		g.idleAt = nil
	}
}

// release counts g out, once.
func (l *Listener) release(g *guardConn) {
	l.mu.Lock()
	if g.gone {
		l.mu.Unlock()
		return
	}
	g.gone = true
	if g.idleAt != nil {
		l.idle.Remove(g.idleAt)
		g.idleAt = nil
	}
	l.open--
	l.freed.Signal()
	l.mu.Unlock()
	if l.onConns != nil {
		l.onConns(-1)
	}
}

// guardConn is a connection whose reads go through a framer.
//
// net/http reads a connection from two goroutines in turn (the request
// reader, and a one-byte background read while a handler runs) and writes
// from a third (the handler). Reads never hold mu while they block on the
// network.
type guardConn struct {
	net.Conn
	writeIdle time.Duration

	// l counted this connection in; nil for none. l.mu guards idleAt and
	// gone.
	l      *Listener
	idleAt *list.Element // in l.idle while idle between requests
	gone   bool          // closed and counted out

	mu       sync.Mutex
	f        framer
	deadline time.Time // write deadline set by the server; zero for none
	applied  time.Time // write deadline last set on Conn by Write
}

// errFraming is the error a body read gets when its framing is broken.
type errFraming struct{ reason string }

func (e *errFraming) Error() string { return "proxy: malformed request framing: " + e.reason }

// Read returns screened bytes of the request stream.
func (c *guardConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var rerr error
	c.mu.Lock()
	for {
		if n := c.f.deliver(p); n > 0 {
			c.mu.Unlock()
			return n, nil
		}
		switch c.f.st {
		case stRejected:
			c.mu.Unlock()
			return 0, io.EOF
		case stBroken:
			err := &errFraming{c.f.reason}
			c.mu.Unlock()
			return 0, err
		}
		if n := c.f.upgradeRead(p); n > 0 {
			c.mu.Unlock()
			return n, nil
		}
		if c.f.step() {
			continue
		}
		if rerr != nil {
			// A deadline net/http set, or EOF: returned as is, with the
			// framer's state kept for the next Read.
			c.mu.Unlock()
			return 0, rerr
		}
		// The framer needs more input. Body bytes, and bytes after the
		// framing is no longer followed, are read straight into p.
		if limit := c.f.direct(); limit > 0 {
			c.mu.Unlock()
			n, err := c.Conn.Read(p[:min(int64(len(p)), limit)])
			c.mu.Lock()
			c.f.readDirect(n)
			c.mu.Unlock()
			return n, err
		}
		// Only this goroutine touches the buffer past f.hi (net/http
		// never reads a connection from two goroutines at once), so the
		// read can fill it without the lock.
		dst := c.f.space(4096)
		c.mu.Unlock()
		n, err := c.Conn.Read(dst)
		c.mu.Lock()
		c.f.hi += n
		rerr = err
	}
}

// Write sends b to the client, within the write idle timeout, and tells
// the framer how an upgrade request was answered.
func (c *guardConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.f.sawResponse(b)
	if c.writeIdle > 0 {
		d := time.Now().Add(c.writeIdle)
		if !c.deadline.IsZero() && c.deadline.Before(d) {
			d = c.deadline
		}
		// Setting a deadline re-arms a runtime timer: do it at most once a
		// second while it only moves later (the idle bound is then
		// writeIdle less under a second), and at once when it moves
		// earlier. Measured at 0.3–0.8% of CPU per request when set on
		// every write (docs/performance.md).
		if d.Before(c.applied) || d.Sub(c.applied) > time.Second {
			if err := c.Conn.SetWriteDeadline(d); err != nil {
				c.mu.Unlock()
				return 0, err
			}
			c.applied = d
		}
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// SetDeadline records the write deadline for Write, then sets both.
func (c *guardConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline, c.applied = t, t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

// SetWriteDeadline records the write deadline for Write, then sets it.
func (c *guardConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline, c.applied = t, t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// lingerTime bounds how long a rejected connection is drained before it
// closes: net/http closes right after its 400, and closing a socket that
// still holds unread input sends a reset, which can destroy the 400 before
// the client reads it. net/http lingers the same way after a 431.
const lingerTime = 250 * time.Millisecond

// Close closes the connection, draining a rejected one briefly first.
func (c *guardConn) Close() error {
	c.mu.Lock()
	rejected := c.f.st == stRejected
	c.mu.Unlock()
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok && rejected {
		if cw.CloseWrite() == nil && c.Conn.SetReadDeadline(time.Now().Add(lingerTime)) == nil {
			_, _ = io.CopyN(io.Discard, c.Conn, 256<<10)
		}
	}
	err := c.Conn.Close()
	if c.l != nil {
		c.l.release(c)
	}
	return err
}

// evict closes an idle connection to make room for a new one. The server's
// read waiting for the next request fails, and the server then closes the
// connection (again) and forgets it, as when its idle timeout expires.
func (c *guardConn) evict() {
	c.Conn.Close()
	c.l.release(c)
}

// CloseWrite shuts down the sending side, for net/http's and
// ReverseProxy's half-closes.
func (c *guardConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// frameState is where a framer is in the request stream.
type frameState uint8

const (
	stHead           frameState = iota // reading a request head
	stBody                             // passing remain bytes of a Content-Length body
	stChunkSize                        // reading a chunk-size line
	stChunkData                        // passing remain bytes of chunk data
	stChunkEnd                         // reading the CRLF after chunk data
	stTrailer                          // reading trailer lines
	stUpgradePending                   // an upgrade request is done; its response is not known
	stPassthrough                      // no longer following the framing
	stRejected                         // a head was replaced; nothing more is read
	stBroken                           // a body broke its framing; reads fail
)

// Limits on what the framer holds; both are net/http's own.
const (
	maxChunkLine   = 4096 // a chunk-size line (net/http's maxLineLength)
	maxTrailer     = 4096 // the trailer section (net/http peeks at most its bufio buffer)
	maxStatusSniff = 4096 // interim responses scanned for an upgrade's answer
)

// rejectLine replaces a rejected head. It is an invalid request line
// whatever (at most one) byte of the stream net/http already read before
// it (see stUpgradePending), so net/http answers 400 and closes.
const rejectLine = "\x00 / HTTP/1.1\r\n\r\n"

// framer follows the request stream of one connection. It holds each
// request head until the head is complete and checked, and passes body
// bytes on as they come, checking chunked framing. It does no I/O and is
// not safe for concurrent use.
type framer struct {
	maxHead  int
	onReject func() // nil for none

	st     frameState
	buf    []byte // buf[lo:hi] is received and not yet delivered
	lo, hi int
	ready  int   // buf[lo:lo+ready] may be delivered
	skip   int   // buf[lo:lo+skip] was delivered already (stUpgradePending)
	scan   int   // bytes of the current head already scanned
	lineOK bool  // the current head's request line is complete and valid
	remain int64 // bytes left in a body or chunk

	trailer int    // trailer bytes so far
	upgrade bool   // an upgrade request's response status is awaited
	status  []byte // response bytes seen while upgrade is set
	repl    string // replacement bytes left to deliver
	reason  string // why the stream was rejected or broken

	// Tests only: consumed counts bytes passed on or cleared for
	// delivery, and ends, when not nil, records it at each message end.
	consumed int64
	ends     *[]int64
}

// space returns room for n more received bytes at buf[hi:]; the caller
// fills some of it and adds the count to hi.
func (f *framer) space(n int) []byte {
	if f.lo == f.hi {
		f.lo, f.hi = 0, 0
	}
	if f.hi+n > len(f.buf) {
		if f.lo > 0 {
			copy(f.buf, f.buf[f.lo:f.hi])
			f.hi -= f.lo
			f.lo = 0
		}
		if f.hi+n > len(f.buf) {
			// Double, but never past what the longest head that is held
			// needs (a longer one passes through): a slow client holding
			// an unfinished 64 KB head then costs 72 KiB here, not 128.
			size := max(2*len(f.buf), 4096)
			if f.maxHead > 0 {
				size = min(size, f.maxHead+4096)
			}
			nb := make([]byte, max(size, f.hi+n))
			copy(nb, f.buf[:f.hi])
			f.buf = nb
		}
	}
	return f.buf[f.hi : f.hi+n]
}

// feed appends bytes received from the client.
func (f *framer) feed(b []byte) {
	f.hi += copy(f.space(len(b)), b)
}

// pending returns the received bytes not yet delivered.
func (f *framer) pending() []byte { return f.buf[f.lo:f.hi] }

// deliver copies bytes that may be delivered into p.
func (f *framer) deliver(p []byte) int {
	if f.repl != "" {
		n := copy(p, f.repl)
		f.repl = f.repl[n:]
		return n
	}
	if f.ready == 0 {
		return 0
	}
	if f.skip > 0 {
		f.lo += f.skip
		f.ready -= f.skip
		f.skip = 0
	}
	n := copy(p, f.buf[f.lo:f.lo+f.ready])
	f.lo += n
	f.ready -= n
	if f.lo == f.hi && len(f.buf) > 64<<10 {
		f.buf = nil // do not keep a large head's buffer on an idle connection
		f.lo, f.hi = 0, 0
	}
	return n
}

// direct reports how many bytes a Read may take straight from the network
// without the framer seeing them first: 0 unless nothing is held back and
// the bytes are body or passthrough bytes.
func (f *framer) direct() int64 {
	if f.lo != f.hi || f.repl != "" {
		return 0
	}
	switch f.st {
	case stBody, stChunkData:
		return f.remain
	case stPassthrough:
		return 1 << 62
	}
	return 0
}

// clear marks the next n pending bytes for delivery.
func (f *framer) clear(n int) {
	f.ready += n
	f.consumed += int64(n)
}

// readDirect accounts for n bytes a Read took straight from the network.
func (f *framer) readDirect(n int) {
	f.consumed += int64(n)
	switch f.st {
	case stBody:
		f.remain -= int64(n)
		if f.remain == 0 {
			f.endMessage()
		}
	case stChunkData:
		f.remain -= int64(n)
		if f.remain == 0 {
			f.st = stChunkEnd
		}
	}
}

// step processes pending bytes. It reports whether it made progress; if
// not, it needs more input (or the stream is over).
func (f *framer) step() bool {
	in := f.pending()[f.ready:]
	switch f.st {
	case stHead:
		return f.stepHead(in)
	case stBody, stChunkData:
		if len(in) == 0 {
			return false
		}
		n := min(int64(len(in)), f.remain)
		f.clear(int(n))
		f.remain -= n
		if f.remain == 0 {
			if f.st == stBody {
				f.endMessage()
			} else {
				f.st = stChunkEnd
			}
		}
		return true
	case stChunkEnd:
		if len(in) < 2 {
			return false
		}
		if in[0] != '\r' || in[1] != '\n' {
			return f.broken("chunk data not followed by CRLF")
		}
		f.clear(2)
		f.st = stChunkSize
		return true
	case stChunkSize:
		line, ok := f.line(in, maxChunkLine)
		if !ok {
			return line != nil // nil: need more; non-nil: broken already
		}
		size, ok := parseChunkSize(line)
		if !ok {
			return f.broken("malformed chunk size line")
		}
		f.clear(len(line))
		if size == 0 {
			f.st, f.trailer = stTrailer, 0
		} else {
			f.st, f.remain = stChunkData, size
		}
		return true
	case stTrailer:
		line, ok := f.line(in, maxTrailer-f.trailer)
		if !ok {
			return line != nil
		}
		f.trailer += len(line)
		if len(line) == 2 { // CRLF: the end of the message
			f.clear(2)
			f.endMessage()
			return true
		}
		if !validFieldLine(line[:len(line)-2]) {
			return f.broken("malformed trailer field")
		}
		f.clear(len(line))
		return true
	case stUpgradePending:
		return false
	case stPassthrough:
		if len(in) == 0 {
			return false
		}
		f.clear(len(in))
		return true
	}
	return false
}

// line returns the CRLF-terminated line at the start of in, CRLF included,
// and true. When in holds no complete line yet it returns nil, false, or,
// if the line is already longer than limit or ends in a bare LF, marks the
// stream broken and returns a non-nil slice and false.
func (f *framer) line(in []byte, limit int) ([]byte, bool) {
	i := bytes.IndexByte(in, '\n')
	if i < 0 {
		if len(in) > limit {
			f.broken("line too long")
			return in, false
		}
		return nil, false
	}
	if i+1 > limit {
		f.broken("line too long")
		return in, false
	}
	if i == 0 || in[i-1] != '\r' || bytes.IndexByte(in[:i-1], '\r') >= 0 {
		f.broken("line not terminated by CRLF")
		return in, false
	}
	return in[:i+1], true
}

func (f *framer) broken(reason string) bool {
	f.st, f.reason = stBroken, reason
	return true
}

// endMessage moves on after a complete request.
func (f *framer) endMessage() {
	if f.ends != nil {
		*f.ends = append(*f.ends, f.consumed)
	}
	if f.upgrade {
		f.st = stUpgradePending
		return
	}
	f.st, f.scan, f.lineOK = stHead, 0, false
}

// stepHead looks for the end of the head at the start of in and, once it
// has it, checks it.
func (f *framer) stepHead(in []byte) bool {
	// Scan each byte once however the head arrives (a slow client sends
	// it a byte at a time).
	end := -1
	for f.scan < len(in) {
		i := bytes.IndexByte(in[f.scan:], '\n')
		if i < 0 {
			f.scan = len(in)
			break
		}
		nl := f.scan + i
		f.scan = nl + 1
		// Refuse a bare LF as soon as it arrives, not at a head end that
		// may never come.
		if nl == 0 || in[nl-1] != '\r' {
			f.reject("bare LF line end")
			return true
		}
		if !f.lineOK {
			// Refuse a malformed request line (binary garbage, a TLS
			// handshake) as soon as it is complete, too.
			if _, _, reason := parseRequestLine(in[:nl-1]); reason != "" {
				f.reject(reason)
				return true
			}
			f.lineOK = true
			continue
		}
		// The line before this CRLF is empty when the CR follows the
		// previous line's LF.
		if in[nl-2] == '\n' {
			end = nl + 1
			break
		}
	}
	if end < 0 {
		if len(in) > f.maxHead {
			// net/http answers 431 and closes before it parses this head.
			f.st = stPassthrough
			return true
		}
		return false
	}
	if end > f.maxHead {
		f.st = stPassthrough
		return true
	}
	h, reason := parseHead(in[:end])
	if reason != "" {
		f.reject(reason)
		return true
	}
	f.clear(end)
	f.scan, f.lineOK = 0, false
	f.upgrade = h.upgrade
	f.status = f.status[:0]
	switch {
	case h.passthrough:
		f.st = stPassthrough
	case h.bodyLen < 0:
		f.st = stChunkSize
	case h.bodyLen > 0:
		f.st, f.remain = stBody, h.bodyLen
	default:
		f.endMessage()
	}
	return true
}

// reject replaces the current head, and drops everything after it.
func (f *framer) reject(reason string) {
	if f.onReject != nil {
		f.onReject()
	}
	f.st, f.reason, f.repl = stRejected, reason, rejectLine
	f.lo, f.hi, f.ready, f.skip = 0, 0, 0, 0
	f.buf = nil
}

// upgradeRead lets net/http's one-byte background read take the first byte
// of whatever follows an upgrade request, before the framer knows whether
// that is a new request or the upgraded protocol. The byte stays in the
// buffer (skip) so that it is checked as part of the next head if the
// upgrade is refused. It returns 0 if the framer cannot give such a byte.
func (f *framer) upgradeRead(p []byte) int {
	in := f.pending()
	if f.st != stUpgradePending || f.ready != 0 || len(in) <= f.skip || len(p) == 0 {
		return 0
	}
	if f.skip > 0 {
		// net/http reads ahead only once while a handler runs. Anything
		// else is not a request read this framer understands: stop
		// following the framing rather than guess.
		f.st = stPassthrough
		f.ready = len(in)
		return 0
	}
	p[0] = in[0]
	f.skip = 1
	return 1
}

// sawResponse looks at bytes written to the client while an upgrade
// request awaits its answer: a 101 means the connection now carries
// another protocol, anything else but an interim 1xx means the next bytes
// are a request again.
func (f *framer) sawResponse(b []byte) {
	if !f.upgrade {
		return
	}
	f.status = append(f.status, b[:min(len(b), max(maxStatusSniff+1-len(f.status), 0))]...)
	for {
		s := f.status
		if len(s) < len("HTTP/1.1 101") {
			if len(s) > 0 && !bytes.HasPrefix([]byte("HTTP/1."), s[:min(len(s), 7)]) {
				f.upgradeRefused()
			}
			return
		}
		if !bytes.HasPrefix(s, []byte("HTTP/1.")) {
			f.upgradeRefused()
			return
		}
		code := s[9:12]
		switch {
		case string(code) == "101":
			f.upgrade = false
			f.status = nil
			f.st = stPassthrough
			// The byte net/http took early belongs to the new protocol and
			// is net/http's; everything else is passed on.
			f.lo += f.skip
			f.skip = 0
			f.ready = f.hi - f.lo
			return
		case code[0] == '1':
			end := bytes.Index(s, []byte("\r\n\r\n"))
			if end < 0 {
				if len(s) > maxStatusSniff {
					f.upgradeRefused()
				}
				return
			}
			f.status = s[end+4:]
		default:
			f.upgradeRefused()
			return
		}
	}
}

func (f *framer) upgradeRefused() {
	f.upgrade = false
	f.status = nil
	if f.st == stUpgradePending {
		f.st, f.scan, f.lineOK = stHead, 0, false
	}
}

// head is what the framer needs to know about a request head.
type head struct {
	bodyLen     int64 // -1 for chunked
	upgrade     bool  // the request carries Upgrade
	passthrough bool  // net/http will refuse it and close the connection
}

// parseHead checks a complete request head (request line, field lines,
// empty line) and returns its framing, or the reason to reject it.
//
// A head is rejected for: a line that ends in a bare LF (RFC 9112 §2.2
// lets a recipient accept one; net/http does, and so might an origin that
// reads the head differently, so edge refuses it); a malformed request
// line, or the asterisk-form target; the HTTP/2 preface; a CR inside a
// line; an obs-fold line (RFC 9112 §5.2 lets a server reject it,
// and a proxy that unfolds it differently from its origin is a smuggling
// risk); a field line without a colon or with an invalid name; more than
// one Host; more than one Content-Length, even with equal values (RFC 9110
// §8.6 allows either rejecting or merging); Transfer-Encoding together
// with Content-Length, or in HTTP/1.0; an invalid Content-Length; and an
// absolute-form target with userinfo, or whose authority is not the Host
// field's host once both are normalised like a domain lookup.
func parseHead(h []byte) (head, string) {
	var (
		out                 head
		line                []byte
		rest                = h
		first               = true
		http10              bool
		target              []byte
		nCL, nTE, nHost     int
		clVal, teVal, hostV []byte
	)
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		line, rest = rest[:i], rest[i+1:]
		n := len(line)
		if n == 0 || line[n-1] != '\r' {
			return out, "bare LF line end"
		}
		line = line[:n-1]
		if bytes.IndexByte(line, '\r') >= 0 {
			return out, "CR inside a line"
		}
		if first {
			first = false
			tgt, version, reason := parseRequestLine(line)
			if reason != "" {
				return out, reason
			}
			if version[5] != '1' {
				out.passthrough = true // net/http answers 505
				return out, ""
			}
			http10 = version[7] == '0'
			target = tgt
			continue
		}
		if len(line) == 0 {
			break // the empty line that ends the head
		}
		if line[0] == ' ' || line[0] == '\t' {
			return out, "obs-fold line"
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !isToken(name) {
			return out, "malformed field line"
		}
		value = trimOWSBytes(value)
		switch {
		case asciiEqualFold(name, "content-length"):
			nCL++
			clVal = value
		case asciiEqualFold(name, "transfer-encoding"):
			nTE++
			teVal = value
		case asciiEqualFold(name, "host"):
			nHost++
			hostV = value
		case asciiEqualFold(name, "upgrade"):
			out.upgrade = true
		}
	}
	switch {
	case nHost > 1:
		return out, "more than one Host"
	case nCL > 1:
		return out, "more than one Content-Length"
	case nTE > 0 && nCL > 0:
		return out, "Transfer-Encoding with Content-Length"
	case nTE > 0 && http10:
		return out, "Transfer-Encoding in HTTP/1.0"
	case nTE > 1 || nTE == 1 && !asciiEqualFold(teVal, "chunked"):
		out.passthrough = true // net/http answers 501
	case nTE == 1:
		out.bodyLen = -1
	case nCL == 1:
		n, ok := parseContentLength(clVal)
		if !ok {
			return out, "invalid Content-Length"
		}
		out.bodyLen = n
	}
	if reason := checkAbsoluteForm(target, hostV, nHost == 1); reason != "" {
		return out, reason
	}
	return out, ""
}

// parseRequestLine splits a request line (without its line end) into
// target and version, or returns why it is malformed. The version is
// "HTTP/" DIGIT "." DIGIT; the HTTP/2 preface is refused, since this
// listener does not serve h2c.
//
// The asterisk-form target ("OPTIONS *") is refused too: it asks about
// the server as a whole, which edge cannot answer for an origin, and
// net/http would answer it itself (200, for any Host) unless its
// DisableGeneralOptionsHandler is set. Refusing it here counts it with
// the other framing refusals.
func parseRequestLine(line []byte) (target, version []byte, reason string) {
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, nil, "CR inside a line"
	}
	method, r, ok1 := bytes.Cut(line, []byte(" "))
	target, version, ok2 := bytes.Cut(r, []byte(" "))
	if !ok1 || !ok2 || !isToken(method) || len(target) == 0 || !isHTTPVersion(version) {
		return nil, nil, "malformed request line"
	}
	if version[5] == '2' && string(method) == "PRI" {
		return nil, nil, "HTTP/2 preface (h2c is not served)"
	}
	if string(target) == "*" {
		return nil, nil, "asterisk-form target"
	}
	return target, version, ""
}

// checkAbsoluteForm checks an absolute-form request target against the
// Host field. net/http serves such a request for the target's authority
// and drops the Host field, as RFC 9112 §3.2.2 asks of an origin server;
// a gateway in a chain of proxies that might route by the Host field
// instead must refuse the disagreement (HAProxy does the same).
func checkAbsoluteForm(target, host []byte, haveHost bool) string {
	_, after, ok := bytes.Cut(target, []byte("://"))
	if !ok || len(target) == 0 || target[0] == '/' {
		return ""
	}
	authority := after
	if i := bytes.IndexAny(after, "/?#"); i >= 0 {
		authority = after[:i]
	}
	if bytes.IndexByte(authority, '@') >= 0 {
		return "userinfo in the request target"
	}
	if !haveHost {
		return ""
	}
	a, ok1 := rules.NormalizeHost(string(authority))
	b, ok2 := rules.NormalizeHost(string(host))
	if !ok1 || !ok2 || a != b {
		return "request target authority disagrees with Host"
	}
	return ""
}

// parseChunkSize parses a chunk-size line with its CRLF: 1 to 16 hex
// digits with a value below 2⁶³, then optional extensions after ';'
// without control bytes other than HTAB (RFC 9112 §7.1).
func parseChunkSize(line []byte) (int64, bool) {
	line = line[:len(line)-2]
	var n uint64
	i := 0
	for ; i < len(line) && isHexByte(line[i]); i++ {
		if i == 16 {
			return 0, false
		}
		n = n<<4 | uint64(unhex(line[i]))
	}
	if i == 0 || n > 1<<63-1 {
		return 0, false
	}
	if ext := line[i:]; len(ext) > 0 {
		if ext[0] != ';' {
			return 0, false
		}
		for _, c := range ext {
			if c < ' ' && c != '\t' || c == 0x7f {
				return 0, false
			}
		}
	}
	return int64(n), true
}

// validFieldLine reports whether line (without CRLF) is "name: value" with
// a token name, no leading whitespace, and no control bytes but HTAB.
func validFieldLine(line []byte) bool {
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok || !isToken(name) {
		return false
	}
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// parseContentLength accepts 1 to 19 decimal digits (RFC 9110 §8.6).
func parseContentLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 19 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, n >= 0
}

// isHTTPVersion reports whether v is "HTTP/" DIGIT "." DIGIT.
func isHTTPVersion(v []byte) bool {
	return len(v) == 8 && string(v[:5]) == "HTTP/" && isDigit(v[5]) && v[6] == '.' && isDigit(v[7])
}

func isDigit(c byte) bool   { return '0' <= c && c <= '9' }
func isHexByte(c byte) bool { return isHexDigit(c) }

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// isToken reports whether b is an RFC 9110 token.
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !isTokenByte(c) {
			return false
		}
	}
	return true
}

func isTokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

func trimOWSBytes(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// asciiEqualFold reports whether b equals the lower-case ASCII s, ignoring
// ASCII case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
