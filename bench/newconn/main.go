// Command newconn is bench/proxy.sh's load generator for NEWCONN=1: each of
// -c workers opens a connection, sends one HTTP/1.1 GET (keep-alive, as a
// client that opens a connection per request sends it), reads the
// response, closes the connection, and starts again, for -d. wrk cannot do
// this: it reconnects only when the server closes, which a "Connection:
// close" request asks for, and a request carrying one is one a proxy
// treats differently (edge's fast path does not take it).
//
// It prints what proxy.sh reads of wrk's output, in wrk's words: the
// requests done, requests/s, the 50th and 99th latency percentiles, the
// responses that were not 2xx or 3xx, and the socket errors.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:28089", "host:port to connect to")
	path := flag.String("path", "/api/v1/items", "request target")
	host := flag.String("host", "bench.example", "Host field")
	conns := flag.Int("c", 64, "concurrent connections")
	dur := flag.Duration("d", 2*time.Second, "how long to run")
	flag.Parse()
	req := "GET " + *path + " HTTP/1.1\r\nHost: " + *host + "\r\nUser-Agent: newconn\r\n\r\n"

	type result struct {
		lat                   []time.Duration
		bad, connErr, readErr int
	}
	results := make([]result, *conns)
	stop := time.Now().Add(*dur)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			r := &results[i]
			br := bufio.NewReaderSize(nil, 4096)
			for time.Now().Before(stop) {
				t0 := time.Now()
				c, err := net.Dial("tcp", *addr)
				if err != nil {
					r.connErr++
					continue
				}
				br.Reset(c)
				if _, err := io.WriteString(c, req); err != nil {
					r.readErr++
					c.Close()
					continue
				}
				resp, err := http.ReadResponse(br, nil)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
				}
				c.Close()
				if err != nil {
					r.readErr++
					continue
				}
				r.lat = append(r.lat, time.Since(t0))
				if resp.StatusCode >= 400 {
					r.bad++
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	var lat []time.Duration
	bad, connErr, readErr := 0, 0, 0
	for _, r := range results {
		lat = append(lat, r.lat...)
		bad, connErr, readErr = bad+r.bad, connErr+r.connErr, readErr+r.readErr
	}
	if len(lat) == 0 {
		fmt.Fprintln(os.Stderr, "newconn: no request completed")
		os.Exit(1)
	}
	slices.Sort(lat)
	pct := func(p int) string {
		return fmt.Sprintf("%.3fms", float64(lat[(len(lat)-1)*p/100])/1e6)
	}
	fmt.Printf("  %d requests in %.2fs, a new connection each\n", len(lat), elapsed.Seconds())
	fmt.Printf("     50%% %s\n     99%% %s\n", pct(50), pct(99))
	if bad > 0 {
		fmt.Printf("  Non-2xx or 3xx responses: %d\n", bad)
	}
	if connErr+readErr > 0 {
		fmt.Printf("  Socket errors: connect %d, read %d, write 0, timeout 0\n", connErr, readErr)
	}
	fmt.Printf("Requests/sec: %.2f\n", float64(len(lat))/elapsed.Seconds())
}
