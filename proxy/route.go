package proxy

import (
	"net/http"

	"github.com/edgerate/edge/internal/wire"
)

// route finds the domain that serves r's Host. It returns the domain and
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
