package guard

import "time"

// The read deadline. net/http sets a connection's read deadline itself,
// and would bound a request by http.Server.ReadTimeout from the moment it
// starts reading it: for a connection's first request, the connection's
// start, from before every request the fast path answered on it. So the
// Listener keeps ReadTimeout in the server's place (the server's is 0):
// every read of a request, head and body, on either path, is bound by
// ReadTimeout from the request's start, and a deadline the server sets
// (its header and idle timeouts, the deadline that ends a background
// read) holds when earlier. While the fast path owns the connection (it
// has answered since net/http last got bytes) it keeps the deadlines
// net/http would keep between requests instead (ownedDeadline).
//
// A request starts at the connection's accept for its first, as net/http
// dates it, and otherwise at its head's first byte: taken as the first
// time a read must wait with part of the head in hand, or when the head
// is handed on or offered if it came whole (the clock is not read for
// every read). It ends with its message (the framer counts them), and
// once a 101 switched protocols nothing more is a request.

// begun returns when the request being read began; zero if none is, or
// its start is not known yet. Called with c.mu held.
func (c *guardConn) begun() time.Time {
	if c.reqMsgs != c.f.msgs || c.f.tunnel {
		return time.Time{}
	}
	return c.reqStart
}

// begin dates the request being read at now, unless it is dated already.
// Called with c.mu held.
func (c *guardConn) begin(now time.Time) {
	if c.begun().IsZero() {
		c.reqStart, c.reqMsgs = now, c.f.msgs
	}
}

// beginNow is begin with the clock read only when needed.
func (c *guardConn) beginNow() {
	if c.begun().IsZero() {
		c.begin(time.Now())
	}
}

// SetReadDeadline records the server's read deadline, and sets the one
// that holds with it (see above).
func (c *guardConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.grown {
		// net/http's first call, at the top of the connection's goroutine.
		c.grown = true
		growStack(0)
	}
	c.srvRead = t
	if c.owned && !c.busy {
		// net/http waits in a read the fast path answers in; it gets the
		// connection back with a deadline of its own (handBack).
		return nil
	}
	return c.applyRead(c.requestDeadline(), false)
}

// SetDeadline records the server's write and read deadlines, and sets
// them.
func (c *guardConn) SetDeadline(t time.Time) error {
	if err := c.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// syncRead sets the read deadline that holds for the blocking read about
// to be made. Called with c.mu held.
func (c *guardConn) syncRead() error {
	if c.f.st == stHead && c.f.lo != c.f.hi {
		c.beginNow() // part of a head is in hand
	}
	if c.owned && !c.busy {
		return c.applyRead(c.ownedDeadline(), true)
	}
	return c.applyRead(c.requestDeadline(), false)
}

// requestDeadline is the read deadline while net/http reads the
// connection, or the fast path's hook reads a request body (busy): then
// only the request's own bound holds, as net/http replaces its header
// deadline with ReadTimeout's once it has the head. Called with c.mu held.
func (c *guardConn) requestDeadline() time.Time {
	var want time.Time
	if !c.busy {
		want = c.srvRead
	}
	if c.l == nil {
		return want
	}
	if rt := c.l.readTimeout; rt > 0 {
		if start := c.begun(); !start.IsZero() {
			if d := start.Add(rt); want.IsZero() || d.Before(want) {
				want = d
			}
		}
	}
	return want
}

// ownedDeadline is the read deadline while the fast path reads the next
// head: the idle timeout from the last answer while nothing of it has
// come, the header timeout from its first byte after. Called with c.mu
// held, while c.owned.
func (c *guardConn) ownedDeadline() time.Time {
	if c.f.lo == c.f.hi {
		if c.l.idleTimeout > 0 {
			return c.lastAnswer.Add(c.l.idleTimeout)
		}
		return time.Time{}
	}
	if c.l.headerTimeout > 0 {
		c.beginNow()
		return c.begun().Add(c.l.headerTimeout)
	}
	return time.Time{}
}

// applyRead sets the read deadline want on Conn (zero for none), with
// c.mu held. Setting a deadline re-arms a runtime timer: when lenient,
// one that only moves later is re-armed at most once a second (so the
// fast path's idle bound may be up to a second shorter); otherwise, and
// when it moves earlier, at once.
func (c *guardConn) applyRead(want time.Time, lenient bool) error {
	if c.rset && (want.Equal(c.rapplied) || lenient && !want.IsZero() && !c.rapplied.IsZero() &&
		want.After(c.rapplied) && want.Sub(c.rapplied) <= time.Second) {
		return nil
	}
	if err := c.Conn.SetReadDeadline(want); err != nil {
		return err
	}
	c.rapplied, c.rset = want, true
	return nil
}

// handBack gives the connection back to net/http before it gets bytes
// again after the fast path answered, with the deadline net/http would
// have set for the head it gets: the header timeout from the head's first
// byte, which net/http replaces once it has read the head. Called with
// c.mu held.
func (c *guardConn) handBack() {
	if !c.owned {
		return
	}
	c.owned = false
	c.srvRead = time.Time{}
	if rht := c.l.readHeader; rht > 0 {
		start := c.begun()
		if start.IsZero() {
			start = time.Now()
		}
		c.srvRead = start.Add(rht)
	}
	_ = c.applyRead(c.requestDeadline(), false) // a failure shows on the next read
}
