package main

import (
	"log"
	"net"
	"net/http"
	"time"

	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/proxy"
	"github.com/edgerate/edge/rules"
)

// http2Server serves the public listener's HTTP/2 connections with Go's own
// HTTP/2 server (net/http's). The listener's stages hand it each
// connection that speaks HTTP/2 (guard.ALPN after the TLS handshake,
// guard.PriorKnowledge on the plain socket with h2c), decrypted: Go's server
// takes only a *tls.Conn for HTTP/2 over TLS, so it serves every one as
// unencrypted HTTP/2, and the connection's TLS reaches its requests through
// ConnContext. Each connection is watched for floods of frames
// (guard.WatchFrames) before the server reads it; it stays counted
// against max_connections until it closes.
type http2Server struct {
	srv *http.Server
	ln  *guard.Handoffs
	p   *proxy.Proxy
}

// writeIdleTimeout is the public listener's bound on a client that reads
// nothing (guard.ListenerOptions.WriteIdleTimeout), which HTTP/2 keeps as
// its WriteByteTimeout.
const writeIdleTimeout = 30 * time.Second

// serveHTTP2 reports whether t serves HTTP/2 to clients: over TLS (ALPN h2)
// or with h2c.
func serveHTTP2(t *rules.Table) bool {
	return t.Listen != "" && (t.H2C || t.TLS.Listen != "" && t.TLS.HTTP2)
}

// newHTTP2Server makes the HTTP/2 server of table for p, whose listener
// has addr. Its settings, like the public server's, are fixed for its
// lifetime (reload.go's restart settings); those edge enforces on each
// connection are read from the running configuration as it starts
// (handoff, proxy.Proxy.HTTP2ConnContext).
func newHTTP2Server(table *rules.Table, p *proxy.Proxy, addr net.Addr, errLog *log.Logger) *http2Server {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	return &http2Server{p: p, ln: guard.NewHandoffs(addr), srv: &http.Server{
		Handler:   p.HTTP2Handler(),
		Protocols: &protos,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: table.HTTP2.MaxConcurrentStreams,
			WriteByteTimeout:     writeIdleTimeout,
		},
		// The preface's, after the TLS handshake; then each stream's
		// reading and writing, and an idle connection's wait.
		ReadHeaderTimeout:            table.Timeouts.ReadHeader,
		ReadTimeout:                  table.Timeouts.Read,
		WriteTimeout:                 table.Timeouts.Write,
		IdleTimeout:                  table.Timeouts.Idle,
		MaxHeaderBytes:               table.HTTP2.MaxHeaderBytes,
		ConnContext:                  p.HTTP2ConnContext(guard.TLSOf, guard.FrontOf),
		ErrorLog:                     errLog,
		DisableGeneralOptionsHandler: true,
	}}
}

// handoff is the listener's stages' StageResult.Handoff: c goes to the
// HTTP/2 server, watched for floods with the http2 limits of the running
// configuration.
func (h *http2Server) handoff(c net.Conn) {
	lim := h.p.Table().HTTP2
	h.ln.Handoff(guard.WatchFrames(c, guard.FrameLimits{
		MaxResets:        lim.MaxResets,
		MaxControlFrames: lim.MaxControlFrames,
		MaxHeaderBytes:   h.srv.MaxHeaderBytes,
		OnFlood:          func(f guard.Flood) { h.p.HTTP2Flood(f.Kind, f.Peer) },
	}))
}

// serve serves the connections handed off until Shutdown or Close.
func (h *http2Server) serve() error { return h.srv.Serve(h.ln) }
