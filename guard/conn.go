package guard

import (
	"io"
	"net"
	"sync"
	"time"

	"github.com/edgerate/edge/internal/wire"
)

// guardConn is a connection whose reads go through a framer.
//
// net/http reads a connection from two goroutines in turn (the request
// reader, and a one-byte background read while a handler runs) and writes
// from a third (the handler). Reads never hold mu while they block on the
// network.
type guardConn struct {
	net.Conn
	writeIdle time.Duration
	// sock is the accepted socket, under whatever stages wrap it; fd its
	// descriptor once Left asked for it, -1 for none (left_linux.go).
	sock net.Conn
	fd   int32

	// l counted this connection in; nil for none. l.mu guards idle, its
	// links and gone.
	l                  *Listener
	stages             []Stage     // its socket's (stage.go)
	front              *wire.Front // what a stage's PROXY header said (stage.go); nil for none
	socket             string      // its socket's name, for OnConnections
	onRelease          func()      // Admit's Release; nil for none
	idle               bool        // in l.idle, idle between requests
	idlePrev, idleNext *guardConn
	gone               bool // closed and counted out

	mu       sync.Mutex
	f        framer
	deadline time.Time // write deadline set by the server; zero for none
	applied  time.Time // write deadline last set on Conn by Write

	// The read deadline (deadline.go): srvRead is the one the server last
	// set, rapplied the one last set on Conn (if rset); reqStart is when
	// the request being read began, if the framer had ended reqMsgs
	// messages then and still has.
	srvRead  time.Time
	rapplied time.Time
	rset     bool
	reqStart time.Time
	reqMsgs  uint64
	grown    bool // growStack was called on net/http's goroutine

	// The fast path (fast.go). fast is made on the first offer. While
	// owned, the fast path has answered since net/http last got bytes and
	// keeps the read deadline itself; lastAnswer is when it last answered.
	fast       *fastConn
	owned      bool
	lastAnswer time.Time
	// busy: the fast path's hook runs (c.mu is not held meanwhile); a
	// Close then only sets closeLater, and the connection closes when the
	// hook is done (forward.go).
	busy       bool
	closeLater bool
	// linger: the fast path answered a request whose body it did not
	// read to its end, and closes the connection after the answer; Close
	// lingers then as for a rejected head.
	linger bool
}

// errFraming is the error a body read gets when its framing is broken.
type errFraming struct{ reason string }

func (e *errFraming) Error() string { return "guard: malformed request framing: " + e.reason }

// Read returns screened bytes of the request stream.
func (c *guardConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var rerr error
	c.mu.Lock()
	for {
		if n := c.f.deliver(p); n > 0 {
			if c.f.st != stHead && c.f.st != stRejected {
				c.beginNow() // a head handed on whole, its body to come
			}
			c.handBack()
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
			if c.f.st == stFast {
				if err := c.offer(); err != nil {
					c.mu.Unlock()
					return 0, err
				}
			}
			continue
		}
		if rerr != nil {
			// A deadline net/http set, or EOF: returned as is, with the
			// framer's state kept for the next Read.
			c.mu.Unlock()
			return 0, rerr
		}
		n, done, err := c.fill(p)
		if done {
			c.mu.Unlock()
			return n, err
		}
		rerr = err
	}
}

// fill reads more of the stream when the framer needs more input, with
// c.mu held (let go while the read blocks), within the read deadline that
// holds (deadline.go). Body bytes, and bytes after the framing is no
// longer followed, are read straight into p: done, and n and err are the
// caller's to return. Anything else is read into the framer's buffer, and
// err is the caller's to keep until the framer has stepped over what came.
func (c *guardConn) fill(p []byte) (n int, done bool, err error) {
	if err := c.syncRead(); err != nil {
		return 0, true, err
	}
	if limit := c.f.direct(); limit > 0 {
		c.mu.Unlock()
		n, err := c.Conn.Read(p[:min(int64(len(p)), limit)])
		c.mu.Lock()
		c.f.readDirect(n)
		return n, true, err
	}
	// Only this goroutine touches the buffer past f.hi (net/http never
	// reads a connection from two goroutines at once), so the read can
	// fill it without the lock.
	dst := c.f.space(4096)
	c.mu.Unlock()
	n, err = c.Conn.Read(dst)
	c.mu.Lock()
	c.f.hi += n
	return 0, false, err
}

// readBody reads the raw bytes of a request body that the fast path took
// up (body.go), through the framer, which checks its chunked framing: 0,
// io.EOF once the message is over.
func (c *guardConn) readBody(p []byte) (int, error) {
	var rerr error
	c.mu.Lock()
	for {
		if n := c.f.deliver(p); n > 0 {
			c.mu.Unlock()
			return n, nil
		}
		switch c.f.st {
		case stHead:
			c.mu.Unlock()
			return 0, io.EOF
		case stBroken:
			err := &errFraming{c.f.reason}
			c.mu.Unlock()
			return 0, err
		}
		if c.f.step() {
			continue
		}
		if rerr != nil {
			c.mu.Unlock()
			return 0, rerr
		}
		n, done, err := c.fill(p)
		if done {
			c.mu.Unlock()
			return n, err
		}
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
		if err := c.applyWriteDeadline(d); err != nil {
			c.mu.Unlock()
			return 0, err
		}
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// applyWriteDeadline sets the write deadline d (zero for none), with c.mu
// held. Setting a deadline re-arms a runtime timer: it is done at most
// once a second while it only moves later (an idle bound is then up to a
// second shorter), and at once when it moves earlier. Measured at
// 0.3–0.8% of CPU per request when set on every write
// (docs/performance.md).
func (c *guardConn) applyWriteDeadline(d time.Time) error {
	if d.IsZero() {
		if c.applied.IsZero() {
			return nil
		}
	} else if !c.applied.IsZero() && !d.Before(c.applied) && d.Sub(c.applied) <= time.Second {
		return nil
	}
	if err := c.Conn.SetWriteDeadline(d); err != nil {
		return err
	}
	c.applied = d
	return nil
}

// SetWriteDeadline records the write deadline for Write, then sets it.
func (c *guardConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline, c.applied = t, t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// growStack grows the calling goroutine's stack to what serving a request
// takes, while it is shallow. net/http serves each connection on a new
// goroutine whose stack starts small, and it used to grow on the way to
// the first head's parse, a dozen frames deep, where copying it costs
// most (the figures: docs/performance.md, "A new connection per request").
//
//go:noinline
func growStack(i int) byte {
	var pad [4 << 10]byte
	pad[i&(len(pad)-1)] = 1
	return pad[(i+1)&(len(pad)-1)]
}

// lingerTime bounds how long a connection closed with input still to come
// is drained before it closes: closing a socket that still holds unread
// input sends a reset, and the kernel then drops what it had yet to send,
// which can destroy the answer before the client reads it. It applies to a
// rejected head (net/http closes right after its 400) and to a request
// the fast path answered without reading its body to the end (net/http
// shuts its write side and waits then too, as it does after a 431).
const lingerTime = 250 * time.Millisecond

// Close closes the connection, draining it briefly first when input may
// still be coming (lingerTime).
func (c *guardConn) Close() error {
	c.mu.Lock()
	if c.busy {
		c.closeLater = true
		c.mu.Unlock()
		return nil
	}
	drain := c.f.st == stRejected || c.linger
	c.mu.Unlock()
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok && drain {
		if cw.CloseWrite() == nil && c.Conn.SetReadDeadline(time.Now().Add(lingerTime)) == nil {
			// Bounded by time only: a client that sends a large body
			// before it reads must get to its read, or it gets the reset
			// all the same once the drain stops.
			_, _ = io.Copy(io.Discard, c.Conn)
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

// TLS returns the TLS of the connection the stages left (wire.Secure), nil
// without TLS. It is for the server's ConnContext: net/http sets
// Request.TLS only for a *tls.Conn, and a guarded connection never is one.
func (c *guardConn) TLS() *wire.TLS { return tlsOf(c.Conn) }

// FrontOf returns what a PROXY protocol header said of a connection a
// Listener's Accept returned (see StageResult.Conn) or its stages handed
// off (StageResult.Handoff, through WatchFrames too), nil for one without
// (or not the Listener's).
func FrontOf(c net.Conn) *wire.Front {
	switch c := c.(type) {
	case *guardConn:
		return c.front
	case wire.Fronted:
		return c.Front()
	}
	return nil
}

// TLSOf returns the TLS of a connection a Listener's Accept returned, nil
// for one without TLS (or not the Listener's).
func TLSOf(c net.Conn) *wire.TLS {
	if g, ok := c.(*guardConn); ok {
		return g.TLS()
	}
	return tlsOf(c)
}
