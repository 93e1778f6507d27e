// Command raw429 is the floor of any Go server that refuses requests: it
// answers every request head with the bytes of edge's 429 under
// bench/edge/block.yaml (fixed in advance, Date included) and does nothing
// else: no net/http, no parsing beyond finding each head's end, no
// deadline, no decision. Each connection gets a goroutine, as in every Go
// server; what it costs is Go's own accept, netpoll registration,
// goroutine and read and write per request. bench/proxy.sh runs it on the
// proxy's core with GOMAXPROCS=1 (variant raw429), so that edge's blocking
// path and nginx's can be set beside what Go itself pays.
//
//	raw429 -listen 127.0.0.1:28096
package main

import (
	"bytes"
	"context"
	"flag"
	"log"
	"net"
)

const response = "HTTP/1.1 429 Too Many Requests\r\n" +
	"Cache-Control: no-store\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\n" +
	"Ratelimit: \"per-ip\";r=0;t=1\r\n" +
	"Ratelimit-Policy: \"per-ip\";q=10;w=10\r\n" +
	"Retry-After: 1\r\n" +
	"X-Content-Type-Options: nosniff\r\n" +
	"X-Ratelimit-Limit: 10\r\n" +
	"X-Ratelimit-Remaining: 0\r\n" +
	"X-Ratelimit-Reset: 1\r\n" +
	"Date: Wed, 02 Dec 2026 12:00:00 GMT\r\n" +
	"Content-Length: 26\r\n" +
	"\r\n" +
	"rate limited: retry in 1s\n"

func main() {
	listen := flag.String("listen", "127.0.0.1:28096", "`address` to serve")
	flag.Parse()
	ln, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			continue
		}
		go serve(c)
	}
}

// serve answers each head on c (requests without bodies, as the benchmark
// sends) until the client closes.
func serve(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 4096)
	var held int
	for {
		n, err := c.Read(buf[held:])
		if n == 0 || err != nil {
			return
		}
		held += n
		for {
			end := bytes.Index(buf[:held], []byte("\r\n\r\n"))
			if end < 0 {
				break
			}
			if _, err := c.Write([]byte(response)); err != nil {
				return
			}
			held = copy(buf, buf[end+4:held])
		}
		if held == len(buf) {
			return // a head larger than the buffer: not this benchmark's
		}
	}
}
