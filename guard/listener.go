// Package guard screens the HTTP/1.x framing of requests on raw
// connections, before net/http parses them, and bounds the connections a
// server holds: see Listener. It is split by job: the Listener and its
// connection cap (listener.go), the setup stages the server above plugs
// into each new connection, such as a TLS handshake (stage.go), a
// connection's first stage before net/http has it (first.go), the
// connection wrapper with its write deadlines (conn.go) and its read
// deadline, which it keeps in net/http's place (deadline.go), the framing
// state machine that follows every message on a connection (framer.go),
// the request-head parser (head.go) and the fast path (fast.go, body.go,
// forward.go). A connection that speaks HTTP/2 is taken away from the
// Listener by a stage (h2.go) for the HTTP/2 server above, which reads it
// through a watch of its frames that ends floods (frames.go).
//
// The package knows nothing of rate limiting. It imports only the standard
// library and internal/wire, for the syntax of hosts and of HTTP bytes and
// the head it offers; the server above it observes refusals and the cap
// through the func hooks of ListenerOptions, and counts or logs them
// itself.
//
// A connection's life in the Listener: accepted (decided by Admit, then
// counted against MaxConnections), its Stages run in order in its own goroutine (each may
// replace the connection, take it away for another server, or refuse it;
// the connection a stage returns is what everything after reads), then
// the fast path answers what it can (ListenerOptions.Answer), and Accept
// returns it to net/http, whose reads the framer screens. Who owns it:
// the Listener until Accept returns it or a stage hands it off, then
// net/http or the stage's new owner, which closes it.
package guard

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/internal/wire"
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
	// Admit, if set, decides on each new connection in Accept, from its
	// peer (unmapped, without zone; the zero Addr for a connection not
	// over TCP) and the name of its socket (as OnConnections has it),
	// before anything is read from the connection or any Stage runs, and
	// before it is counted against MaxConnections: so a refused connection
	// never makes Accept close an idle connection or wait. A refused
	// connection is closed at once (with a reset: SO_LINGER 0, so that it
	// leaves no socket in TIME_WAIT), and Accept goes on to the next; an
	// admitted one's Release is called once when it closes. It runs in
	// Accept's goroutine: it must be quick and must not block.
	Admit func(peer netip.Addr, socket string) wire.Admission
	// OnCapped, if set, is called for each connection that arrives while
	// MaxConnections are open, before Accept closes an idle connection or
	// starts to wait. It must be quick and must not block.
	OnCapped func(CapEvent)
	// OnConnections, if set, is called with 1 when Accept returns a
	// connection and with -1 when that connection closes, so that a gauge
	// can follow the connections open, with the name of the socket it
	// came from (Socket.Name; Name for a Listener not on a Join). It must
	// be quick and must not block.
	OnConnections func(socket string, delta int)
	// Name names the Listener's connections to OnConnections when its
	// net.Listener is not a Join.
	Name string

	// Answer, if set, is offered every simple request head that is the
	// only request on its connection, before net/http sees it (see
	// Request, and fast.go for what simple means). To answer, it appends a
	// complete HTTP/1.1 response to out and returns it with true: the
	// Listener writes it to the client, keeps the connection open, and
	// net/http never sees the request. A response too long to hold may
	// be written in part through Request.Client first, which can also close
	// the connection after it; otherwise the response must not close the
	// connection (no "Connection: close"). A request's body is read
	// through Request.Body while the hook runs (body.go). To decline, it returns false, and must then have
	// changed nothing that net/http's serving of the request would: the
	// request goes on to net/http as if it had never been offered. It is
	// called from the goroutine reading the connection, concurrently for
	// different connections. The server's ConnState must call
	// [Listener.ConnState]: without it nothing is offered.
	Answer func(r *Request, out []byte) ([]byte, bool)
	// The http.Server's timeouts, which the Listener keeps while it
	// answers (they must equal the server's; 0 means none, as for the
	// server).
	ReadHeaderTimeout, WriteTimeout, IdleTimeout time.Duration
	// Stages, if any, run in order on each new connection, in its own
	// goroutine, before the Listener reads its first request head: they
	// may replace the connection (a TLS server connection, whose
	// decrypted stream the Listener then reads), take it away for another
	// server, or refuse it (see Stage).
	Stages []Stage

	// ReadTimeout bounds the reading of each request, head and body, as
	// http.Server.ReadTimeout does, but from its head's first byte (a
	// connection's first request: from the connection's accept), on every
	// connection, answered here or not (deadline.go). The Listener keeps
	// it in the server's place: the server's ReadTimeout must be 0, or
	// net/http would bound a connection's first request from before the
	// requests answered on it. 0 means none.
	ReadTimeout time.Duration
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
// Listener reads HTTP/1.x as it comes from the connection: behind TLS, a
// Stage makes the TLS server connection, and the Listener reads its
// decrypted stream (see Stage).
type Listener struct {
	net.Listener
	onReject  func()
	maxHead   int
	writeIdle time.Duration

	maxConns int
	admitFn  func(netip.Addr, string) wire.Admission
	onCapped func(CapEvent)
	onConns  func(socket string, delta int)
	name     string

	// The fast path (fast.go).
	answer        func(r *Request, out []byte) ([]byte, bool)
	maxSimple     int           // the server's MaxHeaderBytes
	readHeader    time.Duration // the server's ReadHeaderTimeout
	headerTimeout time.Duration // the shorter of ReadHeaderTimeout and ReadTimeout
	idleTimeout   time.Duration
	writeTimeout  time.Duration
	readTimeout   time.Duration // the Listener's own (deadline.go)
	closing       atomic.Bool   // Close was called

	answering atomic.Int64 // fast-path answers being made (WaitAnswers)

	mu     sync.Mutex
	freed  *sync.Cond // signalled when a connection closes or becomes idle, and on Close
	open   int        // connections accepted and not closed
	idle   idleList   // connections idle between requests, longest idle first
	closed bool

	// With Answer set, connections go through their first stage before
	// Accept returns them (first.go).
	loopOnce sync.Once
	results  chan acceptResult
	loopDone chan struct{} // the accept loop has ended
	stop     chan struct{} // closed by Close
	// staged holds the connections in their first stage, for Close: the
	// value is the accepted connection while stages have it (Close closes
	// that), nil after.
	staged map[*guardConn]net.Conn
	stages []Stage
	// joinStages: the net.Listener is a Join with a socket that has
	// stages of its own.
	joinStages bool
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
		admitFn:   opts.Admit,
		onCapped:  opts.OnCapped,
		onConns:   opts.OnConnections,
		name:      opts.Name,

		answer:        opts.Answer,
		maxSimple:     mhb,
		readHeader:    max(opts.ReadHeaderTimeout, 0),
		headerTimeout: shorter(opts.ReadHeaderTimeout, opts.ReadTimeout),
		idleTimeout:   max(opts.IdleTimeout, 0),
		writeTimeout:  max(opts.WriteTimeout, 0),
		readTimeout:   max(opts.ReadTimeout, 0),
		stages:        append([]Stage(nil), opts.Stages...),
		joinStages:    hasStages(ln),
	}
	l.freed = sync.NewCond(&l.mu)
	if j, ok := ln.(*joined); ok && opts.Admit != nil {
		j.admit.Store(&opts.Admit)
	}
	if l.looped() {
		l.results, l.loopDone, l.stop = make(chan acceptResult), make(chan struct{}), make(chan struct{})
		l.staged = make(map[*guardConn]net.Conn)
	}
	return l
}

// shorter returns the shorter of two timeouts, where 0 or less is none.
func shorter(a, b time.Duration) time.Duration {
	a, b = max(a, 0), max(b, 0)
	if a == 0 || b > 0 && b < a {
		return b
	}
	return a
}

// looped reports whether connections go through their first stage, in
// goroutines of their own, before Accept returns them (first.go).
func (l *Listener) looped() bool { return l.answer != nil || len(l.stages) > 0 || l.joinStages }

// Accept returns the next connection, wrapped. At MaxConnections it first
// makes room (see ListenerOptions.MaxConnections); it returns net.ErrClosed
// if the Listener is closed while it waits.
//
// The connection that arrives at the cap is accepted from the kernel before
// the cap is checked, so that an idle connection is closed only for a
// client that is really there: at most MaxConnections+1 sockets are open.
//
// With ListenerOptions.Answer or Stages set, a connection is returned only
// after its first stage (first.go): its stages run, and the requests the
// fast path answers before net/http must read anything are answered, in
// the connection's own goroutine, and a connection that ends meanwhile,
// or is handed off, is never returned.
func (l *Listener) Accept() (net.Conn, error) {
	if !l.looped() {
		g, err := l.accept()
		if err != nil {
			return nil, err
		}
		return g, nil
	}
	l.loopOnce.Do(func() { go l.acceptLoop() })
	select {
	case r := <-l.results:
		if r.err != nil {
			return nil, r.err
		}
		return r.g, nil
	case <-l.loopDone:
		return nil, net.ErrClosed
	}
}

// accept accepts the next connection from the kernel that Admit lets in,
// once there is room for it, and wraps it.
func (l *Listener) accept() (*guardConn, error) {
	var (
		c      net.Conn
		stages []Stage
		name   string
		adm    wire.Admission
	)
	for {
		var err error
		if c, err = l.Listener.Accept(); err != nil {
			return nil, err
		}
		stages, name = l.stages, l.name
		if jc, ok := c.(*joinedConn); ok {
			c, stages, name = jc.Conn, jc.socket.Stages, jc.socket.Name
			if jc.asked { // in the socket's goroutine (join.go)
				adm = jc.adm
				break
			}
		}
		if l.admitFn == nil {
			break
		}
		if adm = l.admitFn(peerAddr(c), name); !adm.Refused {
			break
		}
		refuse(c)
	}
	g := &guardConn{Conn: c, sock: c, writeIdle: l.writeIdle, l: l, f: framer{maxHead: l.maxHead, onReject: l.onReject,
		fast: l.answer != nil, maxSimple: l.maxSimple}, stages: stages, socket: name, onRelease: adm.Release}
	if len(stages) > 0 {
		g.Conn = &countedConn{Conn: c, g: g}
	}
	if l.readTimeout > 0 {
		g.reqStart = time.Now() // the first request's start, as net/http dates it
	}
	if err := l.admit(); err != nil {
		c.Close()
		if adm.Release != nil {
			adm.Release()
		}
		return nil, err
	}
	if l.onConns != nil {
		l.onConns(g.socket, 1)
	}
	return g, nil
}

// refuse closes a connection Admit refused, unread, with a reset where it
// can: a client refused in a flood then leaves edge no socket in
// TIME_WAIT.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// admit counts a new connection in, once there is room for it.
func (l *Listener) admit() error {
	l.mu.Lock()
	reported := false
	for !l.closed && l.maxConns > 0 && l.open >= l.maxConns {
		victim := l.idle.first
		if victim != nil {
			l.idle.remove(victim)
		}
		if !reported && l.onCapped != nil {
			reported = true
			l.mu.Unlock()
			l.onCapped(CapEvent{Max: l.maxConns, ClosedIdle: victim != nil})
			l.mu.Lock()
			if victim == nil {
				// Close, or a connection's end, may have broadcast while
				// the lock was let go: look again before waiting.
				continue
			}
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
// net.ErrClosed. Connections net/http has stay open (its Shutdown or
// Close ends them), and so do those handed off by a Stage; those in their
// first stage, which net/http does not know of, are closed: at once while
// a Stage has them, else each after the answer it is making.
func (l *Listener) Close() error {
	if l.closing.Swap(true) {
		return l.Listener.Close()
	}
	l.mu.Lock()
	l.closed = true
	l.freed.Broadcast()
	staged := make([]net.Conn, 0, len(l.staged))
	for g, c := range l.staged {
		if c == nil {
			c = g
		}
		staged = append(staged, c)
	}
	l.mu.Unlock()
	if l.stop != nil {
		close(l.stop)
	}
	err := l.Listener.Close()
	for _, c := range staged {
		c.Close()
	}
	return err
}

// ConnState records which connections are idle between requests, the ones
// Accept may close at MaxConnections and the ones whose next request may be
// offered to ListenerOptions.Answer. Install it as the http.Server's
// ConnState (or call it from that hook). Connections that did not come
// from this Listener are ignored.
func (l *Listener) ConnState(c net.Conn, st http.ConnState) {
	g, ok := c.(*guardConn)
	if !ok || g.l != l {
		return
	}
	if l.answer != nil {
		g.mu.Lock()
		g.f.free = st == http.StateIdle || st == http.StateNew
		g.mu.Unlock()
	}
	if l.maxConns == 0 {
		return
	}
	l.markIdle(g, st == http.StateIdle)
}

// markIdle puts g at the end of the idle connections, or takes it out of
// them, for the connection cap.
func (l *Listener) markIdle(g *guardConn, idle bool) {
	if l.maxConns == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if g.gone {
		return
	}
	if idle {
		if !g.idle {
			l.idle.pushBack(g)
			l.freed.Signal() // an Accept waiting at the cap can close it
		}
		return
	}
	if g.idle {
		l.idle.remove(g)
	}
}

// idleList is a list of the connections idle between requests, longest
// idle first, linked through the connections themselves: a connection goes
// in and out of it around every request, which container/list would make
// an allocation each time.
type idleList struct {
	first, last *guardConn
}

func (q *idleList) pushBack(g *guardConn) {
	g.idle, g.idlePrev, g.idleNext = true, q.last, nil
	if q.last != nil {
		q.last.idleNext = g
	} else {
		q.first = g
	}
	q.last = g
}

func (q *idleList) remove(g *guardConn) {
	if g.idlePrev != nil {
		g.idlePrev.idleNext = g.idleNext
	} else {
		q.first = g.idleNext
	}
	if g.idleNext != nil {
		g.idleNext.idlePrev = g.idlePrev
	} else {
		q.last = g.idlePrev
	}
	g.idle, g.idlePrev, g.idleNext = false, nil, nil
}

// release counts g out, once.
func (l *Listener) release(g *guardConn) {
	l.mu.Lock()
	if g.gone {
		l.mu.Unlock()
		return
	}
	g.gone = true
	if g.idle {
		l.idle.remove(g)
	}
	l.open--
	l.freed.Signal()
	l.mu.Unlock()
	if l.onConns != nil {
		l.onConns(g.socket, -1)
	}
	if g.onRelease != nil {
		g.onRelease()
	}
}
