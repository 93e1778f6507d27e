package proxy

import "github.com/edgerate/edge/internal/netpeek"

// alive reports whether an idle origin connection is still open and has
// sent nothing: what the transport's reader, which reads every idle
// connection, would know of it. It peeks without waiting; where it cannot,
// it says no (a new connection is dialled instead).
func (oc *originConn) alive() bool {
	if oc.br != nil && oc.br.Buffered() > 0 {
		return false
	}
	pending, ok := netpeek.Pending(oc.conn)
	return ok && !pending
}
