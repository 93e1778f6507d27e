package proxy

import (
	"sync"
	"time"
)

// The hooks below are what the framing guard's listener (guard.Listener,
// wired in cmd/edge) reports to the proxy: refusals, open connections and
// the connection cap. They run on connections, before and beside requests,
// never on a request's path.

// FramingRefused counts a request the framing guard (guard.Listener)
// refused for its framing; give it to guard.ListenerOptions.OnReject.
func (p *Proxy) FramingRefused() { p.metrics.framing.Inc() }

// ConnectionsOpen follows the connections open on the framing guard, by the
// socket they came from ("public" for plain HTTP, "tls"; "" is "public");
// give it to guard.ListenerOptions.OnConnections.
func (p *Proxy) ConnectionsOpen(socket string, delta int) {
	if socket == "" {
		socket = ListenerPublic
	}
	p.metrics.connsOpen.WithLabelValues(socket).Add(float64(delta))
}

// The names of the public listener's sockets, as edge_connections_open's
// listener label shows them.
const (
	ListenerPublic = "public"
	ListenerTLS    = "tls"
)

// ConnectionsCapped counts a connection that arrived at the framing guard's
// connection cap of maxConns, and logs it at most once a second (a flood at
// the cap would otherwise log a line per connection). closedIdle tells
// whether an idle keep-alive connection was closed to admit it. Call it
// from guard.ListenerOptions.OnCapped with the fields of the CapEvent.
func (p *Proxy) ConnectionsCapped(maxConns int, closedIdle bool) {
	p.metrics.capped.Inc()
	suppressed, ok := p.capLog.allow(p.now())
	if !ok {
		return
	}
	p.log.Warn("connection cap reached: closing idle keep-alive connections, then accepting none until one closes",
		"max_connections", maxConns, "closed_idle", closedIdle, "suppressed", suppressed)
}

// onceASecond lets an event through at most once a second and counts the
// others. It is safe for concurrent use; the zero value is ready.
type onceASecond struct {
	mu         sync.Mutex
	last       time.Time // when an event last went through; zero for never
	suppressed int       // events held back since then
}

// allow reports whether the event at now goes through and, if it does, how
// many were held back since the last one that did.
func (o *onceASecond) allow(now time.Time) (suppressed int, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	// A clock that went back lets the event through rather than hold
	// every event back until it catches up.
	if !o.last.IsZero() && !now.Before(o.last) && now.Before(o.last.Add(time.Second)) {
		o.suppressed++
		return 0, false
	}
	o.last, suppressed, o.suppressed = now, o.suppressed, 0
	return suppressed, true
}
