package proxy

import (
	"net/http"

	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
)

// route finds the domain that serves r's Host (and routeTo, below, the
// group of its servers that serves r's path). It returns the domain and
// the host normalised, or nil if it has answered: no domain claims the
// host (misdirected).
func (p *Proxy) route(w http.ResponseWriter, r *http.Request, st *state) (*domain, string) {
	// The host is normalised once: the domain is looked up by it and
	// rules keyed by host count it.
	host, validHost := wire.NormalizeHost(r.Host)
	d := st.lookup(host, false)
	if d == nil {
		p.misdirected(w, validHost)
		return nil, ""
	}
	return d, host
}

// routeTo is the route step of both request paths, taken once for each
// request: it gives the exchange the group of its domain's servers that
// serves it, the first of the domain's routes that matches its method
// and path, else the domain's own origins. path is the request's path as
// net/http's URL.Path holds it (decoded), cleaned when cleaned says so:
// routes match the path rules match, so that "//api/" or a dot segment
// cannot reach another route's servers than the path they clean to.
func (ex *exchange) routeTo(path string, cleaned bool) {
	d := ex.d
	switch len(d.groups) {
	case 0: // not forwarded
		ex.group = nil
	case 1:
		ex.group = d.groups[0]
	default:
		if !cleaned {
			path = rules.CleanPath(path)
		}
		ex.group = d.groupFor(ex.method, path)
	}
}

// groupFor returns the group of d that takes a request with method and
// path (cleaned): the group of the route rules.Domain.Route finds (the
// groups are the routes' in order, newGroups), else the last group, the
// domain's own.
func (d *domain) groupFor(method, path string) *serverGroup {
	if r := d.Route(method, path); r != nil {
		return d.groups[r.Index]
	}
	return d.groups[len(d.groups)-1]
}

// lookup returns the domain that claims a normalised host on the public
// listener (check false) or the check listener (check true), or nil. A
// domain that does not serve that listener claims nothing there: its
// host is misdirected, as an unknown one is.
func (st *state) lookup(host string, check bool) *domain {
	rd, ok := st.table.LookupHost(host)
	if !ok || (check && !rd.Checked) || (!check && !rd.Proxied) {
		return nil
	}
	return st.domains[rd.Index]
}

// misdirected answers a request whose Host no domain claims: 421, or 400 if
// the Host is not a valid host at all (validHost false). It is never forwarded.
func (p *Proxy) misdirected(w http.ResponseWriter, validHost bool) {
	p.metrics.misdirected.Inc()
	var a answer
	a.misdirectedAnswer(validHost)
	a.write(w)
}
