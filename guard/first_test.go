package guard

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
)

// TestFirstStageNeverReachesNetHTTP: a connection whose requests the fast
// path answers, and that then closes, is never handed to net/http; one
// whose request it declines is, with that request served by net/http on
// the same connection.
func TestFirstStageNeverReachesNetHTTP(t *testing.T) {
	var handed atomic.Int64
	addr, _ := fastServer(t, ListenerOptions{}, &http.Server{ConnState: func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			handed.Add(1)
		}
	}})
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		for range 2 {
			if code, body := roundTrip(t, c, br, "GET /r HTTP/1.1\r\nHost: a\r\n\r\n"); code != 429 || body != "" {
				t.Fatalf("fast answer: %d %q", code, body)
			}
		}
		c.Close()
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	if code, body := roundTrip(t, c, br, "GET /r HTTP/1.1\r\nHost: a\r\n\r\n"); code != 429 || body != "" {
		t.Fatalf("fast answer: %d %q", code, body)
	}
	if code, body := roundTrip(t, c, br, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n"); code != 200 || body != "slow" {
		t.Fatalf("net/http's answer: %d %q", code, body)
	}
	// net/http reports the connection idle (ConnState) only after its
	// response is on its way, so a request sent at once may still go to
	// net/http (200); the next ones are offered to the fast path again.
	wait.For(t, 5*time.Second, "the fast path's 429 after net/http served one", func() bool {
		code, _ := roundTrip(t, c, br, "GET /r HTTP/1.1\r\nHost: a\r\n\r\n")
		return code == 429
	})
	if n := handed.Load(); n != 1 {
		t.Errorf("net/http was handed %d connections, want 1 (the one with a declined request)", n)
	}
}

// TestFirstStageStallsNoOther: a connection whose client sends nothing,
// or half a head, holds its own first stage only: other connections are
// answered meanwhile, by the fast path and by net/http.
func TestFirstStageStallsNoOther(t *testing.T) {
	addr, _ := fastServer(t, ListenerOptions{}, &http.Server{ReadHeaderTimeout: time.Minute})
	for _, stall := range []string{"", "GET /r HTTP/1.1\r\nHo"} {
		s, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if stall != "" {
			s.Write([]byte(stall))
		}
	}
	for _, req := range []string{"GET /r HTTP/1.1\r\nHost: a\r\n\r\n", "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if code, _ := roundTrip(t, c, bufio.NewReader(c), req); code != 429 && code != 200 {
			t.Errorf("%q: status %d", req, code)
		}
		c.Close()
	}
}

// BenchmarkFirstStage measures a connection's whole way through the
// Listener when the fast path refuses its only request: the accept, its
// first stage (its Stages first, none or one that changes nothing), the
// answer and the close, over loopback TCP, the client included. An op is
// one connection.
//
//	go test -run='^$' -bench=FirstStage -benchmem ./guard/
func BenchmarkFirstStage(b *testing.B) {
	for _, stages := range [][]Stage{nil, {func(net.Conn) (StageResult, error) { return StageResult{}, nil }}} {
		b.Run(fmt.Sprintf("stages=%d", len(stages)), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			l := NewListener(ln, ListenerOptions{Stages: stages, Answer: func(r *Request, out []byte) ([]byte, bool) {
				return append(out, fastAnswer...), true
			}})
			srv := &http.Server{ConnState: l.ConnState, ErrorLog: discardLog, Handler: http.NotFoundHandler()}
			done := make(chan struct{})
			go func() {
				defer close(done)
				srv.Serve(l)
			}()
			defer func() {
				srv.Close()
				<-done
			}()
			req := []byte("GET /r HTTP/1.1\r\nHost: a\r\n\r\n")
			buf := make([]byte, len(fastAnswer))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil || string(buf) != fastAnswer {
					b.Fatalf("read %q, %v", buf, err)
				}
				c.Close()
			}
			b.StopTimer()
		})
	}
}
