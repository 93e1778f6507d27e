package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/edgerate/edge/acme"
	"github.com/edgerate/edge/certs"
	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/internal/ja4"
	"github.com/edgerate/edge/proxy"
	"github.com/edgerate/edge/rules"
)

// configDir is the directory the files a configuration names are relative
// to: its own file's, or the working directory for the embedded default.
func configDir(path string) string {
	if path == "" {
		return "."
	}
	return filepath.Dir(path)
}

// loadCertificates reads the certificates of t's tls section, the files
// relative to the configuration at path; nil when edge serves no TLS.
func loadCertificates(path string, t *rules.Table) (*certs.Set, error) {
	if t.TLS.Listen == "" {
		return nil, nil
	}
	return certs.Load(configDir(path), t.TLS, time.Now())
}

// warnCertificates logs what loading the certificates accepted but an
// operator should know (expiry within a week, no names).
func warnCertificates(log *slog.Logger, set *certs.Set) {
	if set == nil {
		return
	}
	for _, w := range set.Warnings() {
		log.Warn(w)
	}
}

// certificateStamp identifies the state of the certificate files of t, as
// rlsStamp does the Lyft files': a reload follows a change of any.
func certificateStamp(path string, t *rules.Table) []fileStamp {
	if t == nil || t.TLS.Listen == "" {
		return nil
	}
	var out []fileStamp
	for _, f := range certs.Files(configDir(path), t.TLS) {
		st := fileStamp{}
		if fi, err := os.Stat(f); err == nil {
			st = stampOf(fi)
		}
		out = append(out, st)
	}
	return out
}

// tlsSocket binds the HTTPS listener of t, serving set, and returns it as
// a socket of the public listener, with the handshake as its stage, and
// the server that swaps certificates on reload; pp, the PROXY header's
// stage (nil for none), comes before the handshake where proxy_protocol
// reads a header on this socket. The proxy counts the handshakes and
// learns the port https_redirect sends clients to. With h2 (tls.http2),
// ALPN offers h2 before http/1.1, and a connection whose client chose it
// goes to h2 after the handshake. With tls.acme, it makes the ACME manager
// too (newACME), whose certificates and TLS-ALPN-01 answers the handshakes
// serve; httpAddr is the plain listener's bound address, which answers
// HTTP-01.
func tlsSocket(t *rules.Table, set *certs.Set, p *proxy.Proxy, pp guard.Stage, h2 *http2Server,
	path, httpAddr string, log *slog.Logger) (guard.Socket, *certs.Server, *acme.Manager, error) {
	ln, err := clientListen(t.TLS.Listen)
	if err != nil {
		return guard.Socket{}, nil, nil, fmt.Errorf("tls listener: %w", err)
	}
	opts := certs.Options{TLS: t.TLS, Set: set, OnHandshake: p.TLSHandshake,
		Fingerprint: fingerprint}
	if h2 != nil && t.TLS.HTTP2 {
		opts.NextProtos = []string{"h2", "http/1.1"}
	}
	var m *acme.Manager
	if t.TLS.ACME != nil {
		if m, err = newACME(t, p, path, httpAddr, ln.Addr().String(), log); err != nil {
			ln.Close()
			return guard.Socket{}, nil, nil, err
		}
		opts.Managed = m.Certificate
		if t.TLS.ACME.TLSALPN01 {
			opts.Challenge = m.Challenge
		}
	}
	srv, err := certs.NewServer(opts)
	if err != nil {
		ln.Close()
		if m != nil {
			m.Close()
		}
		return guard.Socket{}, nil, nil, err
	}
	if _, port, err := net.SplitHostPort(ln.Addr().String()); err == nil {
		n, _ := strconv.Atoi(port)
		p.SetHTTPSPort(n)
	}
	p.SetCertificates(set.Info())
	own := []guard.Stage{srv.Stage}
	if opts.NextProtos != nil {
		own = append(own, guard.ALPN("h2", h2.handoff))
	}
	return guard.Socket{Listener: ln, Name: proxy.ListenerTLS, Stages: socketStages(t, pp, rules.ListenerTLS, own...)}, srv, m, nil
}

// fingerprint is the JA4 of a ClientHello, over TCP or QUIC.
func fingerprint(h *tls.ClientHelloInfo, quic bool) string {
	p := ja4.TCP
	if quic {
		p = ja4.QUIC
	}
	return ja4.FromClientHello(h, p).Fingerprint()
}
