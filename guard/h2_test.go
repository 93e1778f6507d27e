package guard

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/internal/wire"
)

// h2cServer is fastServer with the PriorKnowledge stage: the connections
// it hands off come out of the returned Handoffs.
func h2cServer(t *testing.T) (addr string, h *Handoffs) {
	t.Helper()
	h = NewHandoffs(nil)
	t.Cleanup(func() { h.Close() })
	addr, _ = fastServer(t, ListenerOptions{Stages: []Stage{PriorKnowledge(h.Handoff)}}, &http.Server{ReadHeaderTimeout: 5 * time.Second})
	return addr, h
}

// accept returns the next connection h is handed, within the test's time.
func accept(t *testing.T, h *Handoffs) net.Conn {
	t.Helper()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := h.Accept()
		if err != nil {
			close(got)
			return
		}
		got <- c
	}()
	select {
	case c, ok := <-got:
		if !ok {
			t.Fatal("Accept failed")
		}
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(10 * time.Second):
		h.Close()
		t.Fatal("no connection handed off")
		return nil
	}
}

// TestPriorKnowledge: on a plain socket, a connection that opens with the
// HTTP/2 preface is handed off with every byte the client sent, in
// whatever pieces it sent them; any other is the Listener's, its requests
// whole, fast path and net/http alike, even one whose first bytes are
// those of the preface.
func TestPriorKnowledge(t *testing.T) {
	addr, h := h2cServer(t)
	c := dial(t, addr)
	want := Preface + "\x00\x00\x00\x04\x00\x00\x00\x00\x00"
	if _, err := io.WriteString(c, want); err != nil {
		t.Fatal(err)
	}
	got := accept(t, h)
	buf := make([]byte, len(want))
	got.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(got, buf); err != nil || string(buf) != want {
		t.Errorf("handed off, read %q (%v), want %q", buf, err, want)
	}
	if _, err := io.WriteString(got, "from h2"); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 7)
	if _, err := io.ReadFull(c, back); err != nil || string(back) != "from h2" {
		t.Errorf("the client read %q (%v) of the new owner's bytes", back, err)
	}
	for _, req := range []string{
		hostile.Get("/r"),
		hostile.Get("/slow"),
		hostile.Req("POST /slow HTTP/1.1", hostile.HostAPI, "Content-Length: 3") + "abc",
	} {
		c := dial(t, addr)
		code, _ := roundTrip(t, c, bufio.NewReader(c), req)
		if want := map[bool]int{true: 429, false: 200}[req == hostile.Get("/r")]; code != want {
			t.Errorf("%q: status %d, want %d", req, code, want)
		}
	}
	// The preface's first bytes, then a request line the Listener
	// refuses, as it refuses "PRI" without the stage.
	c = dial(t, addr)
	if code, _ := roundTrip(t, c, bufio.NewReader(c), "PRI * HTTP/1.1\r\nHost: a\r\n\r\n"); code != 400 {
		t.Errorf("a PRI request that is not the preface: status %d, want 400", code)
	}
}

// TestPriorKnowledgePieces: the stage reads the preface in whatever
// pieces it comes, and replays every byte it read, handed off or not.
func TestPriorKnowledgePieces(t *testing.T) {
	tests := []struct {
		in          string
		wantHandoff bool
	}{
		{Preface + "rest", true},
		{Preface, true},
		{"PRI * HTTP/1.1\r\n\r\n", false},
		{"GET / HTTP/1.1\r\n\r\n", false},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1, 5, 4096} {
			sc := &frameScript{in: []byte(tt.in), chunk: chunk}
			res, err := PriorKnowledge(func(net.Conn) {})(sc)
			if err != nil || (res.Handoff != nil) != tt.wantHandoff || res.Conn == nil {
				t.Errorf("%q in pieces of %d: result %+v, err %v; want handed off %v", tt.in, chunk, res, err, tt.wantHandoff)
				continue
			}
			if got, err := io.ReadAll(res.Conn); string(got) != tt.in || err != nil {
				t.Errorf("%q in pieces of %d: read again %q (%v)", tt.in, chunk, got, err)
			}
		}
	}
}

// TestPriorKnowledgeClientLeaves: a connection that ends in its first
// bytes is refused, whether it sent nothing or part of the preface.
func TestPriorKnowledgeClientLeaves(t *testing.T) {
	for _, sent := range []string{"", "P", "PRI * HTTP/2.0\r\n"} {
		stage := PriorKnowledge(func(net.Conn) { t.Error("handed off") })
		client, server := net.Pipe()
		go func() {
			io.WriteString(client, sent)
			client.Close()
		}()
		res, err := stage(server)
		server.Close()
		if err == nil || res.Handoff != nil {
			t.Errorf("after %q: result %+v, err %v; want an error", sent, res, err)
		}
	}
}

// TestALPN: after the handshake, a connection whose client chose h2 is
// handed off, and one that chose http/1.1 or nothing is not, nor is one
// without TLS.
func TestALPN(t *testing.T) {
	handoff := func(net.Conn) {}
	stage := ALPN("h2", handoff)
	for _, tt := range []struct {
		name string
		c    net.Conn
		want bool
	}{
		{"h2", secureConn{proto: "h2"}, true},
		{"http/1.1", secureConn{proto: "http/1.1"}, false},
		{"none", secureConn{}, false},
		{"plain", &addrConn{}, false},
	} {
		res, err := stage(tt.c)
		if err != nil || (res.Handoff != nil) != tt.want || res.Conn != nil {
			t.Errorf("%s: result %+v, err %v; want handed off %v", tt.name, res, err, tt.want)
		}
	}
}

// secureConn is a connection whose client chose proto by ALPN.
type secureConn struct {
	net.Conn
	proto string
}

func (c secureConn) TLS() *wire.TLS {
	return &wire.TLS{State: tls.ConnectionState{NegotiatedProtocol: c.proto}}
}

// TestHandoffs: Accept returns what Handoff gives, in order; after Close,
// Accept fails with net.ErrClosed and Handoff closes its connection.
func TestHandoffs(t *testing.T) {
	h := NewHandoffs(&net.TCPAddr{Port: 1})
	if h.Addr().String() != ":1" {
		t.Errorf("Addr %v", h.Addr())
	}
	a, b := net.Pipe()
	defer b.Close()
	go h.Handoff(a)
	if c, err := h.Accept(); err != nil || c != a {
		t.Fatalf("Accept: %v, %v", c, err)
	}
	h.Close()
	if _, err := h.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	c, d := net.Pipe()
	h.Handoff(c)
	if _, err := d.Write([]byte("x")); err == nil {
		t.Error("the connection handed off after Close is open")
	}
	h.Close() // twice is fine
}
