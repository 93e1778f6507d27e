package proxy

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
)

// byteConn is an origin connection that reads from a byte slice.
type byteConn struct {
	net.Conn // nil: only Read and Close are used
	r        *bytes.Reader
}

func (c *byteConn) Read(b []byte) (int, error) { return c.r.Read(b) }
func (c *byteConn) Close() error               { return nil }

// bufClient is a ClientWriter that keeps what it is given.
type bufClient struct {
	bytes.Buffer
	closed bool
}

func (c *bufClient) CloseAfter() { c.closed = true }
func (c *bufClient) Forwarding() {}

// relayRaw relays raw, an origin's answer to a GET (or HEAD), as the fast
// forward does, and returns what the client receives, and whether its
// connection closes after.
func relayRaw(raw []byte, head bool) ([]byte, bool, error) {
	p := &Proxy{log: slog.New(slog.DiscardHandler)}
	d := &domain{ffwd: &fastOrigin{log: newErrorLog(p.log, "fuzz", nil)}}
	oc := &originConn{conn: &byteConn{r: bytes.NewReader(raw)}, limit: originHeadMax}
	oc.br = bufio.NewReaderSize(oc, originReadBuffer)
	c := &bufClient{}
	method, req := http.MethodGet, getRequest
	if head {
		method, req = http.MethodHead, headRequest
	}
	r := relay{p: p, d: d, h: &Head{Method: []byte(method), Target: []byte("/")}, client: c, isHEAD: head, br: oc.br}
	resp, err := r.readResponse(oc, req)
	if err != nil {
		c.Write(r.out)
		return c.Bytes(), c.closed, err
	}
	var buf [32 << 10]byte
	r.relay(resp, buf[:])
	c.Write(r.out)
	return c.Bytes(), c.closed, nil
}

// FuzzFastResponse feeds arbitrary origin responses to the fast forward's
// response reading and relaying: it must not panic, and whenever it
// relays a response in full (the client's connection stays open), the
// client must be able to read it back as one HTTP/1.1 response (after any
// 1xx) with the body the origin sent.
func FuzzFastResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-A\r\n\r\n5\r\nhello\r\n0\r\nX-A: 1\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nuntil the end",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: X-A\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 099 x\r\n\r\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, raw []byte, head bool) {
		out, closed, err := relayRaw(raw, head)
		if err != nil || closed {
			return
		}
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		// The body as the transport reads it.
		var wantBody []byte
		wantOK := false
		rb := bufio.NewReader(bytes.NewReader(raw))
		for {
			want, err := http.ReadResponse(rb, &http.Request{Method: method})
			if err != nil {
				break
			}
			if want.StatusCode >= 100 && want.StatusCode < 200 && want.StatusCode != 101 {
				continue
			}
			wantBody, err = io.ReadAll(want.Body)
			wantOK = err == nil
			break
		}
		br := bufio.NewReader(bytes.NewReader(out))
		var got *http.Response
		for {
			got, err = http.ReadResponse(br, &http.Request{Method: method})
			if err != nil {
				t.Fatalf("the client cannot read the relayed response %q: %v", out, err)
			}
			if got.StatusCode >= 200 || got.StatusCode < 100 {
				break
			}
		}
		body, err := io.ReadAll(got.Body)
		if err != nil {
			t.Fatalf("the client cannot read the relayed body %q: %v", out, err)
		}
		if br.Buffered() != 0 {
			t.Fatalf("bytes after the relayed response in %q", out)
		}
		if head && len(body) != 0 {
			t.Fatalf("a body relayed for HEAD: %q", out)
		}
		if !head && wantOK && got.StatusCode != http.StatusBadGateway && !bytes.Equal(body, wantBody) {
			t.Fatalf("relayed body %q, the origin sent %q", body, wantBody)
		}
	})
}
