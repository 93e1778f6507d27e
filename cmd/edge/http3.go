package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/edgerate/edge/certs"
	"github.com/edgerate/edge/proxy"
	"github.com/edgerate/edge/rules"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// http3Server serves HTTP/3 (tls.http3) with quic-go's server, on a UDP
// socket at the TLS listener's port, with the TLS listener's certificates
// (certs.Server.QUICConfig). Each request goes through the proxy's
// ServeHTTP; what QUIC asks of the limiter is the proxy's to decide
// (proxy/http3.go): a Retry once more than http3.retry_above handshakes are
// in progress (VerifySourceAddress), the connections section's limits for
// a validated address (ConnContext when a Retry validated it, or once the
// handshake is done), and what becomes of a request sent in 0-RTT data.
type http3Server struct {
	udp *net.UDPConn
	tr  *quic.Transport
	ln  http3.QUICListener
	srv *http3.Server
	p   *proxy.Proxy
	// handshaking counts the connections whose handshake is in progress.
	handshaking atomic.Int64
}

// udpBufferSize is the socket buffer quic-go asks for (7 MiB), below which
// a burst of packets is dropped by the kernel; docs/http3.md says how to
// allow it.
const udpBufferSize = 7 << 20

// listenHTTP3 binds the QUIC socket of t at tcp's port (tls.listen's host,
// the port the TLS listener bound) and makes its server for p, serving
// set's certificates; nil without tls.http3.
func listenHTTP3(t *rules.Table, tcp net.Addr, set *certs.Server, p *proxy.Proxy, log *slog.Logger) (*http3Server, error) {
	if !t.TLS.HTTP3 {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(t.TLS.Listen)
	if err != nil {
		return nil, fmt.Errorf("tls.listen: %w", err)
	}
	_, port, err := net.SplitHostPort(tcp.String())
	if err != nil {
		return nil, fmt.Errorf("tls listener: %w", err)
	}
	ua, err := net.ResolveUDPAddr("udp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("http3 listener: %w", err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("http3 listener: %w", err)
	}
	// quic-go says a buffer it could not grow with the standard logger;
	// edge says it once, in its own log, below.
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	h := &http3Server{udp: udp, p: p}
	h.tr = &quic.Transport{
		Conn:                udp,
		VerifySourceAddress: func(net.Addr) bool { return p.RetryQUIC(int(h.handshaking.Load())) },
		ConnContext:         h.connContext,
	}
	qc := &quic.Config{
		MaxIncomingStreams:    int64(t.HTTP3.MaxConcurrentStreams),
		MaxIncomingUniStreams: 16, // HTTP/3's control and QPACK streams, with room
		Allow0RTT:             t.HTTP3.AllowZeroRTT,
		MaxIdleTimeout:        t.Timeouts.Idle,
	}
	tlsConf := set.QUICConfig()
	var ln http3.QUICListener
	if t.HTTP3.AllowZeroRTT {
		ln, err = h.tr.ListenEarly(tlsConf, qc)
	} else {
		var l *quic.Listener
		if l, err = h.tr.Listen(tlsConf, qc); err == nil {
			ln = l
		}
	}
	if err != nil {
		h.tr.Close()
		udp.Close()
		return nil, fmt.Errorf("http3 listener: %w", err)
	}
	h.ln = countingListener{QUICListener: ln, h: h}
	warnUDPBuffers(udp, log)
	p.SetHTTP3Port(udp.LocalAddr().(*net.UDPAddr).Port)
	h.srv = &http3.Server{
		Handler:        p.HTTP3Handler(),
		MaxHeaderBytes: t.MaxHeaderBytes,
		IdleTimeout:    t.Timeouts.Idle,
		Logger:         log.With("component", "http3"),
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			if hello := certs.QUICHelloOf(ctx); hello != nil {
				ctx = proxy.WithTLS(ctx, hello.TLS(c.ConnectionState().TLS))
			}
			return proxy.WithHandshake(ctx, c.HandshakeComplete())
		},
	}
	return h, nil
}

// warnUDPBuffers logs once when the kernel keeps the QUIC socket's buffers
// below udpBufferSize (net.core.rmem_max, wmem_max; docs/http3.md).
func warnUDPBuffers(c *net.UDPConn, log *slog.Logger) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	var rcv, snd int
	_ = rc.Control(func(fd uintptr) {
		rcv, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		snd, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	})
	// Linux reports twice the size asked for (its bookkeeping).
	if rcv/2 < udpBufferSize || snd/2 < udpBufferSize {
		log.Warn("the UDP buffers of the HTTP/3 socket are smaller than QUIC needs: raise net.core.rmem_max and net.core.wmem_max (docs/http3.md)",
			"receive_buffer_bytes", rcv/2, "send_buffer_bytes", snd/2, "wanted_bytes", udpBufferSize)
	}
}

// quicConnKey carries a connection's quicConn in its context.
type quicConnKey struct{}

// quicConn is one QUIC connection's passage through the handshake: counted
// once (ok, refused or handshake_error), admitted against the connections
// section once its address is validated, released when it closes.
type quicConn struct {
	h     *http3Server
	peer  netip.Addr
	state atomic.Int32 // quicHandshaking, then quicDone or quicEnded

	mu       sync.Mutex
	admitted bool
	release  func()
}

const (
	quicHandshaking = iota
	quicDone
	quicEnded
)

// errQUICRefused ends a connection attempt the connections section
// refuses: quic-go answers it with CONNECTION_REFUSED.
var errQUICRefused = errors.New("http3: refused by the connections section")

// connContext is the transport's ConnContext, called before a new
// connection's handshake: its context carries the certs.QUICHello its
// handshake fills, and its quicConn; an address a Retry validated is
// admitted now, one not yet validated only once its handshake is done.
func (h *http3Server) connContext(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	c := &quicConn{h: h, peer: addrPortOf(info.RemoteAddr).Addr()}
	if info.AddrVerified && !c.admit() {
		return ctx, errQUICRefused
	}
	ctx, _ = certs.WithQUICHello(ctx)
	h.handshaking.Add(1)
	context.AfterFunc(ctx, c.end) // the connection closed, or its handshake failed
	return context.WithValue(ctx, quicConnKey{}, c), nil
}

// admit decides on c against the connections section, once.
func (c *quicConn) admit() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.admitted {
		return true
	}
	adm := c.h.p.AdmitQUIC(c.peer)
	if adm.Refused {
		return false
	}
	c.admitted, c.release = true, adm.Release
	return true
}

// done is told that c's handshake is done: it is counted, and admitted if
// it was not yet; a refused one is closed, and done returns false.
func (c *quicConn) done(conn *quic.Conn) bool {
	if !c.state.CompareAndSwap(quicHandshaking, quicDone) {
		return c.state.Load() == quicDone
	}
	c.h.handshaking.Add(-1)
	c.peer = addrPortOf(conn.RemoteAddr()).Addr()
	if !c.admit() {
		_ = conn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeExcessiveLoad), "refused")
		return false
	}
	c.h.p.HTTP3Connection(proxy.HTTP3ConnOK)
	return true
}

// end is told that c's context is done: the connection closed, or its
// handshake failed (counted so), and what admit held is released.
func (c *quicConn) end() {
	if c.state.CompareAndSwap(quicHandshaking, quicEnded) {
		c.h.handshaking.Add(-1)
		c.h.p.HTTP3Connection(proxy.HTTP3ConnHandshakeError)
	}
	c.mu.Lock()
	release := c.release
	c.release = nil
	c.mu.Unlock()
	if release != nil {
		release()
	}
}

// addrPortOf is a UDP address as a netip.AddrPort, IPv4 unmapped.
func addrPortOf(a net.Addr) netip.AddrPort {
	if ua, ok := a.(*net.UDPAddr); ok {
		ap := ua.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

// countingListener is the QUIC listener the HTTP/3 server accepts from: a
// connection whose handshake is done is counted (quicConn.done) before it
// is served, and one still in 0-RTT is counted once its handshake is done.
type countingListener struct {
	http3.QUICListener
	h *http3Server
}

func (l countingListener) Accept(ctx context.Context) (*quic.Conn, error) {
	for {
		conn, err := l.QUICListener.Accept(ctx)
		if err != nil {
			return nil, err
		}
		c, _ := conn.Context().Value(quicConnKey{}).(*quicConn)
		if c == nil {
			return conn, nil
		}
		select {
		case <-conn.HandshakeComplete():
			if !c.done(conn) {
				continue // refused, and closed
			}
		default: // 0-RTT: served at once, counted once done
			go func() { // ends with the handshake or the connection
				select {
				case <-conn.HandshakeComplete():
					c.done(conn)
				case <-conn.Context().Done():
				}
			}()
		}
		return conn, nil
	}
}

// serve serves the QUIC listener until Shutdown or Close.
func (h *http3Server) serve() error { return h.srv.ServeListener(h.ln) }

// shutdown ends the server gracefully within ctx (GOAWAY, then the
// streams in flight), then closes it and its socket.
func (h *http3Server) shutdown(ctx context.Context) error {
	err := h.srv.Shutdown(ctx)
	h.close()
	return err
}

// close closes the server, its listener, transport and socket.
func (h *http3Server) close() {
	h.srv.Close()
	h.ln.Close()
	h.tr.Close()
	h.udp.Close()
}
