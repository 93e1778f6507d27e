package main

import (
	"log/slog"

	"github.com/edgerate/edge/acme"
	"github.com/edgerate/edge/proxy"
	"github.com/edgerate/edge/rules"
)

// newACME makes the ACME manager of t's tls.acme, the configuration at
// path: the plain listener at httpAddr and the TLS one at tlsAddr answer
// its challenges (p's ACMEChallenge hook and the handshake), p counts its
// orders and renewals and shows each name's state. With cluster.store
// redis the state is shared through p's Redis client. It manages no name
// until Manage, once the listeners serve.
func newACME(t *rules.Table, p *proxy.Proxy, path, httpAddr, tlsAddr string, log *slog.Logger) (*acme.Manager, error) {
	opts := acme.Options{
		ACME:     t.TLS.ACME,
		Dir:      configDir(path),
		HTTPAddr: httpAddr,
		TLSAddr:  tlsAddr,
		Logger:   log,
		OnResult: p.ACMEResult,
	}
	if cl := p.Cluster(); cl != nil {
		// cluster.store redis: the PoP's ACME state is in its Redis.
		opts.Shared = cl.Storage()
	}
	m, err := acme.New(opts)
	if err != nil {
		return nil, err
	}
	if t.TLS.ACME.HTTP01 {
		p.SetACMEChallenge(m.HTTPChallenge)
	}
	p.SetACMEStatus(m.Status)
	return m, nil
}
