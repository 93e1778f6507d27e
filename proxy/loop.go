package proxy

import (
	"net/http"
	"os"

	"github.com/edgerate/edge/internal/wire"
)

// A request that comes back to the node that forwarded it (an origin that
// reaches edge itself by an address the config check cannot know, a load
// balancer or a port forward in between, a tier that forwards to the one
// in front of it) would go round, counted and forwarded at each pass,
// until its head outgrew max_header_bytes. So every request edge forwards
// carries this node's Via entry (RFC 9110 §7.6.3), on a field line of its
// own after the client's (forward.go, originhead.go), and a request that
// already holds the entry is answered 508 Loop Detected (RFC 5842 §7.2)
// right after its domain is found, before any rule counts it, with the
// same answer on both paths (answer.go, loopAnswer). Responses carry no
// Via. Why, and the entry's form: docs/clients.md, "What the origin
// receives".

// via is this node's entry in the Via field, made once by New: pop is a
// setting that takes effect at a restart (reload.go), and the node's name
// does not change.
type via struct {
	// token is the node's received-by, a pseudonym: edge-<pop>-<node>
	// (viaToken).
	token string
	// value is the entry of a request received as HTTP/1.1 ("1.1 " and
	// the token), value10 of one received as HTTP/1.0, value2 of one
	// received as HTTP/2 ("2", as RFC 9113 names the version), value3 of
	// one received as HTTP/3 ("3", RFC 9114); field is
	// value, for the fast forward's head (which the guard offers only for
	// HTTP/1.1).
	value, value10, value2, value3 string
	field                          []byte
}

// newVia makes the Via entry of the node named node in PoP pop (viaToken).
func newVia(pop, node string) via {
	token := viaToken(pop, node)
	return via{token: token, value: "1.1 " + token, value10: "1.0 " + token, value2: "2 " + token, value3: "3 " + token, field: []byte("1.1 " + token)}
}

// viaToken is the pseudonym of the node named node ("": the host name,
// or "unknown" without one) in PoP pop: "edge-" + pop + "-" + node, with
// every byte that is not a tchar made '-' (wire.Pseudonym), so that it is
// one token however the host is named. Two edges in series need different
// tokens: on one host, different pops.
func viaToken(pop, node string) string {
	if node == "" {
		node, _ = os.Hostname()
	}
	if node == "" {
		node = "unknown"
	}
	return wire.Pseudonym("edge-" + pop + "-" + node)
}

// entry returns the Via entry for r, by the version it was received with.
func (v *via) entry(r *http.Request) string {
	switch {
	case r.ProtoMajor == 2:
		return v.value2
	case r.ProtoMajor == 3:
		return v.value3
	case !r.ProtoAtLeast(1, 1):
		return v.value10
	}
	return v.value
}

// in reports whether one of lines, a request's Via field lines, holds this
// node's entry. Each line is read on its own (wire.ViaReceivedBy), so that
// none can hide the entry on a line after it.
func (v *via) in(lines []string) bool {
	for _, l := range lines {
		if wire.ViaReceivedBy(l, v.token) {
			return true
		}
	}
	return false
}

// inFields is in for the Via lines of a head's fields.
func (v *via) inFields(fields []wire.Field) bool {
	for _, f := range fields {
		if wire.EqualFoldLower(f.Name, "via") && wire.ViaReceivedBy(f.Value, v.token) {
			return true
		}
	}
	return false
}

// refuseLoop answers ex's request, which came back to this node, 508
// (loopAnswer), with the domain's Strict-Transport-Security on an HTTPS
// connection (secure), and counts it.
func (p *Proxy) refuseLoop(ex *exchange, secure bool) {
	ex.ans.loopAnswer()
	ex.ans.strictTransport(ex.d, secure)
	ex.d.requests.count(&ex.ans)
}

// Via returns this node's pseudonym in the Via field of the requests it
// forwards (see viaToken); edge logs it at start.
func (p *Proxy) Via() string { return p.via.token }
