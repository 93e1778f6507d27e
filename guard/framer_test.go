package guard

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/hostile"
)

// scriptConn is a net.Conn whose reads return data in pieces of at most
// step bytes, then io.EOF; writes are discarded.
type scriptConn struct {
	net.Conn
	data []byte
	step int
}

func (c *scriptConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.step)], c.data)
	c.data = c.data[n:]
	return n, nil
}
func (c *scriptConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *scriptConn) Close() error                     { return nil }
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }
func (c *scriptConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *scriptConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *scriptConn) CloseWrite() error                { return nil }

// readAllGuarded reads g until an error, with reads of readSize bytes, and
// returns what it read and the error (nil for io.EOF).
func readAllGuarded(g *guardConn, readSize int) ([]byte, error) {
	var out []byte
	p := make([]byte, readSize)
	for {
		n, err := g.Read(p)
		out = append(out, p[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// screenStream runs data through a guardConn and returns what it
// delivers, its final error, the message ends it recorded and its framer.
func screenStream(data []byte, step, readSize, maxHead int) ([]byte, error, []int64, *framer) {
	g := &guardConn{Conn: &scriptConn{data: data, step: step}, f: framer{maxHead: maxHead}}
	var ends []int64
	g.f.ends = &ends
	out, err := readAllGuarded(g, readSize)
	return out, err, ends, &g.f
}

func TestFramerStreams(t *testing.T) {
	valid := hostile.Get("/a") +
		hostile.Req("POST /b HTTP/1.1", hostile.HostAPI, "Content-Length: 5") + "hello" +
		hostile.Req("POST /c HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked") + "5;x=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n" +
		hostile.Get("/d")
	tests := []struct {
		name   string
		in     string
		want   string // delivered bytes
		ends   int    // messages completed
		broken bool
	}{
		{"valid pipeline", valid, valid, 4, false},
		{"TE+CL after valid", hostile.Get("/") + hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked", "Content-Length: 3") + "abc",
			hostile.Get("/") + rejectLine, 1, false},
		{"garbage request line", hostile.Get("/") + "\x16\x03\x01\n", hostile.Get("/") + rejectLine, 1, false},
		{"bad chunk", hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked") + "3\r\nabcX\r\n",
			hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked") + "3\r\nabc", 0, true},
		{"bare LF chunk line", hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked") + "3\nabc",
			hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked"), 0, true},
		{"head over the limit passes through", hostile.Get("/", "X: "+strings.Repeat("a", 300)) + "\x00garbage",
			hostile.Get("/", "X: "+strings.Repeat("a", 300)) + "\x00garbage", 0, false},
		{"unsupported coding passes through", hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: gzip") + "\x00anything",
			hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: gzip") + "\x00anything", 0, false},
	}
	for _, tt := range tests {
		for _, step := range []int{1, 7, 1 << 20} {
			for _, readSize := range []int{1, 5, 4096} {
				maxHead := 4096
				if strings.HasPrefix(tt.name, "head over") {
					maxHead = 200
				}
				out, err, ends, _ := screenStream([]byte(tt.in), step, readSize, maxHead)
				var fe *errFraming
				if got := errors.As(err, &fe); got != tt.broken || (err != nil && !got) {
					t.Errorf("%s (step %d, read %d): err = %v, want broken %v", tt.name, step, readSize, err, tt.broken)
				}
				if string(out) != tt.want {
					t.Errorf("%s (step %d, read %d): delivered\n%q\nwant\n%q", tt.name, step, readSize, out, tt.want)
				}
				if len(ends) != tt.ends {
					t.Errorf("%s (step %d, read %d): %d messages ended, want %d", tt.name, step, readSize, len(ends), tt.ends)
				}
			}
		}
	}
}

func TestFramerUpgradeVerdict(t *testing.T) {
	up := hostile.Get("/ws", "Connection: Upgrade", "Upgrade: websocket")
	for _, tt := range []struct {
		name     string
		response string
		next     string
		want     string // delivered after the one early byte
	}{
		{"101: the rest passes", "HTTP/1.1 101 Switching Protocols\r\n\r\n", "\x81\x05hello frames", "\x81\x05hello frames"[1:]},
		{"100 then 101", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching Protocols\r\n\r\n", "\x81\x05hello", "\x81\x05hello"[1:]},
		{"refused: next request checked", "HTTP/1.1 400 Bad Request\r\n\r\n", hostile.Get("/"), hostile.Get("/")[1:]},
		{"refused: bad next request rejected", "HTTP/1.1 200 OK\r\n\r\n",
			hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked", "Content-Length: 1"), rejectLine},
	} {
		f := &framer{maxHead: 4096}
		f.feed([]byte(up + tt.next))
		p := make([]byte, 4096)
		if !f.step() || f.deliver(p) != len(up) || f.st != stUpgradePending {
			t.Fatalf("%s: upgrade head not delivered whole (state %d)", tt.name, f.st)
		}
		// net/http's background read takes one byte while the handler runs.
		if f.step() || f.upgradeRead(p[:1]) != 1 || p[0] != tt.next[0] {
			t.Fatalf("%s: early byte not delivered", tt.name)
		}
		// The response arrives in two writes.
		f.sawResponse([]byte(tt.response[:5]))
		f.sawResponse([]byte(tt.response[5:]))
		var out []byte
		for range 10 {
			for f.step() {
			}
			n := f.deliver(p)
			if n == 0 {
				break
			}
			out = append(out, p[:n]...)
		}
		if string(out) != tt.want {
			t.Errorf("%s: delivered %q, want %q", tt.name, out, tt.want)
		}
	}
}

// FuzzFraming checks the Listener's framer against net/http on arbitrary
// request streams: whatever it delivers is the input unchanged up to a
// point, then at most the replacement line; and every message it lets
// through ends exactly where net/http's own reader ends it, so the two
// can never disagree about where a request starts (which is what request
// smuggling needs).
func FuzzFraming(f *testing.F) {
	for _, c := range hostile.Corpus() {
		f.Add([]byte(c.Raw), uint8(3))
	}
	f.Add([]byte(hostile.Get("/")+hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked")+"1\r\na\r\n0\r\n\r\n"+hostile.Get("/")), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		if len(data) > 64<<10 {
			return
		}
		out, err, ends, fr := screenStream(data, int(step)+1, 512, 8<<10)
		var fe *errFraming
		if err != nil && !errors.As(err, &fe) {
			t.Fatalf("unexpected error %v", err)
		}
		// Delivered bytes are a prefix of the input, plus the replacement
		// line when a head was rejected.
		rejected := fr.st == stRejected
		body := out
		if rejected {
			if !bytes.HasSuffix(out, []byte(rejectLine)) {
				t.Fatalf("rejected stream does not end with the replacement: %q", out)
			}
			body = out[:len(out)-len(rejectLine)]
		}
		if !bytes.HasPrefix(data, body) {
			t.Fatalf("delivered bytes are not a prefix of the input:\n%q\nof\n%q", body, data)
		}
		// net/http reads the messages the framer let through with the same
		// boundaries.
		src := bytes.NewReader(body)
		br := bufio.NewReader(src)
		for i, end := range ends {
			r, err := http.ReadRequest(br)
			if err != nil {
				return // net/http refuses what the framer passed on; it closes there
			}
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				return
			}
			if len(r.TransferEncoding) > 0 && r.ProtoMajor == 1 && r.ProtoMinor == 0 {
				t.Fatalf("message %d: Transfer-Encoding in HTTP/1.0 let through", i)
			}
			if got := int64(len(body) - src.Len() - br.Buffered()); got != end {
				t.Fatalf("message %d: net/http ends it at %d, the framer at %d\n%q", i, got, end, body)
			}
		}
	})
}
