package guard

import (
	"errors"
	"net"
	"time"
)

// A connection's first stage, in its own goroutine: before net/http has
// it, the fast path answers every request on it that it takes, and the
// connection goes to net/http (Accept returns it) only once there is
// something net/http must read: a declined head, a rejected one's refusal.
// A client that sends one request a connection and is refused, as most
// bots and floods do, then costs no net/http connection at all (its state,
// buffers, contexts and goroutine). A connection whose client leaves, or
// whose time runs out, before that is closed here.
//
// The stage keeps what net/http would keep meanwhile: the header timeout
// from the accept (its first read's deadline) and the read timeout
// (deadline.go), the idle timeout between answers. One stage never waits
// on another: each runs in its connection's goroutine, never in Accept
// (TestFirstStageStallsNoOther).

// acceptResult is what Accept returns next.
type acceptResult struct {
	g   *guardConn
	err error
}

// acceptLoop accepts connections and starts each one's first stage, until
// the listener fails for good.
func (l *Listener) acceptLoop() {
	defer close(l.loopDone)
	for {
		g, err := l.accept()
		if err != nil {
			select {
			case l.results <- acceptResult{err: err}:
			case <-l.stop:
				return
			}
			if l.closing.Load() || !isTemporary(err) {
				return
			}
			continue // http.Server backs off before it asks again
		}
		go l.firstStage(g)
	}
}

// isTemporary is net/http's test of an Accept error it retries after a
// pause (a deprecated method, the only one that says so).
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// firstStage runs g's stages (stage.go) and its first stage, and hands g
// to net/http when its turn comes.
func (l *Listener) firstStage(g *guardConn) {
	growStack(0) // as net/http's goroutine does at its first deadline (conn.go)
	var raw net.Conn
	if len(g.stages) > 0 {
		raw = g.Conn
	}
	if !l.stage(g, raw) {
		g.Close()
		return
	}
	if raw != nil && !l.runStages(g) {
		return
	}
	var err error
	if l.answer != nil {
		err = g.answerFirst()
	}
	l.unstage(g)
	if err != nil {
		g.Close()
		g.mu.Lock() // no one reads the connection any more
		g.f.recycle()
		if g.fast != nil {
			g.fast.recycle()
			g.fast = nil
		}
		g.mu.Unlock()
		return
	}
	select {
	case l.results <- acceptResult{g: g}:
	case <-l.stop:
		g.Close()
	}
}

// stage records g as in its first stage, for Close, with the accepted
// connection raw while stages have it (nil for none); false if the
// Listener is closed.
func (l *Listener) stage(g *guardConn, raw net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.staged[g] = raw
	return true
}

func (l *Listener) unstage(g *guardConn) {
	l.mu.Lock()
	delete(l.staged, g)
	l.mu.Unlock()
}

// answerFirst answers, before net/http has the connection, every request
// the fast path takes, and returns nil once there is something net/http
// must read, or the error that ended the connection first.
func (c *guardConn) answerFirst() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.f.free = true // what net/http's ConnState(StateNew) would say
	if rh := c.l.readHeader; rh > 0 {
		c.srvRead = time.Now().Add(rh) // net/http's first read's deadline
	}
	var rerr error
	for {
		if c.f.repl != "" || c.f.ready > 0 || c.f.st == stRejected || c.f.st == stBroken || c.f.direct() > 0 {
			return nil
		}
		if c.f.step() {
			if c.f.st == stFast {
				if err := c.offer(); err != nil {
					return err // net.ErrClosed too, when Close came while it answered
				}
			}
			continue
		}
		if rerr != nil {
			return rerr
		}
		// Into the framer's buffer: nothing passes through (direct) here.
		_, done, err := c.fill(nil)
		if done {
			return err
		}
		rerr = err
	}
}
