// Command h3load is bench/h3.sh's load generator: GET requests over HTTP/3
// (quic-go's client, the library edge serves HTTP/3 with) or over HTTP/2
// over TLS (Go's client), on -c connections with -m requests in flight on
// each, for -d; it prints the requests completed and their status classes,
// for the script to divide the server's CPU by.
//
//	h3load -proto h3 -addr 127.0.0.1:28196 -host bench.example -c 4 -m 100 -d 8s /api/v1/items
//
// Only a loopback address is accepted: it is a load test of a server on
// this machine.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

func main() {
	proto := flag.String("proto", "h3", "h3 (HTTP/3 over QUIC) or h2 (HTTP/2 over TLS)")
	addr := flag.String("addr", "127.0.0.1:28196", "the server's address, host:port (loopback only)")
	host := flag.String("host", "bench.example", "the name asked for (SNI and :authority)")
	conns := flag.Int("c", 4, "connections")
	streams := flag.Int("m", 100, "requests in flight on each connection")
	dur := flag.Duration("d", 8*time.Second, "how long to send")
	flag.Parse()
	path := "/"
	if flag.NArg() > 0 {
		path = flag.Arg(0)
	}
	if err := run(*proto, *addr, *host, path, *conns, *streams, *dur); err != nil {
		fmt.Fprintln(os.Stderr, "h3load:", err)
		os.Exit(1)
	}
}

// counts are the responses by status class (1xx..5xx at 1..5).
type counts [6]atomic.Int64

func run(proto, addr, host, path string, conns, streams int, dur time.Duration) error {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-addr must be a loopback address, got %q", addr)
	}
	tc := &tls.Config{ServerName: host, InsecureSkipVerify: true} // a bench's own certificate
	var clients []*http.Client
	var closers []io.Closer
	for range conns {
		var rt http.RoundTripper
		switch proto {
		case "h3":
			t := &http3.Transport{TLSClientConfig: tc.Clone(), Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
				return quic.DialAddr(ctx, addr, tc, qc)
			}}
			rt, closers = t, append(closers, t)
		case "h2":
			var p http.Protocols
			p.SetHTTP2(true)
			t := &http.Transport{Protocols: &p, TLSClientConfig: tc.Clone(), MaxConnsPerHost: 1,
				DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}}
			rt = t
			defer t.CloseIdleConnections()
		default:
			return fmt.Errorf("-proto must be h3 or h2, got %q", proto)
		}
		clients = append(clients, &http.Client{Transport: rt, Timeout: 30 * time.Second})
	}
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	url := "https://" + host + path
	// One request per connection first: the handshakes are not measured.
	for _, c := range clients {
		if _, err := get(c, url); err != nil {
			return err
		}
	}
	var got counts
	var failed atomic.Int64
	var firstErr atomic.Value
	stop := time.Now().Add(dur)
	var wg sync.WaitGroup
	for _, c := range clients {
		for range streams {
			wg.Go(func() {
				for time.Now().Before(stop) {
					status, err := get(c, url)
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
						continue
					}
					got[min(status/100, 5)].Add(1)
				}
			})
		}
	}
	wg.Wait()
	total := int64(0)
	for i := range got {
		total += got[i].Load()
	}
	fmt.Printf("proto %s\nrequests %d\nfailed %d\nstatus %d %d %d %d\n", proto, total, failed.Load(),
		got[2].Load(), got[3].Load(), got[4].Load(), got[5].Load())
	if total == 0 {
		err, _ := firstErr.Load().(error)
		return errors.Join(errors.New("no request completed"), err)
	}
	return nil
}

// get sends one GET and reads its answer whole.
func get(c *http.Client, url string) (int, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}
