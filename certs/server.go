package certs

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
)

// Results of a handshake, as Handshake.Result reports them (and the metric
// edge_tls_handshakes_total counts them).
const (
	ResultOK         = "ok"          // served a certificate for the name asked (or the default, asked none)
	ResultUnknownSNI = "unknown_sni" // served the default certificate for a name no certificate covers
	ResultRejected   = "rejected"    // ended with the alert unrecognized_name (unknown_sni: reject)
	ResultPlainHTTP  = "plain_http"  // plain HTTP sent to the TLS port: answered 400
	ResultACME       = "acme"        // an ACME server's TLS-ALPN-01 validation (acme-tls/1), answered and closed
	ResultError      = "error"       // any other failure: garbage, an old protocol, no common cipher, a timeout
)

// ALPNACME is the protocol an ACME server's TLS-ALPN-01 validation offers,
// alone (RFC 8737 §3).
const ALPNACME = "acme-tls/1"

// errChallenge ends the connection of an answered TLS-ALPN-01 validation,
// after which the ACME server sends nothing (RFC 8737 §3).
var errChallenge = errors.New("acme-tls/1: challenge answered")

// Handshake is one finished handshake, as Options.OnHandshake is told.
type Handshake struct {
	Result   string
	Duration time.Duration // from the stage's start to the handshake's end
	Peer     net.Addr
	Err      error // nil for ResultOK and ResultUnknownSNI
}

// Options configure a Server.
type Options struct {
	// TLS is the compiled tls section; its MinVersion applies.
	TLS rules.TLS
	// Set is the certificates served until the first Swap; required.
	Set *Set
	// NextProtos are the protocols offered by ALPN, most preferred first;
	// none means http/1.1.
	NextProtos []string
	// Fingerprint, if set, computes the client's fingerprint (JA4) from
	// its ClientHello, once per handshake; quic is true for a QUIC
	// connection's handshake (QUICConfig).
	Fingerprint func(hello *tls.ClientHelloInfo, quic bool) string
	// OnHandshake, if set, is told of every handshake the Stage ends. It
	// runs in the connection's goroutine and must not block.
	OnHandshake func(Handshake)
	// Managed, if set, gives the certificates obtained at run time (ACME)
	// by exact name, normalised like wire.NormalizeHost: the one for
	// name, nil without one. A certificate from a file for the same name
	// wins; a managed one beats a file's wildcard, as an exact name does.
	// It runs in handshakes and must not block.
	Managed func(name string) *tls.Certificate
	// Challenge, if set, answers TLS-ALPN-01 (RFC 8737): the certificate
	// for a ClientHello that offers only acme-tls/1, or an error to end
	// the handshake. Such a handshake is reported as ResultACME, and its
	// connection ends after it.
	Challenge func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// Now reads the clock; nil means time.Now.
	Now func() time.Time
}

// Server makes the TLS server side of the HTTPS listener's connections.
// It is safe for concurrent use: Stage runs in each connection's
// goroutine, Swap at any time.
type Server struct {
	set         atomic.Pointer[Set]
	base        *tls.Config // GetConfigForClient picks a certificate's config
	template    *tls.Config // what each certificate's config is made from
	reject      *tls.Config // a config with no certificate: the alert unrecognized_name
	fingerprint func(*tls.ClientHelloInfo, bool) string
	onHandshake func(Handshake)
	now         func() time.Time

	managed     func(string) *tls.Certificate
	managedConf *tls.Config // serves hello.managed
	// quic makes the QUIC handshakes' configs (QUICConfig): each of the
	// configs above with ALPN h3 alone, made once per config.
	quic sync.Map
	// managedCerts holds the *Cert of each name a managed certificate was
	// served for (what a request's Covers asks), made once per name.
	managedCerts sync.Map
	challenge    func(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// cipherSuites are the TLS 1.2 suites offered: ECDHE key exchange with an
// AEAD, Mozilla's "intermediate" profile (no RSA key exchange, no CBC, no
// SHA-1 MAC). TLS 1.3's suites are Go's, all AEAD.
var cipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// NewServer returns the Server of opts.
func NewServer(opts Options) (*Server, error) {
	if opts.Set == nil {
		return nil, errors.New("certs: NewServer needs a Set")
	}
	protos := opts.NextProtos
	if len(protos) == 0 {
		protos = []string{"http/1.1"}
	}
	s := &Server{fingerprint: opts.Fingerprint, onHandshake: opts.OnHandshake, now: opts.Now,
		managed: opts.Managed, challenge: opts.Challenge}
	if s.now == nil {
		s.now = time.Now
	}
	s.template = &tls.Config{
		MinVersion:   max(opts.TLS.MinVersion, tls.VersionTLS12),
		CipherSuites: cipherSuites,
		NextProtos:   protos,
	}
	s.reject = s.template.Clone()
	// No certificate and a GetCertificate that finds none: crypto/tls
	// ends the handshake with the alert unrecognized_name.
	s.reject.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, nil }
	s.base = s.template.Clone()
	s.base.GetConfigForClient = s.configFor
	s.managedConf = s.template.Clone()
	s.managedConf.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if hc := helloOf(hello); hc != nil && hc.managed != nil {
			return hc.managed, nil
		}
		return nil, errors.New("certs: no managed certificate chosen")
	}
	s.Swap(opts.Set)
	return s, nil
}

// Swap serves set from the next handshake on.
func (s *Server) Swap(set *Set) {
	for _, c := range set.certs {
		if c.conf == nil {
			c.conf = s.template.Clone()
			c.conf.Certificates = []tls.Certificate{*c.cert}
		}
	}
	s.set.Store(set)
}

// Set returns the certificates being served.
func (s *Server) Set() *Set { return s.set.Load() }

// helloConn is the connection a handshake reads, carrying what the
// ClientHello told configFor to the Stage.
type helloConn struct {
	net.Conn
	helloState
}

// helloState is what a ClientHello told configFor: the certificate chosen and
// the fingerprint.
type helloState struct {
	cert    *Cert
	managed *tls.Certificate // the managed certificate chosen, served by managedConf
	ja4     string
	result  string // ResultUnknownSNI, ResultRejected or ResultACME when so
	quic    bool   // a QUIC connection's (QUICHello)
}

// helloOf returns the hello of a handshake: its helloConn's, or its QUIC
// connection's (QUICHello); nil for a handshake neither made.
func helloOf(h *tls.ClientHelloInfo) *helloState {
	if hc, _ := h.Conn.(*helloConn); hc != nil {
		return &hc.helloState
	}
	if ctx := h.Context(); ctx != nil {
		if q, _ := ctx.Value(quicHelloKey{}).(*QUICHello); q != nil {
			return &q.helloState
		}
	}
	return nil
}

// configFor chooses the config of the certificate for hello's name: an
// ACME validation's first, then the Set's and the managed certificates,
// as Set.Lookup orders them with a managed one after the files' exact
// names.
func (s *Server) configFor(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	hc := helloOf(hello)
	if hc == nil {
		return nil, errors.New("certs: a handshake on a connection the Stage did not make")
	}
	if s.challenge != nil && !hc.quic && len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == ALPNACME {
		return s.challengeConfig(hc, hello)
	}
	if s.fingerprint != nil {
		hc.ja4 = s.fingerprint(hello, hc.quic)
	}
	set := s.set.Load()
	if s.managed != nil {
		if h, ok := wire.NormalizeHost(hello.ServerName); ok && set.exact[h] == nil {
			if tc := s.managed(h); tc != nil {
				hc.managed, hc.cert = tc, s.managedCert(h)
				return s.managedConf, nil
			}
		}
	}
	c, known := set.Lookup(hello.ServerName)
	if c == nil {
		hc.result = ResultRejected
		return s.reject, nil
	}
	if !known && hello.ServerName != "" {
		hc.result = ResultUnknownSNI
	}
	hc.cert = c
	return c.conf, nil
}

// managedCert returns the *Cert a connection served a managed certificate
// for name reports: it covers name alone.
func (s *Server) managedCert(name string) *Cert {
	if c, ok := s.managedCerts.Load(name); ok {
		return c.(*Cert)
	}
	c, _ := s.managedCerts.LoadOrStore(name, &Cert{Names: []string{name}})
	return c.(*Cert)
}

// challengeConfig answers an ACME server's TLS-ALPN-01 validation with the
// challenge's certificate, negotiating acme-tls/1 (RFC 8737 §3).
func (s *Server) challengeConfig(hc *helloState, hello *tls.ClientHelloInfo) (*tls.Config, error) {
	hc.result = ResultACME
	cert, err := s.challenge(hello)
	if err != nil {
		return nil, fmt.Errorf("acme-tls/1 for %q: %w", hello.ServerName, err)
	}
	conf := s.template.Clone()
	conf.Certificates = []tls.Certificate{*cert}
	conf.NextProtos = []string{ALPNACME}
	return conf, nil
}

// plainHTTPAnswer is what a client that speaks plain HTTP to the TLS port
// reads: the answer net/http gives it too.
const plainHTTPAnswer = "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" +
	"Client sent an HTTP request to an HTTPS server.\n"

// Stage is the HTTPS listener's handshake, a guard.Stage: it runs in the
// connection's own goroutine under the Listener's stage deadline
// (timeouts.read_header), and leaves the decrypted stream, whose TLS method
// reports the handshake's state (wire.Secure). A failed handshake ends the
// connection: plain HTTP is answered 400 first.
func (s *Server) Stage(c net.Conn) (guard.StageResult, error) {
	start := s.now()
	hc := &helloConn{Conn: c}
	tc := tls.Server(hc, s.base)
	err := tc.Handshake()
	h := Handshake{Result: ResultOK, Peer: c.RemoteAddr(), Err: err}
	switch {
	case err == nil && hc.result != "":
		h.Result = hc.result
	case err != nil && (hc.result == ResultRejected || hc.result == ResultACME):
		h.Result = hc.result
	case err != nil:
		h.Result = ResultError
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) && rh.Conn != nil && looksLikeHTTP(rh.RecordHeader[:]) {
			h.Result = ResultPlainHTTP
			_, _ = io.WriteString(rh.Conn, plainHTTPAnswer)
		}
	}
	h.Duration = s.now().Sub(start)
	if s.onHandshake != nil {
		s.onHandshake(h)
	}
	if err != nil {
		return guard.StageResult{}, fmt.Errorf("tls handshake: %w", err)
	}
	if hc.result == ResultACME {
		return guard.StageResult{Conn: tc}, errChallenge // the Listener closes tc
	}
	sc := &Conn{Conn: tc, info: wire.TLS{State: tc.ConnectionState(), JA4: hc.ja4}}
	if hc.cert != nil {
		sc.info.Cert = hc.cert
	}
	return guard.StageResult{Conn: sc}, nil
}

// looksLikeHTTP reports whether the first five bytes of a connection are
// the start of a plain HTTP request, as net/http tells them.
func looksLikeHTTP(hdr []byte) bool {
	for _, m := range []string{"GET /", "HEAD ", "POST ", "PUT /", "OPTIO", "DELET", "PATCH", "CONNE", "TRACE"} {
		if bytes.HasPrefix(hdr, []byte(m)) {
			return true
		}
	}
	return false
}

// Conn is a TLS server connection after its handshake: what the Listener
// and net/http read.
type Conn struct {
	*tls.Conn
	info wire.TLS
}

// TLS returns the connection's TLS state, fingerprint and certificate.
func (c *Conn) TLS() *wire.TLS { return &c.info }

var _ wire.Secure = (*Conn)(nil)
