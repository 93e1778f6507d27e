package proxy

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/edgerate/edge/origin"
	"github.com/edgerate/edge/rules"
	"github.com/go-chi/chi/v5"
)

// Drains: an operator takes an origin server out of rotation on this node
// (POST /v1/origins/{domain}/drain?server=URL) while its requests finish,
// and puts it back (.../undrain). A domain's drains are its own
// (domain.drains, package origin's Drains), consulted at each choice by
// every group of the domain; a reload carries them over for the servers
// the domain keeps, a restart forgets them. What a drained server gets,
// and how to drain a PoP: docs/origins.md, "Drain".

// carryDrains returns the drains of rd: those of prev (the domain a
// reload replaces, nil for none) for the servers rd still has, in any of
// its groups (its routes' and its own).
func carryDrains(rd *rules.Domain, prev *domain) *origin.Drains {
	var from *origin.Drains
	if prev != nil {
		from = prev.drains
	}
	has := func(up *rules.Upstream, name string) bool {
		return up != nil && slices.ContainsFunc(up.Servers, func(s rules.OriginServer) bool { return s.Name == name })
	}
	return from.Carry(func(name string) bool {
		return has(rd.Upstream, name) || slices.ContainsFunc(rd.Routes, func(r *rules.Route) bool { return has(r.Upstream, name) })
	})
}

// drainView is the answer to a drain or an undrain: the server's state
// once it is done, and whether it changed it.
type drainView struct {
	Domain  string `json:"domain"`
	Server  string `json:"server"`
	Drained bool   `json:"drained"`
	Changed bool   `json:"changed"`
	// InFlight is the server's requests in flight, in every group of the
	// domain: a drain is complete once it is 0.
	InFlight int64 `json:"in_flight"`
}

// serveDrain answers POST /v1/origins/{domain}/drain (drain true) and
// .../undrain (false), ?server=URL: 200 with the server's state, 404 for
// an unknown domain or server, 400 without a server, 405 for another
// method.
func (p *Proxy) serveDrain(drain bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeJSON(w, http.StatusMethodNotAllowed, apiError{"method not allowed: use POST"})
			return
		}
		// Under the reload lock: a reload carries the drains of the
		// configuration it replaces (carryDrains), so none may change
		// between its copy and its switch, and the server checked here
		// is one of the configuration changed.
		p.reloadMu.Lock()
		defer p.reloadMu.Unlock()
		st := p.state.Load()
		name := chi.URLParam(r, "domain")
		d := st.domain(name)
		if d == nil {
			writeJSON(w, http.StatusNotFound, apiError{fmt.Sprintf("no domain %q", name)})
			return
		}
		if d.drains == nil {
			writeJSON(w, http.StatusNotFound, apiError{fmt.Sprintf("domain %q has no origin servers", d.Name)})
			return
		}
		server := r.URL.Query().Get("server")
		names := d.serverNames()
		switch {
		case server == "":
			writeJSON(w, http.StatusBadRequest, apiError{fmt.Sprintf("server is required: ?server=URL, one of domain %q's servers: %s",
				d.Name, strings.Join(names, ", "))})
			return
		case !slices.Contains(names, server):
			writeJSON(w, http.StatusNotFound, apiError{fmt.Sprintf("domain %q has no server %q; its servers: %s",
				d.Name, server, strings.Join(names, ", "))})
			return
		}
		v := drainView{Domain: d.Name, Server: server, Drained: drain}
		verb := "undrained"
		if drain {
			v.Changed, verb = d.drains.Drain(server), "drained"
		} else if v.Changed = d.drains.Undrain(server); v.Changed {
			now := p.now()
			for _, g := range d.groups {
				g.origins.Offer(now) // its free slots to requests waiting in the origin queue
			}
		}
		v.InFlight = d.inFlight(server)
		if v.Changed {
			p.log.Info("origin server "+verb+" through the admin API", "domain", d.Name, "server", server, "in_flight", v.InFlight)
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// serverNames are the names of d's servers, in every group, each once, in
// config order.
func (d *domain) serverNames() []string {
	var out []string
	for _, g := range d.groups {
		for _, s := range g.origins.Servers() {
			if !slices.Contains(out, s.Name) {
				out = append(out, s.Name)
			}
		}
	}
	return out
}

// inFlight is the requests in flight to the server named name, in every
// group of d.
func (d *domain) inFlight(name string) int64 {
	var n int64
	for _, g := range d.groups {
		for _, s := range g.origins.Servers() {
			if s.Name == name {
				n += s.InFlight()
			}
		}
	}
	return n
}
