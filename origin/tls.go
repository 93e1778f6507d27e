package origin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// TLS to https:// origins, on both paths: one dial (TLS.dial) makes the
// connections of the transport (Settings.Transport, through its
// DialTLSContext) and of the pools (Pools.Pool), with the same roots,
// server name and client certificate, its writes bounded as a plain
// connection's are (stallConn, under TLS: a TLS write that times out
// leaves the connection unusable), and a failed handshake a failed dial:
// nothing of the request was sent, so it is a connect_error, retried on
// another server as one. The pools offer only http/1.1 by ALPN (the fast
// forward speaks nothing else); the transport offers h2 too, for gRPC.
//
// A pooled TLS connection cannot be checked by peeking at its socket, as
// a plain one is (alive): a TLS 1.3 server sends session tickets, and may
// send a key update, after the handshake, records that crypto/tls reads
// and handles, and that a peek would take for bytes the origin sent
// unasked. So while it is idle a reader waits in Read on it, as the
// transport's reader does on each of its connections (idleReader): Read
// consumes those records and returns only for application data (unasked:
// the connection is closed), the peer's end or an error (closed), or the
// read deadline that Pool.take sets to take the connection back.

// TLSOptions are how edge speaks TLS to a group's https servers. The zero
// value verifies against the system's roots, for the host of each
// server's URL, without a client certificate.
type TLSOptions struct {
	RootCAs    *x509.CertPool // nil: the system's
	ServerName string         // "": the host of the server's URL
	// Certificates are presented to a server that asks for one.
	Certificates       []tls.Certificate
	InsecureSkipVerify bool
	// ID identifies the options: pools whose TLS have the same ID and
	// address share their connections (and a reload that keeps the ID
	// keeps them).
	ID string
}

// TLS is how edge speaks TLS to a group's https servers, from NewTLS. It
// keeps the sessions its connections' servers gave (TLS session
// resumption: a connection dialled again skips the full handshake). It is
// safe for concurrent use.
type TLS struct {
	id string
	// pools is the pools' config (http/1.1 alone); transport, the
	// transport's (h2 and http/1.1). Each has its own session cache: a
	// session remembers the protocol it was made for.
	pools, transport *tls.Config
}

// sessionCacheSize is how many servers' sessions a TLS keeps (Go's LRU
// cache; a group has at most 64 servers).
const sessionCacheSize = 256

// NewTLS returns the TLS o describes.
func NewTLS(o TLSOptions) *TLS {
	base := &tls.Config{
		RootCAs:            o.RootCAs,
		ServerName:         o.ServerName,
		Certificates:       o.Certificates,
		InsecureSkipVerify: o.InsecureSkipVerify,
		MinVersion:         tls.VersionTLS12,
	}
	t := &TLS{id: o.ID, pools: base.Clone(), transport: base}
	t.pools.NextProtos = []string{"http/1.1"}
	t.pools.ClientSessionCache = tls.NewLRUClientSessionCache(sessionCacheSize)
	t.transport.NextProtos = []string{"h2", "http/1.1"}
	t.transport.ClientSessionCache = tls.NewLRUClientSessionCache(sessionCacheSize)
	return t
}

// ID is o.ID of the options t was made with.
func (t *TLS) ID() string { return t.id }

// tlsHandshakeTimeout bounds a handshake, as the transport's
// TLSHandshakeTimeout did.
const tlsHandshakeTimeout = 10 * time.Second

// dialTLS dials addr with d and makes a TLS client connection with cfg
// (ServerName defaulted to addr's host) over wrap of it: the layer whose
// writes are bounded. A handshake that fails is a failed dial (a
// *net.OpError of Op "dial", Classify's FailConnect).
func dialTLS(ctx context.Context, d *net.Dialer, addr string, cfg *tls.Config, wrap func(net.Conn) net.Conn) (*tls.Conn, error) {
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(wrap(nc), cfg)
	ctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: nc.RemoteAddr(), Err: err}
	}
	return tc, nil
}

// stallConn is a TLS connection's network connection: its writes are
// writeStalled's, bounded by stall (a Pool's Conn sets it for each
// request).
type stallConn struct {
	net.Conn
	stall atomic.Int64 // time.Duration
}

func (c *stallConn) Write(b []byte) (int, error) {
	return writeStalled(c.Conn, b, time.Duration(c.stall.Load()))
}

// transportDialTLS dials https origins for the transport under s
// (resolved) with t (nil: the defaults), as transportConns under TLS.
func transportDialTLS(s Settings, t *TLS) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if t == nil {
		t = NewTLS(TLSOptions{})
	}
	cfg := t.transport
	d := s.dialer()
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		// The transportConn is under TLS, where Watch finds it (NetConn).
		c, err := dialTLS(ctx, d, addr, cfg, func(nc net.Conn) net.Conn { return &transportConn{Conn: nc, stall: s.Upstream} })
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

// idleReader is the reader of an idle pooled TLS connection (see above),
// made once a connection and run each time it is idle.
type idleReader struct {
	running bool          // a reader was started and has not been waited for
	done    chan struct{} // gets a value when the reader returns
	dead    atomic.Bool   // the connection ended, or sent something, while idle
	buf     [1]byte
}

// aLongTimeAgo is a read deadline in the past: it ends a Read at once.
var aLongTimeAgo = time.Unix(1, 0)

// watchIdle starts c's idle reader, counted in wg.
func (c *Conn) watchIdle(wg *sync.WaitGroup) {
	r := &c.idle
	if r.done == nil {
		r.done = make(chan struct{}, 1)
	}
	r.running = true
	wg.Add(1)
	go c.readIdle(wg)
}

// readIdle is the idle reader: it returns when the origin sends
// application data or ends the connection (which it then closes), or at
// the read deadline wake sets.
func (c *Conn) readIdle(wg *sync.WaitGroup) {
	defer wg.Done()
	r := &c.idle
	n, err := c.tls.Read(r.buf[:])
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		r.dead.Store(true)
		c.Close()
	}
	r.done <- struct{}{}
}

// wake stops c's idle reader, if one runs, and reports whether c may
// carry a request: the reader returned for the deadline wake set, having
// read nothing. (A read that times out leaves a TLS connection usable,
// with what it read of a record kept.)
func (c *Conn) wake() bool {
	r := &c.idle
	if !r.running {
		return !r.dead.Load()
	}
	r.running = false
	if !r.dead.Load() {
		_ = c.conn.SetReadDeadline(aLongTimeAgo)
	}
	<-r.done
	return !r.dead.Load() && c.conn.SetReadDeadline(time.Time{}) == nil
}

// idleAlive reports whether c's idle reader has found nothing yet.
func (c *Conn) idleAlive() bool { return c.idle.running && !c.idle.dead.Load() }
