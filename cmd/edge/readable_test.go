package main

import (
	"net"

	"github.com/edgerate/edge/internal/netpeek"
)

// readable reports whether c has bytes or its end waiting to be read
// (false where that cannot be told).
func readable(c net.Conn) bool {
	pending, _ := netpeek.Pending(c)
	return pending
}
