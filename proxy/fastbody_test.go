package proxy

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestFastForwardChecksPooled: a pooled origin connection that the origin
// closed while it was idle is not used for a request the transport would
// not send again (a POST with a body): the transport's reader would have
// seen the close, and the request goes on a new connection.
func TestFastForwardChecksPooled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan struct{}, 1)
	got := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					b := new(strings.Builder)
					_, _ = bufio.NewReader(req.Body).WriteTo(b)
					got <- req.Method + " " + req.URL.Path + " " + b.String()
					_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
					if req.URL.Path == "/close" {
						c.Close()
						closed <- struct{}{}
						return
					}
				}
			}()
		}
	}()
	var pools originPools
	pool := pools.get(ln.Addr().String())
	defer pools.close()
	var r relay
	buf := make([]byte, 32<<10)
	send := func(head string, fb *fastBody, replay bool) error {
		oc, resp, err := r.roundTrip(pool, []byte(head), getRequest, time.Second, time.Now(), fb, replay, buf)
		if err != nil {
			return err
		}
		resp.Body.Close()
		pool.put(oc, time.Now())
		return nil
	}
	if err := send("GET /close HTTP/1.1\r\nHost: a\r\n\r\n", &fastBody{}, true); err != nil {
		t.Fatal(err)
	}
	<-got
	<-closed
	if len(pool.idle) != 1 {
		t.Fatalf("%d idle connections, want the one the origin closed", len(pool.idle))
	}
	fb := &fastBody{r: strings.NewReader("hello"), size: 5}
	if err := send("POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", fb, false); err != nil {
		t.Fatalf("POST after the origin closed the pooled connection: %v", err)
	}
	if g := <-got; g != "POST /p hello" {
		t.Errorf("origin got %q, want %q", g, "POST /p hello")
	}
}
