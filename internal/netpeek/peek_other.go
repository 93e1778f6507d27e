//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package netpeek

import "net"

// Pending cannot tell here: ok is false.
func Pending(net.Conn) (pending, ok bool) { return false, false }
