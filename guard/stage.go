package guard

import (
	"net"
	"time"

	"github.com/edgerate/edge/internal/wire"
)

// A connection's setup stages, in its own goroutine, before its first
// stage (first.go): what must happen on a connection before the Listener
// reads its first request head (a PROXY protocol header read, a TLS
// handshake, the choice of a protocol by ALPN) is a Stage, installed by
// the server above through ListenerOptions.Stages. One connection's stages
// never wait on another's, nor hold up Accept (TestStageStallsNoOther).

// Stage is one step of a new connection's setup, given the connection as
// the stages before it left it. It returns what it did (StageResult), or
// an error to refuse the connection, which the Listener then closes; the
// Listener does not count or log a refusal itself: a Stage that wants it
// observed does so before it returns.
//
// A Stage runs in the connection's own goroutine, never in Accept, in the
// order of ListenerOptions.Stages, under one deadline for all of them:
// read and write deadlines set on the connection from its accept, at the
// shortest of the Listener's ReadHeaderTimeout, ReadTimeout and
// WriteTimeout (none without one), as net/http bounds a TLS handshake.
// The Listener clears them once the stages are done. A Stage must do its
// waiting in reads and writes of the connection, so that the deadline,
// and a close by Listener.Close, end it; it must not set deadlines of its
// own beyond the Listener's, nor keep the connection after it returns
// except through StageResult.Handoff.
//
// The connection a Stage is given counts against the Listener's
// MaxConnections (and OnConnections) until it is closed, whoever closes
// it; it is never closed to make room for another, and Listener.Close
// closes it while a stage has it.
type Stage func(c net.Conn) (StageResult, error)

// StageResult is what a Stage did with its connection. The zero value
// means it is unchanged, and the next stage (or the Listener) has it.
type StageResult struct {
	// Conn, if not nil, replaces the connection: the stages after this
	// one, and then the Listener, read and write Conn instead (the
	// decrypted stream of a TLS server connection, or a connection whose
	// RemoteAddr is a PROXY header's source). Conn wraps the connection
	// the Stage was given, and its Close must close that one. A Conn that
	// implements wire.Fronted says what a PROXY header told of the
	// connection: its requests carry it (wire.Head.Front, FrontOf) even
	// once a later stage has wrapped it.
	Conn net.Conn
	// Handoff, if not nil, takes the connection away from the Listener
	// for another server (HTTP/2, say): once the Stage has returned, and
	// unless the Listener was closed meanwhile, the Listener clears the
	// deadlines and calls Handoff with the connection (Conn if set), in
	// the connection's goroutine, and forgets it; no later stage runs,
	// and net/http never sees it. Handoff may serve the connection
	// itself, or hand it on; the connection is then its new owner's to
	// close, and Listener.Close does not close it. It stays counted
	// against MaxConnections until it is closed.
	Handoff func(net.Conn)
}

// stageTimeout is the stages' time from the accept: net/http's bound on
// a TLS handshake (the shortest of its header, read and write timeouts).
func (l *Listener) stageTimeout() time.Duration {
	return shorter(l.headerTimeout, l.writeTimeout)
}

// runStages runs the Listener's stages on g's connection and installs
// the connection they leave as g's. It returns false if g is done with:
// refused, closed by Listener.Close meanwhile, or handed off.
func (l *Listener) runStages(g *guardConn) bool {
	raw := g.Conn
	cur := raw
	if d := l.stageTimeout(); d > 0 {
		if err := raw.SetDeadline(time.Now().Add(d)); err != nil {
			l.endStages(g, cur)
			return false
		}
	}
	var handoff func(net.Conn)
	for _, st := range g.stages {
		res, err := st(cur)
		if res.Conn != nil {
			cur = res.Conn
			if f, ok := cur.(wire.Fronted); ok {
				// Kept: a later stage (TLS) wraps the connection that
				// knows it.
				g.front = f.Front()
			}
		}
		if err != nil {
			l.endStages(g, cur)
			return false
		}
		if handoff = res.Handoff; handoff != nil {
			break
		}
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.endStages(g, cur)
		return false
	}
	if handoff != nil {
		delete(l.staged, g)
	} else {
		// The stages are done: from here on Close closes g itself, which
		// now reads cur (the map and g.Conn change under l.mu, which
		// Close takes to find the connections in their first stage).
		g.Conn = cur
		l.staged[g] = nil
	}
	l.mu.Unlock()
	if l.stageTimeout() > 0 {
		_ = cur.SetDeadline(time.Time{}) // a failure shows on the next read
	}
	if handoff != nil {
		if _, ok := cur.(wire.Fronted); !ok && g.front != nil {
			// A later stage (TLS) hid the connection that knows it.
			cur = &frontedConn{Conn: cur, front: g.front}
		}
		handoff(cur)
		return false
	}
	if l.readTimeout > 0 {
		// The first request starts once the stages are done, as net/http
		// dates it after a TLS handshake.
		g.reqStart = time.Now()
	}
	return true
}

// endStages closes a connection its stages ended with, and forgets it.
func (l *Listener) endStages(g *guardConn, cur net.Conn) {
	cur.Close()
	l.unstage(g)
	l.release(g) // if cur's Close did not reach the counted connection
}

// countedConn is an accepted connection as the stages have it: its Close
// counts the connection out of the Listener, so that a connection handed
// off, or wrapped by a stage, stays counted until it is closed.
type countedConn struct {
	net.Conn
	g *guardConn
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.g.l.release(c.g)
	return err
}

// CloseWrite shuts down the sending side, when the connection can.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// frontedConn is a connection handed off (StageResult.Handoff) whose
// PROXY header a later stage's connection hides: it says what the header
// said (wire.Fronted, FrontOf), and the TLS of the connection it wraps
// (wire.Secure).
type frontedConn struct {
	net.Conn
	front *wire.Front
}

// Front returns what the connection's PROXY header said.
func (c *frontedConn) Front() *wire.Front { return c.front }

// TLS returns the TLS of the connection wrapped, nil without.
func (c *frontedConn) TLS() *wire.TLS { return tlsOf(c.Conn) }

// CloseWrite shuts down the sending side, when the connection can.
func (c *frontedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
