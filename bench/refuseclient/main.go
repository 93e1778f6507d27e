// Command refuseclient sends n requests over conns keep-alive connections, one at a time
// on each, and checks every status. With -new each request has a connection of its own,
// closed by the client once the response is read.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:38089", "")
	n := flag.Int("n", 1000, "")
	conns := flag.Int("c", 4, "")
	host := flag.String("host", "bench.example", "")
	fresh := flag.Bool("new", false, "a new connection per request")
	flag.Parse()
	req := "GET /api/v1/items HTTP/1.1\r\nHost: " + *host + "\r\n\r\n"
	var wg sync.WaitGroup
	counts := make([]map[int]int, *conns)
	for i := 0; i < *conns; i++ {
		counts[i] = map[int]int{}
		wg.Add(1)
		go func(i, m int) {
			defer wg.Done()
			dial := func() (net.Conn, *bufio.Reader) {
				c, err := net.Dial("tcp", *addr)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				return c, bufio.NewReader(c)
			}
			c, br := dial()
			defer func() { c.Close() }()
			for j := 0; j < m; j++ {
				if *fresh && j > 0 {
					c.Close()
					c, br = dial()
				}
				io.WriteString(c, req)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				io.Copy(io.Discard, resp.Body)
				counts[i][resp.StatusCode]++
			}
		}(i, *n / *conns)
	}
	wg.Wait()
	total := map[int]int{}
	for _, m := range counts {
		for k, v := range m {
			total[k] += v
		}
	}
	fmt.Println(total)
}
