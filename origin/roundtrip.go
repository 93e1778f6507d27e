package origin

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/edgerate/edge/internal/netpeek"
)

// Request is what Pool.RoundTrip sends: a request head, written as it is,
// and how it may be sent. (Its body, sent after the head, and the hook
// for 1xx responses are RoundTrip's arguments: in a Request they would
// move what they point to, the caller's body and answer, to the heap.)
type Request struct {
	// Head is the request head, and any body written with it in the same
	// write (Merged).
	Head []byte
	// Merged says that Head ends with the request's body.
	Merged bool
	// Replayable says that the request may be sent again when a reused
	// connection fails before the origin's first byte (not for a
	// timeout): the transport's rule, for a request without a body to
	// send and with an idempotent method or an idempotency key
	// (RoundTrip ignores it for a request with one).
	Replayable bool
	// Once has the connection used for this request only (its head says
	// "Connection: close").
	Once bool
	// HEAD says the request's method is HEAD: its responses have no body.
	HEAD bool
	// Timeout bounds each write that the origin takes no byte of, and the
	// wait for the response's first byte once the request is written
	// (zero or negative: no bound).
	Timeout time.Duration
}

// SendBody writes a request's body to w, after its head, as the
// transport frames it; buf is the copy buffer. An error of its own
// reading (not of w's) is returned as it is by RoundTrip. A method value
// of the caller's body type is one (proxy's fastBody.Send).
type SendBody func(w io.Writer, buf []byte) error

// Requests handed to http.ReadResponse, which reads only their method.
var (
	getRequest  = &http.Request{Method: http.MethodGet}
	headRequest = &http.Request{Method: http.MethodHead}
)

// RoundTrip sends req, then its body with body (nil: none follows the
// head), on a pooled connection (idle at now, at most
// Settings.IdleTimeout) or a new one, and reads the origin's final
// response head, giving each 1xx response (but 101) to interim (nil:
// none) as ReverseProxy's Got1xxResponse hook is given them. buf is the
// body's copy buffer. The response's body reads from the returned
// connection, which its reader gives back to p with Put, or closes, once
// it has read the body (or given up on it).
//
// A pooled connection that fails before the origin has sent a byte is
// dropped and the request sent again where the transport sends it again:
// a replayable request, or one without a body of which nothing was
// written; a request with a body to send is never sent again. Every
// pooled connection is checked before a request is sent on it: one that
// ended, or received anything, while idle is closed (the transport's
// reader would have seen either). A response that began before the body
// was written whole may be followed by an answer to what the origin made
// of the rest of it: the connection is then used for this response only. Errors are the dial's, the writes', the read's, or
// body's; a timeout among them is a net.Error whose Timeout is true.
func (p *Pool) RoundTrip(req *Request, body SendBody, interim func(*http.Response), now time.Time,
	buf []byte) (*Conn, *http.Response, error) {
	s := &p.owner.settings
	replay := req.Replayable && body == nil
	for {
		c, reused := p.take(now), true
		if c != nil && !c.takeBack() {
			c.Close()
			continue
		}
		if c == nil {
			var err error
			if c, err = p.dial(s); err != nil {
				return nil, nil, err
			}
			reused = false
		}
		c.limit, c.once = s.HeadMax, req.Once
		n, err := c.write(req.Head, req.Timeout)
		nothingWritten := err != nil && n == 0
		if err == nil && body != nil {
			err = body(stallWriter{c, req.Timeout}, buf)
			if err == nil && !c.quiet() {
				c.once = true // the origin answered, or closed, before the body's end
			}
		}
		if err == nil && req.Timeout > 0 {
			err = c.conn.SetReadDeadline(time.Now().Add(req.Timeout))
		}
		if err == nil {
			_, err = c.br.Peek(1)
		}
		if err != nil {
			c.Close()
			var ne net.Error
			if reused && (replay && !(errors.As(err, &ne) && ne.Timeout()) || nothingWritten && body == nil && !req.Merged) {
				continue
			}
			return nil, nil, err
		}
		resp, err := c.ReadResponse(req.HEAD, interim)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		if req.Timeout > 0 {
			if err := c.conn.SetReadDeadline(time.Time{}); err != nil {
				c.Close()
				return nil, nil, err
			}
		}
		return c, resp, nil
	}
}

// ReadResponse reads the final response head from c (to a HEAD request
// if head), giving each 1xx response (but 101) to interim (if not nil) as
// ReverseProxy's Got1xxResponse hook is given them. The head is read
// within Settings.HeadMax (counted from the connection's first read for
// this request), each 1xx head on its own.
func (c *Conn) ReadResponse(head bool, interim func(*http.Response)) (*http.Response, error) {
	req := getRequest
	if head {
		req = headRequest
	}
	for {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, err
		}
		if code := resp.StatusCode; code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
			c.limit = math.MaxInt64
			return resp, nil
		}
		if interim != nil {
			interim(resp)
		}
		c.limit = c.headMax
	}
}

// stallWriter writes to an origin connection with Conn.write (the pools'
// body writer).
type stallWriter struct {
	c     *Conn
	stall time.Duration
}

func (w stallWriter) Write(b []byte) (int, error) { return w.c.write(b, w.stall) }

// dial makes a new connection of p's: TCP, and TLS over it for a pool of
// https (tls.go).
func (p *Pool) dial(s *Settings) (*Conn, error) {
	if p.tls == nil {
		nc, err := s.dialer().Dial("tcp", p.addr)
		if err != nil {
			return nil, err
		}
		return NewConn(nc, *s), nil
	}
	var sc *stallConn
	tc, err := dialTLS(context.Background(), s.dialer(), p.addr, p.tls, func(nc net.Conn) net.Conn {
		sc = &stallConn{Conn: nc}
		return sc
	})
	if err != nil {
		return nil, err
	}
	c := NewConn(tc, *s)
	c.tls, c.stall = tc, sc
	return c, nil
}

// write writes b to the origin, failing when it takes no byte for stall
// (none: no bound): under TLS, its network connection's writes are
// bounded (a TLS write that times out leaves the connection unusable).
func (c *Conn) write(b []byte, stall time.Duration) (int, error) {
	if c.stall == nil {
		return writeStalled(c.conn, b, stall)
	}
	c.stall.stall.Store(int64(stall))
	return c.conn.Write(b)
}

// takeBack readies c, taken from its pool, for a request, and reports
// whether it may carry one: a plain connection is peeked at (alive), a TLS
// one's idle reader stopped (wake).
func (c *Conn) takeBack() bool {
	if c.tls == nil {
		return c.alive()
	}
	return c.br.Buffered() == 0 && c.wake()
}

// tlsProbeWait is how long quiet reads a TLS connection with something
// waiting on its socket, to tell handshake records from a response.
const tlsProbeWait = time.Millisecond

// quiet reports, once a request's body was written whole, that the origin
// has sent nothing of a response and not closed: what follows the
// response may not be an answer to what the origin made of the body.
// Under TLS what waits on the socket may be records crypto/tls handles
// (session tickets), read here into c's buffer, where the response is
// read from: only bytes of a response, or an end, make it not quiet.
func (c *Conn) quiet() bool {
	if c.tls == nil {
		return c.alive()
	}
	if c.br.Buffered() > 0 {
		return false
	}
	if pending, ok := netpeek.Pending(c.stall.Conn); ok && !pending {
		return true
	}
	if c.conn.SetReadDeadline(time.Now().Add(tlsProbeWait)) != nil {
		return false
	}
	_, err := c.br.Peek(1)
	quiet := c.br.Buffered() == 0 && errors.Is(err, os.ErrDeadlineExceeded)
	return c.conn.SetReadDeadline(time.Time{}) == nil && quiet
}
