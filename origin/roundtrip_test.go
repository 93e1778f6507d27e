package origin

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sendString returns a SendBody that sends s as it is.
func sendString(s string) SendBody {
	return func(w io.Writer, _ []byte) error {
		_, err := io.WriteString(w, s)
		return err
	}
}

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
	pools := NewPools(Settings{})
	pool := pools.Pool(ln.Addr().String(), nil)
	defer pools.Close()
	buf := make([]byte, 32<<10)
	send := func(head string, body SendBody, replay bool) error {
		oc, resp, err := pool.RoundTrip(&Request{Head: []byte(head), Replayable: replay, Timeout: time.Second}, body, nil, time.Now(), buf)
		if err != nil {
			return err
		}
		resp.Body.Close()
		pool.Put(oc, time.Now())
		return nil
	}
	if err := send("GET /close HTTP/1.1\r\nHost: a\r\n\r\n", nil, true); err != nil {
		t.Fatal(err)
	}
	<-got
	<-closed
	if len(pool.idle) != 1 {
		t.Fatalf("%d idle connections, want the one the origin closed", len(pool.idle))
	}
	if err := send("POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", sendString("hello"), false); err != nil {
		t.Fatalf("POST after the origin closed the pooled connection: %v", err)
	}
	if g := <-got; g != "POST /p hello" {
		t.Errorf("origin got %q, want %q", g, "POST /p hello")
	}
}
