package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// stallConfig fronts ORIGIN with a domain whose requests hold a slot of a
// concurrency rule, streaming their bodies (BUFFERING), with a short
// timeouts.upstream.
const stallConfig = `
origin: ORIGIN
max_keys: 1000
timeouts: {upstream: 500ms} # stallTimeout
domains:
  - name: warm
    hosts: [warm.example.com]
    origin: WARM
  - name: up
    hosts: [up.example.com]
    request_buffering: BUFFERING
    rules:
      - {name: slots, algorithm: concurrency, limit: 2, key: [host]}
`

const stallTimeout = 500 * time.Millisecond

// startDeafOrigin accepts connections and never reads from them.
func startDeafOrigin(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// TestOriginThatNeverReads: a request body to an origin that accepts and
// never reads ends in a 504 once the origin has taken nothing for
// timeouts.upstream, on both paths, and the 504 reaches the client, who is
// still sending; the slot and the in-flight count come back.
func TestOriginThatNeverReads(t *testing.T) {
	const size = 64 << 20 // more than the socket buffers on the way hold
	for _, buffering := range []bool{true, false} {
		for _, fast := range []bool{true, false} {
			t.Run(fmt.Sprintf("request_buffering=%v/fastpath=%v", buffering, fast), func(t *testing.T) {
				t.Parallel()
				origin, warm := startDeafOrigin(t), startRawOrigin(t)
				cfg := strings.NewReplacer("ORIGIN", "http://"+origin, "WARM", "http://"+warm.ln.Addr().String(),
					"BUFFERING", fmt.Sprint(buffering)).Replace(stallConfig)
				ds := startConfig(t, cfg, fast)
				c, br := warmConn(t, ds) // to another origin: the fast path takes the upload after it
				answered := ds.answered.Load()
				go func() {
					fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: up.example.com\r\nContent-Length: %d\r\n\r\n", size)
					chunk := make([]byte, 64<<10)
					for sent := 0; sent < size; sent += len(chunk) {
						if _, err := c.Write(chunk); err != nil {
							return
						}
					}
				}()
				start := time.Now()
				// The client reads late, when the 504 has long been sent:
				// a reset after it would have destroyed it by then.
				time.Sleep(3 * stallTimeout)
				resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
				if err != nil {
					t.Fatalf("after %v: no response: %v", time.Since(start).Round(time.Millisecond), err)
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusGatewayTimeout {
					t.Errorf("status %d (%q), want 504", resp.StatusCode, body)
				}
				if d := time.Since(start); d > 10*time.Second {
					t.Errorf("answered after %v", d)
				}
				if fast && ds.answered.Load() == answered {
					t.Errorf("the fast path did not forward the upload")
				}
				deadline := time.Now().Add(5 * time.Second)
				for {
					m := metricsText(t, ds.reg)
					if strings.Contains(m, `edge_concurrency_slots_in_use{domain="up",rule="slots"} 0`) &&
						strings.Contains(m, "edge_upstream_requests_in_flight 0") {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("slots or in-flight count not given back:\n%s", grepLines(m, "in_"))
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
		}
	}
}

// TestSlowUploadNotCut: a client that sends its body slowly, to an origin
// that reads it as it comes, is not cut by timeouts.upstream: the clock
// runs only while the origin takes no bytes.
func TestSlowUploadNotCut(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fastpath=%v", fast), func(t *testing.T) {
			t.Parallel()
			origin := startRawOrigin(t)
			cfg := strings.NewReplacer("ORIGIN", "http://"+origin.ln.Addr().String(), "WARM", "http://"+origin.ln.Addr().String(),
				"BUFFERING", "false").Replace(stallConfig)
			ds := startConfig(t, cfg, fast)
			c, br := warmConn(t, ds)
			answered := ds.answered.Load()
			const pieces = 12 // 1.2 s in all, over twice timeouts.upstream
			fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: up.example.com\r\nContent-Length: %d\r\n\r\n", pieces*10)
			for range pieces {
				time.Sleep(100 * time.Millisecond)
				io.WriteString(c, "0123456789")
			}
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
			if err != nil {
				t.Fatal(err)
			}
			if fast && ds.answered.Load() == answered {
				t.Errorf("the fast path did not forward the upload")
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || string(body) != "yes" {
				t.Errorf("status %d, body %q; want 200 yes", resp.StatusCode, body)
			}
		})
	}
}

// warmConn dials ds and sends the connection's first request, to
// warm.example.com, and waits until net/http has said the connection is
// idle (if net/http served it): the fast path takes the requests after it.
// The connection closes when the test ends.
func warmConn(t *testing.T, ds *diffServer) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", ds.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	for len(ds.idle) > 0 {
		<-ds.idle
	}
	answered := ds.answered.Load()
	io.WriteString(c, get("warm.example.com", "/warm"))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if ds.answered.Load() == answered {
		awaitIdle(ds, time.Second)
	}
	return c, br
}
