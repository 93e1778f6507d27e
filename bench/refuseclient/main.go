// Command refuseclient sends n requests over conns keep-alive connections, one at a time
// on each, and checks every status.
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
	flag.Parse()
	req := "GET /api/v1/items HTTP/1.1\r\nHost: " + *host + "\r\n\r\n"
	var wg sync.WaitGroup
	counts := make([]map[int]int, *conns)
	for i := 0; i < *conns; i++ {
		counts[i] = map[int]int{}
		wg.Add(1)
		go func(i, m int) {
			defer wg.Done()
			c, err := net.Dial("tcp", *addr)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for j := 0; j < m; j++ {
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
