// Command connflood is bench/connections.sh's load generator: each of -c
// workers opens a connection to -addr from one source address, in a loop
// for -d, as a client that floods a server with connections does; on a
// server that refuses the connection at accept it sees the reset (or the
// close) and starts again. With -tls each connection starts a TLS
// handshake (its ClientHello) instead of sending an HTTP request: on a
// server that refuses at accept the handshake fails without a
// ServerHello. Every connection ends with a reset from this side too
// (SO_LINGER 0), so that a flood leaves no port in TIME_WAIT.
//
// It prints one line: connections made, connections per second, how many
// were answered (an HTTP response, or a finished handshake) and how many
// failed to connect.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:28191", "host:port to connect to")
	src := flag.String("src", "127.0.0.1", "source address of every connection")
	conns := flag.Int("c", 32, "concurrent workers")
	dur := flag.Duration("d", 5*time.Second, "how long to run")
	useTLS := flag.Bool("tls", false, "start a TLS handshake on each connection instead of an HTTP request")
	flag.Parse()
	req := []byte("GET / HTTP/1.1\r\nHost: bench.example\r\n\r\n")
	conf := &tls.Config{InsecureSkipVerify: true, ServerName: "bench.example"}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(*src)}, Timeout: 5 * time.Second}

	var made, answered, dialErr atomic.Int64
	stop := time.Now().Add(*dur)
	start := time.Now()
	var wg sync.WaitGroup
	for range *conns {
		wg.Go(func() {
			buf := make([]byte, 4096)
			for time.Now().Before(stop) {
				c, err := d.Dial("tcp", *addr)
				made.Add(1)
				if err != nil {
					dialErr.Add(1)
					continue
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if *useTLS {
					tc := tls.Client(c, conf)
					if tc.Handshake() == nil {
						answered.Add(1)
					}
				} else if _, err := c.Write(req); err == nil {
					if n, _ := io.ReadAtLeast(c, buf, 1); n > 0 {
						answered.Add(1)
					}
				}
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	fmt.Fprintf(os.Stdout, "connections %d rate %.0f answered %d dial_errors %d\n",
		made.Load(), float64(made.Load())/elapsed, answered.Load(), dialErr.Load())
}
