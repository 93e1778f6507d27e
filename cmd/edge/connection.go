package main

import (
	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/proxy"
	"github.com/edgerate/edge/proxyproto"
	"github.com/edgerate/edge/rules"
)

// The public listener's sockets each run a list of setup stages on every
// new connection (guard.Stage), in order: the PROXY protocol header first,
// where proxy_protocol reads one (its client then is the connection's for
// everything after), then the socket's own (the TLS handshake on the tls
// socket). The connection limits (connections) decide on a connection as
// the guard accepts it (guard.ListenerOptions.Admit), or, for a
// balancer's, right after its header: before any other stage.

// proxyProtocolStage is the stage that reads the PROXY header of t's
// proxy_protocol, nil when it is off. The balancers it trusts are the
// running configuration's (from reloads); p counts what it does.
func proxyProtocolStage(t *rules.Table, p *proxy.Proxy) guard.Stage {
	if t.ProxyProtocol.From == nil {
		return nil
	}
	r, err := proxyproto.New(proxyproto.Options{Trusted: p.ProxyProtocolTrusted, OnResult: p.ProxyProtocolResult,
		Admit: p.AdmitClient})
	if err != nil {
		panic(err) // cannot fail: Trusted is set
	}
	return r.Stage
}

// socketStages returns the stages of the public listener's socket name
// (rules.ListenerPublic, rules.ListenerTLS): pp, the PROXY header's stage
// (nil for none), where t's proxy_protocol reads one on that socket, then
// own.
func socketStages(t *rules.Table, pp guard.Stage, name string, own ...guard.Stage) []guard.Stage {
	var out []guard.Stage
	if pp != nil && t.ProxyProtocol.Reads(name) {
		out = append(out, pp)
	}
	return append(out, own...)
}
