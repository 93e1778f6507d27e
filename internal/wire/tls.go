package wire

import "crypto/tls"

// TLS is what a request's transport knows of its connection's TLS: set once
// by the handshake, read by every request on the connection, never changed.
type TLS struct {
	// State is the connection's state after its handshake, which net/http
	// reports as Request.TLS.
	State tls.ConnectionState
	// JA4 is the JA4 fingerprint of the client's ClientHello; "" when it
	// was not computed.
	JA4 string
	// Cert is the certificate the connection was served.
	Cert Certificate
}

// Certificate is a certificate served on a connection, as a request sees it.
type Certificate interface {
	// Covers reports whether the certificate is for host, a name
	// normalised with NormalizeHost without its port.
	Covers(host string) bool
}

// Secure is implemented by a connection over TLS: TLS returns its state,
// the same value for the connection's life.
type Secure interface {
	TLS() *TLS
}
