package guard

import (
	"context"
	"io"
	"net"
	"time"
)

// Writer lets ListenerOptions.Answer write an answer to the client while
// it makes it, for an answer it cannot hold whole (a forwarded response
// body, streamed as it arrives). Whatever the hook then returns in out
// follows what it wrote. Each write is bounded as net/http bounds a
// handler's writes: WriteIdleTimeout from the write, WriteTimeout from
// when the head was taken up.
type Writer struct {
	c     *guardConn
	start time.Time
	used  bool
	close bool
	err   error
}

// Write writes b to the client. After a failed write every later one
// fails too, and the connection closes once the hook returns.
func (w *Writer) Write(b []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if len(b) == 0 {
		return 0, nil
	}
	w.used = true
	c := w.c
	now := time.Now()
	var d time.Time
	if c.writeIdle > 0 {
		d = now.Add(c.writeIdle)
	}
	if wt := c.l.writeTimeout; wt > 0 && (d.IsZero() || w.start.Add(wt).Before(d)) {
		d = w.start.Add(wt)
	}
	c.mu.Lock()
	err := c.applyWriteDeadline(d)
	c.mu.Unlock()
	n := 0
	if err == nil {
		n, err = c.Conn.Write(b)
	}
	w.err = err
	return n, err
}

// Forwarding says that the answer is not made at once (the hook forwards
// the request): its writes are bounded from when they are made, and the
// idle timeout runs from when it is written, as net/http times a
// handler's response.
func (w *Writer) Forwarding() { w.used = true }

// Left reports whether the client has closed or reset its connection
// (its FIN or RST arrived, whatever it sent before), without blocking and
// without reading: a request whose client left before its answer is
// logged 499, as nginx logs one, which sees the same through epoll's
// EPOLLRDHUP. A FIN is also what a client that only half-closed sends;
// the answer is written all the same, as net/http writes it after its
// background read ends. False where the socket cannot be asked.
func (w *Writer) Left() bool { return w.c.left() }

// Left is Writer.Left for the connection net/http serves.
func (c *guardConn) Left() bool { return c.left() }

// CloseAfter asks that the connection close once the answer is written,
// as net/http closes it after a response it could not finish.
func (w *Writer) CloseAfter() { w.close = true }

// finish writes out, the rest of an answer, and returns the error that
// ends the connection: a failed write, or io.EOF if the hook asked to
// close it.
func (w *Writer) finish(out []byte, answered bool) error {
	if !answered {
		return nil
	}
	if len(out) > 0 {
		if w.used {
			_, _ = w.Write(out)
		} else if err := w.c.fastWrite(out, w.start); err != nil {
			w.err = err
		}
	}
	if w.err != nil {
		return w.err
	}
	if w.close {
		return io.EOF // net/http closes a connection whose read ends so, quietly
	}
	return nil
}

// closeNow closes the connection that a Close asked to close while the
// fast path's hook ran, with c.mu held, and returns the error the read
// then ends with.
func (c *guardConn) closeNow() error {
	c.closeLater = false
	c.Conn.Close()
	if c.l != nil {
		c.l.release(c)
	}
	return net.ErrClosed
}

// WaitAnswers waits until no answer of the fast path is being made, or ctx
// is done. http.Server.Shutdown counts a connection whose request the fast
// path answers as idle and closes it: the close waits for the answer, and
// a server's drain must wait for it too, after Shutdown.
func (l *Listener) WaitAnswers(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for l.answering.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
