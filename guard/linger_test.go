package guard

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// refusalBody is the body of the linger test's refusal: longer than the
// client's receive buffer, so that part of the refusal still waits in the
// server's send queue when it closes (on loopback, what was sent already
// reaches the client before a reset does).
var refusalBody = strings.Repeat("too large\n", 3<<10)

// TestFastPathLingersAfterUnreadBody: when the fast path refuses a request
// without reading its body and closes the connection, it shuts its write
// side and drains for a while before the close, as for a rejected head: a
// client that sends its whole body before it reads gets the refusal whole,
// not a reset that destroyed it.
func TestFastPathLingersAfterUnreadBody(t *testing.T) {
	const bodySize = 4 << 20
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln, ListenerOptions{Answer: func(r *Request, out []byte) ([]byte, bool) {
		r.Client.CloseAfter()
		out = append(out, "HTTP/1.1 413 Request Entity Too Large\r\nConnection: close\r\nContent-Length: "...)
		out = strconv.AppendInt(out, int64(len(refusalBody)), 10)
		return append(append(out, "\r\n\r\n"...), refusalBody...), true
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
	// A small receive buffer, set before the handshake so that the window
	// the client offers is small from the start.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	head := "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: " + strconv.Itoa(bodySize) + "\r\n\r\n"
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	// The whole body, before reading anything: the writes fail once the
	// server has closed.
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for sent := 0; sent < bodySize; sent += len(chunk) {
		if _, err := c.Write(chunk); err != nil {
			t.Logf("write after %d body bytes: %v", sent, err)
			break
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the refusal: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || string(b) != refusalBody || err != nil {
		t.Fatalf("got %d, %d bytes of %d (%v), want the whole 413", resp.StatusCode, len(b), len(refusalBody), err)
	}
}
