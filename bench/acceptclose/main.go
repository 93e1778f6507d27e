// Command acceptclose is bench/connections.sh's floor for a Go server: it
// accepts each connection and closes it at once with a reset (SO_LINGER
// 0), as edge closes a connection its limits refuse, and does nothing
// else. What edge costs per refused connection beyond it is edge's own
// work; what it costs beyond HAProxy and not beyond this is Go's accept
// (netpoll registration, getsockname, TCP_NODELAY) and scheduler.
package main

import (
	"context"
	"flag"
	"log"
	"net"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:28193", "host:port to listen on")
	flag.Parse()
	ln, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			continue
		}
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
}
