package main

import (
	"crypto/tls"
	"net"

	"github.com/edgerate/edge/internal/netpeek"
)

// readable reports whether c has bytes or its end waiting to be read
// (false where that cannot be told).
func readable(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn() // an https origin's: its socket
	}
	pending, _ := netpeek.Pending(c)
	return pending
}
