package certs

import (
	"context"
	"crypto/tls"

	"github.com/edgerate/edge/internal/wire"
)

// QUIC: the handshakes of HTTP/3's connections choose their certificates
// as the TCP listener's do (configFor), with ALPN h3 alone. A QUIC
// connection has no net.Conn of the Stage's to carry what its ClientHello
// told, so it is carried in the connection's context, which quic-go hands
// crypto/tls (quic.Transport.ConnContext: WithQUICHello).

// quicHelloKey carries a QUIC connection's QUICHello in its context.
type quicHelloKey struct{}

// QUICHello is what the handshake of one QUIC connection chose: its
// certificate and its client's fingerprint. It is written during the
// handshake and read once the handshake has produced the connection.
type QUICHello struct {
	helloState
}

// WithQUICHello returns ctx carrying a new QUICHello, for the context of a
// QUIC connection before its handshake (quic.Transport.ConnContext).
func WithQUICHello(ctx context.Context) (context.Context, *QUICHello) {
	q := &QUICHello{helloState: helloState{quic: true}}
	return context.WithValue(ctx, quicHelloKey{}, q), q
}

// QUICHelloOf returns the QUICHello in ctx, nil without.
func QUICHelloOf(ctx context.Context) *QUICHello {
	q, _ := ctx.Value(quicHelloKey{}).(*QUICHello)
	return q
}

// TLS returns what a request over the connection knows of its TLS: state,
// the connection's state once its handshake is done (or done enough to
// read 0-RTT data), with the fingerprint and certificate chosen.
func (q *QUICHello) TLS(state tls.ConnectionState) *wire.TLS {
	t := &wire.TLS{State: state, JA4: q.ja4}
	if q.cert != nil {
		t.Cert = q.cert
	}
	return t
}

// QUICConfig returns the TLS config of the QUIC listener: the certificates
// the Server serves, chosen per ClientHello as on TCP, with ALPN h3. Each
// connection's context must carry a QUICHello (WithQUICHello); a handshake
// without one fails.
func (s *Server) QUICConfig() *tls.Config {
	base := s.quicVariant(s.template)
	base.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		conf, err := s.configFor(h)
		if conf == nil || err != nil {
			return conf, err
		}
		return s.quicVariant(conf), nil
	}
	return base
}

// quicVariant returns conf with ALPN h3 alone, made once per conf so that
// its session ticket keys (which resumption and 0-RTT decrypt tickets
// with) stay the same for every handshake.
func (s *Server) quicVariant(conf *tls.Config) *tls.Config {
	if v, ok := s.quic.Load(conf); ok {
		return v.(*tls.Config)
	}
	// Session ticket keys are made on first use: make them before the
	// clone, so that conf and its variant share them.
	_, _ = conf.DecryptTicket(nil, tls.ConnectionState{})
	v := conf.Clone()
	v.NextProtos = []string{"h3"}
	v.MinVersion = tls.VersionTLS13 // QUIC's (RFC 9001 §4.2)
	got, _ := s.quic.LoadOrStore(conf, v)
	return got.(*tls.Config)
}
