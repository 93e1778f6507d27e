package proxy

import (
	"net/http"

	"github.com/edgerate/edge/rules"
)

// ServeHTTP carries one request through edge. Each step is one function in
// its own file, called here in the order the request passes them; a step
// that answers the request itself returns nil (or false), and the request
// goes no further.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.screen(w, r) { // screen.go: refused requests are never forwarded
		return
	}
	now := p.now()
	st := p.state.Load()
	d, host := p.route(w, r, st) // route.go: 421, or 400 for an invalid Host
	if d == nil {
		return
	}
	if d.store != nil {
		src, _ := p.identify(r, st, host) // identify.go
		// limit.go decides; refuse.go answers what a rule blocks.
		if r = p.limit(w, r, d, &src, now); r == nil {
			return
		}
		if d.countsAfter || d.slots || d.shed != nil { // charge.go: limit kept the tally open
			defer p.endAfter(r)
		}
	}
	r, release := p.readBody(w, r, st, d) // body.go: 413, buffering
	if r == nil {
		return
	}
	defer release()
	if d.shed != nil { // shed.go: 503, once the request is ready for the origin
		if !p.admit(w, r, d.shed, host, rules.CleanPath(r.URL.Path)) {
			p.giveBack(r) // charge.go
			return
		}
		defer d.shed.release()
	}
	p.forward(w, r, d) // forward.go
}
