// Package origin is how edge talks to origins, on both of its request
// paths: the settings both take (Settings), the transport of the net/http
// path (Settings.Transport, for httputil.ReverseProxy) and the fast
// path's pools of origin connections with their round trip (Pools, Pool,
// Conn).
//
// The rules both paths keep have their one home here:
//
//   - A request written to an origin that stops reading would block its
//     forward for as long as the origin's socket stays open. Writes to
//     origins fail with a timeout once the origin has taken no byte for
//     Settings.Upstream (the transport's connections, and Pool.RoundTrip's
//     writes); the clock starts again whenever the origin takes some, so a
//     slow client's streamed upload, which the origin reads as it comes,
//     is not cut.
//   - Whatever an origin sends outside the response it was asked for (a
//     body on HEAD, 204 or 304, bytes beyond its Content-Length, an answer
//     to a request it read from another's body) must not become the next
//     request's answer. A pooled connection with anything left read, or
//     anything waiting on its socket, is never used again (Pool.Put,
//     alive); on the transport's connections, Watch has a request that
//     takes a reused connection wait until the transport's reader has
//     looked at what follows the last response, and closes a connection
//     whose response began before its request's body was written whole.
//   - Idle connections are closed after Settings.IdleTimeout, and kept at
//     most Settings.IdlePerHost to an origin and Settings.IdleTotal in all
//     (the transport's, and the pools' together).
//
// It imports the standard library only (and internal/netpeek, which peeks
// at a socket without reading it).
package origin

import (
	"net"
	"net/http"
	"time"
)

// Settings are how edge talks to origins: the transport (Transport) and
// the fast path's pools (NewPools) take the same ones. A field's zero
// value, and a negative one, is its default (see the fields), except for
// Upstream and KeepAlive, whose zero and negative values are stated.
type Settings struct {
	// DialTimeout bounds a dial (default 5s).
	DialTimeout time.Duration
	// KeepAlive is the interval of TCP keep-alive probes on origin
	// connections (zero: 30s; negative: no probes, as net.Dialer's).
	KeepAlive time.Duration
	// IdlePerHost is how many idle connections are kept to one origin
	// (default 256).
	IdlePerHost int
	// IdleTotal is how many idle connections are kept in all: by the
	// transport to every origin, and by all of a Pools' pools together
	// (default 1024).
	IdleTotal int
	// IdleTimeout is how long a connection stays idle before it is closed
	// (default 90s).
	IdleTimeout time.Duration
	// HeadMax bounds a response head's bytes (default 10 MiB, the
	// transport's own).
	HeadMax int64
	// ReadBuffer is each connection's read buffer, in bytes (default
	// 4 KiB, the transport's own).
	ReadBuffer int
	// Upstream bounds the transport's wait for a response head once the
	// request is written, and a write the origin takes no byte of (zero
	// or negative: no bound). The pools take their bound with each
	// request (Request.Timeout), as a reload may change it while they
	// last.
	Upstream time.Duration
	// TLS is how the transport speaks TLS to https origins (nil: the
	// system's roots, the URL's host; tls.go). The pools take theirs with
	// each pool (Pools.Pool).
	TLS *TLS
}

// The defaults of Settings.
const (
	DefaultDialTimeout = 5 * time.Second
	DefaultKeepAlive   = 30 * time.Second
	DefaultIdlePerHost = 256
	DefaultIdleTotal   = 1024
	DefaultIdleTimeout = 90 * time.Second
	DefaultHeadMax     = 10 << 20
	DefaultReadBuffer  = 4 << 10
)

// resolved returns s with its defaults in place of zero and negative
// values.
func (s Settings) resolved() Settings {
	if s.DialTimeout <= 0 {
		s.DialTimeout = DefaultDialTimeout
	}
	if s.KeepAlive == 0 {
		s.KeepAlive = DefaultKeepAlive
	}
	if s.IdlePerHost <= 0 {
		s.IdlePerHost = DefaultIdlePerHost
	}
	if s.IdleTotal <= 0 {
		s.IdleTotal = DefaultIdleTotal
	}
	if s.IdleTimeout <= 0 {
		s.IdleTimeout = DefaultIdleTimeout
	}
	if s.HeadMax <= 0 {
		s.HeadMax = DefaultHeadMax
	}
	if s.ReadBuffer <= 0 {
		s.ReadBuffer = DefaultReadBuffer
	}
	if s.Upstream < 0 {
		s.Upstream = 0
	}
	return s
}

// dialer dials every origin connection of s (resolved).
func (s Settings) dialer() *net.Dialer {
	return &net.Dialer{Timeout: s.DialTimeout, KeepAlive: s.KeepAlive}
}

// Transport returns a pooled transport to every origin, for the net/http
// path. It never uses proxies from the environment, passes
// Accept-Encoding through as the client sent it, bounds the wait for a
// response head, and a write the origin stops taking, by s.Upstream, and
// dials connections that Watch can watch; it carries requests for h2c://
// URLs in HTTP/2 with prior knowledge (h2c.go). Each call returns a new
// transport, with its own idle connections.
func (s Settings) Transport() *http.Transport {
	s = s.resolved()
	t := &http.Transport{
		// A write the origin takes no byte of for s.Upstream fails
		// (watch.go).
		DialContext: transportDialer(s.dialer(), s.Upstream),
		// And under TLS for https origins, by the dial the pools use
		// (tls.go): its handshake's failure a failed dial.
		DialTLSContext:    transportDialTLS(s, s.TLS),
		ForceAttemptHTTP2: true,
		// Pass Accept-Encoding through as the client sent it. Otherwise the
		// transport asks origins for gzip on behalf of clients that did not,
		// and edge spends CPU decompressing what the origin spent CPU
		// compressing.
		DisableCompression:     true,
		MaxIdleConns:           s.IdleTotal,
		MaxIdleConnsPerHost:    s.IdlePerHost,
		IdleConnTimeout:        s.IdleTimeout,
		MaxResponseHeaderBytes: s.HeadMax,
		ReadBufferSize:         s.ReadBuffer,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  1 * time.Second,
		ResponseHeaderTimeout:  s.Upstream,
	}
	t.RegisterProtocol(SchemeH2C, h2cRoundTripper{s.h2cTransport()}) // h2c.go
	return t
}
