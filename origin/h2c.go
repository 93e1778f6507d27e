package origin

import (
	"context"
	"net"
	"net/http"
)

// Origins at h2c:// URLs speak HTTP/2 with prior knowledge, without TLS
// (gRPC servers, mostly): the transport carries them on a transport of
// their own, registered for the scheme (Transport), so that every other
// http:// origin keeps HTTP/1.1. Their connections are multiplexed, so
// what Watch guards against on an HTTP/1.1 connection (a response taken
// for the next request's) cannot happen on them, and a response that
// begins before its request's body is written whole is what a
// bidirectional stream is: Watch leaves them alone (they are not
// transportConns), and HTTP/2's own write timeout bounds a write the
// origin takes nothing of.

// SchemeH2C is the scheme of an origin spoken to in HTTP/2 with prior
// knowledge.
const SchemeH2C = "h2c"

// h2cTransport returns the transport of h2c:// origins under s (resolved).
func (s Settings) h2cTransport() *http.Transport {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	d := s.dialer()
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		Protocols:              &protos,
		HTTP2:                  &http.HTTP2Config{WriteByteTimeout: s.Upstream},
		DisableCompression:     true,
		MaxIdleConns:           s.IdleTotal,
		MaxIdleConnsPerHost:    s.IdlePerHost,
		IdleConnTimeout:        s.IdleTimeout,
		MaxResponseHeaderBytes: s.HeadMax,
		ResponseHeaderTimeout:  s.Upstream,
	}
}

// h2cRoundTripper carries a request for an h2c:// URL as an http:// one
// on its transport.
type h2cRoundTripper struct{ t *http.Transport }

func (h h2cRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	out := *req // a RoundTripper must not change its request
	u := *req.URL
	u.Scheme = "http"
	out.URL = &u
	return h.t.RoundTrip(&out)
}

// CloseIdleConnections closes the h2c transport's idle connections.
func (h h2cRoundTripper) CloseIdleConnections() { h.t.CloseIdleConnections() }
