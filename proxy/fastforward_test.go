package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/origin"
	"github.com/edgerate/edge/rules"
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
func (c *bufClient) Left() bool  { return false }

// relayRaw relays raw, an origin's answer to a GET (or HEAD), as the fast
// forward does, and returns what the client receives, and whether its
// connection closes after.
func relayRaw(raw []byte, head bool) ([]byte, bool, error) {
	p := &Proxy{log: slog.New(slog.DiscardHandler)}
	d := &domain{fastFwd: &fastOrigin{log: newErrorLog(p.log, "fuzz", nil, nil)}}
	oc := origin.NewConn(&byteConn{r: bytes.NewReader(raw)}, origin.Settings{})
	c := &bufClient{}
	method := http.MethodGet
	if head {
		method = http.MethodHead
	}
	r := relay{p: p, d: d, h: &Head{Method: []byte(method), Target: []byte("/")}, client: c, isHEAD: head, br: oc.Reader()}
	resp, err := oc.ReadResponse(head, r.interim)
	if err != nil {
		c.Write(r.out)
		return c.Bytes(), c.closed, err
	}
	var buf [32 << 10]byte
	r.respond(resp, buf[:])
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

// goneClient is a client whose connection is gone: every write fails.
type goneClient struct{ writes int }

func (c *goneClient) Write(b []byte) (int, error) { c.writes++; return 0, net.ErrClosed }
func (c *goneClient) Forwarding()                 {}
func (c *goneClient) Left() bool                  { return true }
func (c *goneClient) CloseAfter()                 {}

// TestFastForwardGoneTrailerCost: a client gone mid-body is charged no
// cost the origin reports in the trailers, as on the slow path, where the
// transport drops a body closed before its end without reading them; the
// fast forward's body would read them while it is closed.
func TestFastForwardGoneTrailerCost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("x", 40<<10) // more than the fast forward holds before it writes
	answer := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTrailer: X-Cost\r\nTransfer-Encoding: chunked\r\n\r\n" +
		strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\nX-Cost: 5\r\n\r\n"
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					if _, err := io.WriteString(c, answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	table, err := rules.Compile(rules.Config{
		Origin: "http://" + ln.Addr().String(),
		Domains: []rules.DomainConfig{{
			Hosts: []string{"api.example.com"},
			Rules: []rules.RuleConfig{{Name: "units", Limit: 6, Period: time.Minute, ResponseCostHeader: "X-Cost"}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	p, err := New(Options{Table: table, Now: func() time.Time { return now }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	raw := "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
	gone := &goneClient{}
	h := fastHead(raw)
	h.Client = gone
	if _, ok := p.Answer(h, nil); !ok || gone.writes == 0 {
		t.Fatalf("the fast forward did not take the request (%v) or wrote nothing (%d writes)", ok, gone.writes)
	}
	// Charged 1 (the request), not 6: the next request is allowed, and
	// its own answer, complete, charges the 5.
	c := &bufClient{}
	h = fastHead(raw)
	h.Client = c
	out, ok := p.Answer(h, nil)
	c.Write(out)
	if !ok || !strings.HasPrefix(c.String(), "HTTP/1.1 200 OK\r\n") {
		t.Fatalf("after a client gone: %v, %.40q; want 200", ok, c.String())
	}
	if out, ok := p.Answer(fastHead(raw), nil); !ok || !strings.HasPrefix(string(out), "HTTP/1.1 429 ") {
		t.Errorf("after a complete answer reporting 5: %v, %.40q; want 429", ok, out)
	}
}

// TestFastForwardGoneEndless: a client gone in the middle of an endless
// body ends the forward, as ReverseProxy's abort does; the origin's body
// is not read to an end that never comes.
func TestFastForwardGoneEndless(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	defer ln.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		chunk := "8000\r\n" + strings.Repeat("x", 0x8000) + "\r\n"
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := io.WriteString(c, chunk); err != nil {
				return // edge closed the connection
			}
		}
	}()
	table, err := rules.Compile(rules.Config{
		Origin:  "http://" + ln.Addr().String(),
		Domains: []rules.DomainConfig{{Hosts: []string{"api.example.com"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Table: table, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h := fastHead("GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	gone := &goneClient{}
	h.Client = gone
	done := make(chan bool)
	go func() {
		_, ok := p.Answer(h, nil)
		done <- ok
	}()
	select {
	case ok := <-done:
		if !ok || gone.writes == 0 {
			t.Errorf("Answer: %v, %d writes; want the forward taken and written to", ok, gone.writes)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the forward to a gone client did not end")
	}
}

// TestAppendHeaderAsWriteSubset checks the fast forward's own writing of
// a header against net/http's Header.WriteSubset.
func TestAppendHeaderAsWriteSubset(t *testing.T) {
	tests := []struct {
		name    string
		h       http.Header
		exclude fieldSet
	}{
		{"empty", http.Header{}, nil},
		{"sorted", http.Header{"Content-Type": {"text/plain"}, "A": {"1"}, "Z-Last": {"z"}, "Date": {"x"}}, nil},
		{"several values", http.Header{"Set-Cookie": {"a=1", "b=2", ""}, "Vary": {"Accept"}}, nil},
		{"newlines and spaces", http.Header{"X": {" a\r\nb \t", "\n", "c\rd"}}, nil},
		{"invalid names", http.Header{"Bad Name": {"x"}, "": {"y"}, "Ünicode": {"z"}, "Ok": {"v"}}, nil},
		{"excluded", http.Header{"Content-Length": {"3"}, "Transfer-Encoding": {"chunked"}, "X": {"1"}}, excludedNoBody},
		{"excluded for a 304", http.Header{"Content-Type": {"a/b"}, "Content-Length": {"3"}, "Etag": {"x"}}, excluded304},
		{"many", func() http.Header {
			h := http.Header{}
			for i := range 40 {
				h.Add(fmt.Sprintf("X-%02d", 39-i), fmt.Sprint(i))
			}
			return h
		}(), nil},
	}
	for _, tt := range tests {
		var want bytes.Buffer
		exclude := map[string]bool{}
		for _, k := range tt.exclude {
			exclude[k] = true
		}
		if err := tt.h.WriteSubset(&want, exclude); err != nil {
			t.Fatal(err)
		}
		if got := appendHeader([]byte("prefix"), tt.h, tt.exclude); string(got) != "prefix"+want.String() {
			t.Errorf("%s: appendHeader wrote\n%q\nWriteSubset\n%q", tt.name, got, want.String())
		}
	}
}

// BenchmarkFastRelay measures the fast forward's response side alone: an
// origin's answer, at hand in memory, read and framed for the client.
func BenchmarkFastRelay(b *testing.B) {
	chunks := func(n, size int) string {
		var s strings.Builder
		for range n {
			fmt.Fprintf(&s, "%x\r\n%s\r\n", size, strings.Repeat("y", size))
		}
		return s.String() + "0\r\n\r\n"
	}
	cases := []struct{ name, raw string }{
		{"length/small", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"},
		{"length/100KB", "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 100000)},
		{"length/sniffed", "HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n<html>hi</html>"},
		{"chunked/small", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"},
		{"chunked/3x1000", "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks(3, 1000)},
		{"chunked/trailer", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 42\r\n\r\n"},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			p := &Proxy{log: slog.New(slog.DiscardHandler)}
			d := &domain{fastFwd: &fastOrigin{log: newErrorLog(p.log, "bench", nil, nil)}}
			raw := []byte(tc.raw)
			bc := &byteConn{r: bytes.NewReader(raw)}
			oc := origin.NewConn(bc, origin.Settings{})
			h := &Head{Method: []byte(http.MethodGet), Target: []byte("/")}
			var buf [32 << 10]byte
			var out []byte
			c := &bufClient{}
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				bc.r.Reset(raw) // the last answer was read whole: nothing is left buffered
				c.Reset()
				r := relay{p: p, d: d, h: h, client: c, br: oc.Reader(), out: out[:0]}
				resp, err := oc.ReadResponse(false, r.interim)
				if err != nil {
					b.Fatal(err)
				}
				if !r.respond(resp, buf[:]) {
					b.Fatal("the relay failed")
				}
				r.flush()
				out = r.out
			}
		})
	}
}

// TestRelayFraming: the fast forward keeps the origin's Content-Length,
// chunks a body of unknown length (an empty one too), sniffs a missing
// Content-Type, writes no body for HEAD and closes the client's
// connection after a body that broke off.
func TestRelayFraming(t *testing.T) {
	tests := []struct {
		name, raw  string
		head       bool
		want       []string // in the client's bytes
		dont       []string // not in them
		wantClosed bool
	}{
		{"length kept", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
			false, []string{"Content-Length: 5\r\n", "\r\n\r\nhello"}, []string{"Transfer-Encoding"}, false},
		{"chunked kept", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			false, []string{"Transfer-Encoding: chunked\r\n", "\r\n\r\n5\r\nhello\r\n0\r\n\r\n"}, []string{"Content-Length"}, false},
		{"empty chunked", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			false, []string{"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"}, []string{"Content-Length"}, false},
		{"close-delimited chunked and sniffed", "HTTP/1.1 200 OK\r\n\r\n<html>until the end</html>",
			false, []string{"Content-Type: text/html; charset=utf-8\r\n", "Transfer-Encoding: chunked\r\n"}, nil, false},
		{"length sniffed", "HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n<html>hi</html>",
			false, []string{"Content-Type: text/html; charset=utf-8\r\n", "Content-Length: 15\r\n"}, nil, false},
		{"trailers", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 42\r\n\r\n",
			false, []string{"Trailer: X-Sum\r\n", "0\r\nX-Sum: 42\r\n\r\n"}, nil, false},
		{"head", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n",
			true, []string{"Content-Length: 5\r\n"}, []string{"hello", "Transfer-Encoding"}, false},
		{"broken off", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\nok",
			false, nil, nil, true},
	}
	for _, tt := range tests {
		out, closed, err := relayRaw([]byte(tt.raw), tt.head)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		for _, w := range tt.want {
			if !bytes.Contains(out, []byte(w)) {
				t.Errorf("%s: got %q, want %q in it", tt.name, out, w)
			}
		}
		for _, d := range tt.dont {
			if bytes.Contains(out, []byte(d)) {
				t.Errorf("%s: got %q, want no %q in it", tt.name, out, d)
			}
		}
		if closed != tt.wantClosed {
			t.Errorf("%s: connection closed %v, want %v", tt.name, closed, tt.wantClosed)
		}
	}
}
