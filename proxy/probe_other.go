//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package proxy

// alive reports whether an idle origin connection may be used for a
// request the transport would not send again: here it cannot be checked
// without waiting, so never (a new connection is dialled instead).
func (oc *originConn) alive() bool { return false }
