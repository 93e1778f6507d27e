//go:build !linux

package main

import "net"

// pendingAccept reports whether a connection waits in ln's backlog: not
// known here.
func pendingAccept(net.Listener) bool { return false }
