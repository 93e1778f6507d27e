package proxy

import (
	"crypto/tls"
	"net/http"
	"time"

	"github.com/edgerate/edge/origin"
	"github.com/edgerate/edge/rules"
)

// A group's origin_tls made live: the origin component's TLS (its
// session caches) and, for a group with origin_tls, a transport of its
// own for the net/http path and the health checks, since a transport
// speaks one TLS to every origin. Both are kept across reloads for as
// long as a group has the same origin_tls (rules.OriginTLS.ID) and the
// upstream timeout stays, so that a reload keeps their connections and
// sessions (docs/origins.md, "TLS to origins").

// groupTLS is one origin_tls's live state.
type groupTLS struct {
	tls *origin.TLS
	// transport carries the net/http path's requests and the checks to
	// the group's servers; nil for https servers without origin_tls,
	// which the shared transport carries.
	transport *http.Transport
	upstream  time.Duration // the timeout transport was made with
}

// noOriginTLS is the key of https groups without origin_tls in
// state.tls.
const noOriginTLS = ""

// originTLS returns the live state of up's origin_tls (nil for a group
// of http or h2c servers), made in st or taken from old's (nil: none).
func (st *state) originTLS(up *rules.Upstream, old *state) *groupTLS {
	if up == nil || len(up.Servers) == 0 || up.Servers[0].URL.Scheme != "https" {
		return nil
	}
	id := noOriginTLS
	if up.TLS != nil {
		id = "tls " + up.TLS.ID
	}
	if g := st.tls[id]; g != nil {
		return g
	}
	timeout := st.table.Timeouts.Upstream
	g := (*groupTLS)(nil)
	if old != nil {
		if prev := old.tls[id]; prev != nil && prev.upstream == timeout {
			g = prev
		}
	}
	if g == nil {
		g = newGroupTLS(up.TLS, st.table.Timeouts)
	}
	if st.tls == nil {
		st.tls = make(map[string]*groupTLS)
	}
	st.tls[id] = g
	return g
}

// newGroupTLS makes the live state of rt (nil: the defaults) under
// timeouts t.
func newGroupTLS(rt *rules.OriginTLS, t rules.Timeouts) *groupTLS {
	if rt == nil {
		return &groupTLS{tls: origin.NewTLS(origin.TLSOptions{}), upstream: t.Upstream}
	}
	o := origin.TLSOptions{RootCAs: rt.RootCAs, ServerName: rt.ServerName,
		InsecureSkipVerify: rt.InsecureSkipVerify, ID: rt.ID}
	if rt.Certificate != nil {
		o.Certificates = []tls.Certificate{*rt.Certificate}
	}
	g := &groupTLS{tls: origin.NewTLS(o), upstream: t.Upstream}
	s := originSettings(t)
	s.TLS = g.tls
	g.transport = s.Transport()
	return g
}

// retireTLS closes the idle connections of old's transports that cur no
// longer uses (those in use close when their requests end).
func retireTLS(old, cur *state) {
	for id, g := range old.tls {
		if g.transport != nil && (cur == nil || cur.tls[id] != g) {
			g.transport.CloseIdleConnections()
		}
	}
}
