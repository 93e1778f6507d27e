package origin

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/internal/netpeek"
)

// Bounded writes to origins, and the transport's connections watched
// (the package comment says why): on the net/http path the transport
// makes a connection idle before its reader has looked at what follows a
// response; Watch has a request that takes such a connection wait until
// the reader has (without it TestOriginConnectionsNoCrossTalk failed now
// and then under -race).

// writeStalled writes b to c, failing when c takes no byte for stall
// (none: no bound).
func writeStalled(c net.Conn, b []byte, stall time.Duration) (int, error) {
	if stall <= 0 {
		return c.Write(b)
	}
	written := 0
	for {
		if err := c.SetWriteDeadline(time.Now().Add(stall)); err != nil {
			return written, err
		}
		n, err := c.Write(b[written:])
		written += n
		if err == nil || n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return written, err
		}
		// The origin took n bytes before the deadline: it is reading.
	}
}

// transportConn is an origin connection of the transport. Its writes are
// writeStalled's (the transport's ResponseHeaderTimeout starts only once
// the request is written), and it knows when the transport's reader waits
// in Read on it: then nothing the origin sent is left in the buffers
// above it.
type transportConn struct {
	net.Conn
	stall   time.Duration
	reading atomic.Bool
	closed  atomic.Bool
}

func (c *transportConn) Write(b []byte) (int, error) { return writeStalled(c.Conn, b, c.stall) }

func (c *transportConn) Read(b []byte) (int, error) {
	c.reading.Store(true)
	n, err := c.Conn.Read(b)
	c.reading.Store(false)
	return n, err
}

func (c *transportConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

// readerCaughtUpWait bounds awaitReader: the transport's reader, made
// runnable when the response ended, needs only to be scheduled.
const readerCaughtUpWait = 20 * time.Millisecond

// awaitReader waits, within readerCaughtUpWait, until the transport's
// reader has taken in everything the origin sent on this idle connection
// (it waits in Read, and nothing is pending on the socket) or has closed
// the connection for what it found there.
func (c *transportConn) awaitReader() {
	deadline := time.Time{}
	for i := 0; ; i++ {
		if c.closed.Load() {
			return
		}
		if c.reading.Load() {
			if pending, ok := netpeek.Pending(c.Conn); !ok || !pending {
				return
			}
		}
		if i < 64 {
			runtime.Gosched()
			continue
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(readerCaughtUpWait)
		} else if time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// transportDialer dials origin connections for the transport as
// transportConns.
func transportDialer(d *net.Dialer, stall time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &transportConn{Conn: c, stall: stall}, nil
	}
}

// Watch is what the transport reports of one request's connection, for
// the transport's connections (Settings.Transport): a reused connection
// is taken once the transport's reader has caught up with it, and the
// connection of a response that began before its request's body was
// written whole is closed once the response is read. A request's Watch
// is used by that request only.
type Watch struct {
	trace httptrace.ClientTrace
	conn  atomic.Pointer[transportConn]
	// When the response's first byte came, and when the request was
	// written whole (unix nanoseconds; 0: not yet).
	firstByte, wrote atomic.Int64
}

// earlyMargin is how much later than its response's first byte a
// request's write may be seen to end and still count as ended before it:
// the transport reports the write's end from its writing goroutine, which
// may run a little after the origin has answered (a response to the last
// byte, seen first, under load). An origin that answers a body it has not
// read waits for nothing; one that then reads the rest takes longer.
const earlyMargin = 10 * time.Millisecond

// WithWatch returns req with a trace that watches its connection, and
// the watch, to be given the response (Answered).
func WithWatch(req *http.Request) (*http.Request, *Watch) {
	w := new(Watch)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &w.trace))
	w.watch(req.ContentLength != 0)
	return req, w
}

// watch sets w's trace: a reused connection is taken once the transport's
// reader has caught up with it; with a body, when the response began and
// when the body was written whole are noted.
func (w *Watch) watch(body bool) {
	w.trace.GotConn = func(info httptrace.GotConnInfo) {
		c, ok := info.Conn.(*transportConn)
		if tc, isTLS := info.Conn.(*tls.Conn); isTLS && tc.ConnectionState().NegotiatedProtocol != "h2" {
			// An https origin's HTTP/1.1 connection: the transportConn is
			// under TLS (tls.go). HTTP/2's are multiplexed, as h2c's.
			c, ok = tc.NetConn().(*transportConn)
		}
		if !ok {
			return
		}
		if info.Reused {
			c.awaitReader()
		}
		w.conn.Store(c)
	}
	if !body {
		return
	}
	w.trace.GotFirstResponseByte = func() { w.firstByte.Store(time.Now().UnixNano()) }
	w.trace.WroteRequest = func(httptrace.WroteRequestInfo) { w.wrote.Store(time.Now().UnixNano()) }
}

// Answered has the connection of resp, the response to the watched
// request, closed once the response is read (its body closed), if the
// response began before the request was written whole (within
// earlyMargin): what follows it may be an answer to what the origin made
// of the rest of the body, which the transport's reader would take for
// the next request's answer. (The transport itself keeps no connection
// whose write ends more than 50 ms after the response.)
func (w *Watch) Answered(resp *http.Response) {
	if w.trace.WroteRequest == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		return
	}
	if c := w.conn.Load(); c != nil {
		resp.Body = watchedBody{ReadCloser: resp.Body, w: w, conn: c}
	}
}

// early reports whether the request's write ended after its response
// began.
func (w *Watch) early() bool {
	wrote, first := w.wrote.Load(), w.firstByte.Load()
	return wrote == 0 || first != 0 && time.Duration(wrote-first) > earlyMargin
}

// watchedBody is a response body that closes its connection when it is
// closed, if its request's write ended after it began. (The transport may
// have made the connection idle at the body's end, just before: a request
// that takes it then fails as on a connection the origin closed, which the
// transport retries where it can.)
type watchedBody struct {
	io.ReadCloser
	w    *Watch
	conn net.Conn
}

func (b watchedBody) Close() error {
	err := b.ReadCloser.Close()
	if b.w.early() {
		b.conn.Close()
	}
	return err
}
