package proxy

import (
	"context"
	"errors"
	"net"
	"os"
	"time"
)

// A request written to an origin that stops reading would block its
// forward for as long as the origin's socket stays open, holding the
// request's slots and its client's connection. Both forwarders write to
// origins through writeStalled, which fails with a timeout (a 504, as
// upstreamFailure says) once the origin has taken no byte for
// timeouts.upstream. The clock starts again whenever the origin takes
// some, so a slow client's streamed upload, which the origin reads as it
// comes, is not cut.

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

// stallWriter writes to an origin connection with writeStalled (the fast
// forward's writer; its connection stays a *net.TCPConn, which alive
// peeks at).
type stallWriter struct {
	c     net.Conn
	stall time.Duration
}

func (w stallWriter) Write(b []byte) (int, error) { return writeStalled(w.c, b, w.stall) }

// stallConn is an origin connection of the transport, whose writes are
// writeStalled's: the transport's ResponseHeaderTimeout starts only once
// the request is written.
type stallConn struct {
	net.Conn
	stall time.Duration
}

func (c stallConn) Write(b []byte) (int, error) { return writeStalled(c.Conn, b, c.stall) }

// stallDialer dials origin connections for the transport as stallConns.
func stallDialer(d *net.Dialer, stall time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return stallConn{Conn: c, stall: stall}, nil
	}
}
