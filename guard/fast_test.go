package guard

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/internal/wait"
)

// fastAnswer is the response the tests' hook writes.
const fastAnswer = "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\n\r\n"

// fastStream runs data through a guardConn whose Listener offers heads to
// a hook that answers those whose target starts with "/r", as a server
// that has answered everything before each read would see them. It
// returns, in stream order, every byte delivered to net/http and every
// head answered; the heads answered; what was written; the final error
// and the framer.
func fastStream(t *testing.T, data []byte, step int) (seen []byte, answered []*http.Request, written []byte, err error, f *framer) {
	var all bytes.Buffer
	var g *guardConn
	bodies := 0
	l := NewListener(nil, ListenerOptions{MaxHeaderBytes: 4096, Answer: func(r *Request, out []byte) ([]byte, bool) {
		if !bytes.HasPrefix(r.Target, []byte("/r")) {
			return out, false
		}
		all.Write(r.Raw)
		// What net/http makes of the head must be what the hook was told.
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(r.Raw)))
		if err != nil {
			t.Fatalf("net/http refuses an offered head: %v\n%q", err, r.Raw)
		}
		if req.Method != string(r.Method) || req.RequestURI != string(r.Target) || req.Host != string(r.Host) ||
			req.ProtoMajor != 1 || req.ProtoMinor != 1 || req.ContentLength != r.BodyLen ||
			(len(req.TransferEncoding) > 0) != (r.BodyLen < 0) || (r.Body == nil) != (r.BodyLen == 0) ||
			req.Close || (req.Header.Get("Expect") != "") != r.expect || req.Header.Get("Upgrade") != "" {
			t.Fatalf("offered head read differently by net/http: %+v\n%q", req, r.Raw)
		}
		if r.Body != nil {
			// The hook reads the body as net/http would have read it.
			head := string(r.Raw)
			rest := data[all.Len():]
			wreq, err := http.ReadRequest(bufio.NewReader(io.MultiReader(strings.NewReader(head), bytes.NewReader(rest))))
			if err != nil {
				t.Fatalf("net/http refuses an offered head: %v", err)
			}
			want, werr := io.ReadAll(wreq.Body)
			before := g.f.consumed
			got, err := io.ReadAll(r.Body)
			if string(r.Raw) != head {
				t.Fatalf("the head changed while its body was read: %q, was %q", r.Raw, head)
			}
			if err == nil && (werr != nil || !bytes.Equal(got, want) || fmt.Sprint(r.Body.Trailer()) != fmt.Sprint(wreq.Trailer)) {
				// (The guard may refuse what net/http reads: it is stricter.)
				t.Fatalf("body read %q, trailer %v; net/http reads %q, %v, trailer %v", got, r.Body.Trailer(), want, werr, wreq.Trailer)
			}
			all.Write(rest[:g.f.consumed-before]) // the body's bytes, for seen
			bodies++
		}
		n := 0
		for name, vs := range req.Header {
			n += len(vs)
			for _, f := range r.Fields {
				if textproto.CanonicalMIMEHeaderKey(string(f.Name)) == name && !strings.Contains(strings.Join(vs, "\x00"), string(f.Value)) {
					t.Fatalf("field %s: net/http %q, offered %q", name, vs, f.Value)
				}
			}
		}
		if r.BodyLen < 0 {
			n++ // net/http moves Transfer-Encoding out of Header, and Trailer
			for _, f := range r.Fields {
				if strings.EqualFold(string(f.Name), "trailer") {
					n++
				}
			}
		}
		if n+1 != len(r.Fields) { // and Host
			t.Fatalf("net/http has %d field values, offered %d fields", n+1, len(r.Fields))
		}
		answered = append(answered, req)
		return append(out, fastAnswer...), true
	}})
	sc := &scriptConn{data: data, step: step}
	w := &writeLog{scriptConn: sc}
	g = &guardConn{Conn: w, l: l, f: framer{maxHead: l.maxHead, fast: true, maxSimple: l.maxSimple}}
	p := make([]byte, 512)
	for range 1 << 20 {
		g.mu.Lock()
		g.f.free = true // the server has answered everything it read
		g.mu.Unlock()
		n, rerr := g.Read(p)
		all.Write(p[:n])
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
	}
	if bodies > len(answered) {
		t.Fatalf("%d bodies read for %d heads answered", bodies, len(answered))
	}
	// The answers, without the 100 Continue sent for an Expect.
	written = bytes.ReplaceAll(w.out.Bytes(), continueLine, nil)
	return all.Bytes(), answered, written, err, &g.f
}

type writeLog struct {
	*scriptConn
	out bytes.Buffer
}

func (w *writeLog) Write(p []byte) (int, error) { return w.out.Write(p) }

func TestFastPathOffers(t *testing.T) {
	r := hostile.Get("/r")
	tests := []struct {
		name     string
		in       string
		answered int
	}{
		{"answered in a row", r + r + r, 3},
		{"declined then answered", hostile.Get("/a") + r, 2 - 1},
		{"body offered", hostile.Req("GET /r HTTP/1.1", hostile.HostAPI, "Content-Length: 1") + "x" + r, 2},
		{"chunked body offered", hostile.Req("POST /r HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked") +
			"3\r\nabc\r\n1;ext=1\r\nd\r\n0\r\nX-T: 1\r\nx-u: 2\r\n\r\n" + r, 2},
		{"chunked body declined", hostile.Req("POST /a HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked") +
			"3\r\nabc\r\n0\r\n\r\n" + r, 1},
		{"Expect offered with a body", hostile.Req("POST /r HTTP/1.1", hostile.HostAPI, "Expect: 100-Continue", "Content-Length: 2") + "ab", 1},
		{"zero body offered", hostile.Req("GET /r HTTP/1.1", hostile.HostAPI, "Content-Length: 0"), 1},
		{"HTTP/1.0 not offered", hostile.Req("GET /r HTTP/1.0", hostile.HostAPI), 0},
		{"Connection: close not offered", hostile.Get("/r", "Connection: close"), 0},
		{"keep-alive offered", hostile.Get("/r", "Connection: Keep-Alive"), 1},
		{"Expect not offered without a body", hostile.Get("/r", "Expect: 100-continue"), 0},
		{"other Expect not offered", hostile.Req("POST /r HTTP/1.1", hostile.HostAPI, "Expect: foo", "Content-Length: 1") + "x", 0},
		{"upgrade not offered", hostile.Get("/r", "Upgrade: websocket", "Connection: upgrade"), 0},
		{"control byte in a value", hostile.Get("/r", "X: a\x01b"), 0},
		{"absolute form", hostile.Req("GET http://api.example.com/r HTTP/1.1", hostile.HostAPI), 0},
		{"host with underscore", hostile.Req("GET /r HTTP/1.1", "Host: a_b"), 0},
		{"no host", hostile.Req("GET /r HTTP/1.1"), 0},
		{"rejected framing after", r + hostile.Req("POST /r HTTP/1.1", hostile.HostAPI, "Content-Length: 1", "Content-Length: 1"), 1},
	}
	for _, tt := range tests {
		for _, step := range []int{1, 5, 4096} {
			_, answered, written, _, _ := fastStream(t, []byte(tt.in), step)
			if len(answered) != tt.answered || len(written) != tt.answered*len(fastAnswer) {
				t.Errorf("%s (step %d): %d answered, %d bytes written; want %d", tt.name, step, len(answered), len(written), tt.answered)
			}
		}
	}
}

// FuzzFastPath checks the fast path's offers on arbitrary request streams:
// every head offered is one net/http reads exactly as the Request says
// (see fastStream), the bytes delivered and the heads answered are the
// input in order, and net/http ends every delivered message where the
// framer does.
func FuzzFastPath(f *testing.F) {
	for _, c := range hostile.Corpus() {
		f.Add([]byte(hostile.Get("/r")+c.Raw), uint8(3))
	}
	f.Add([]byte(hostile.Get("/r")+hostile.Get("/a")+hostile.Get("/r", "Connection: keep-alive")), uint8(0))
	// Bodies the hook reads (body.go), and one it declines.
	f.Add([]byte(hostile.Req("POST /r HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked", "Trailer: X-T")+
		"3;x=y\r\nabc\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n"+hostile.Get("/r")), uint8(2))
	f.Add([]byte(hostile.Req("PUT /r HTTP/1.1", hostile.HostAPI, "Content-Length: 3", "Expect: 100-continue")+"abc"+
		hostile.Req("POST /a HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked")+"1\r\nz\r\n0\r\n\r\n"+hostile.Get("/r")), uint8(7))
	f.Add([]byte(hostile.Req("POST /r HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked")+"5\r\nab"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		if len(data) > 16<<10 {
			return
		}
		seen, answered, written, err, fr := fastStream(t, data, int(step)+1)
		var fe *errFraming
		if err != nil && !errors.As(err, &fe) {
			t.Fatalf("unexpected error %v", err)
		}
		if len(written) != len(answered)*len(fastAnswer) {
			t.Fatalf("%d answers written for %d heads answered", len(written)/len(fastAnswer), len(answered))
		}
		if fr.st == stRejected {
			if !bytes.HasSuffix(seen, []byte(rejectLine)) {
				t.Fatalf("rejected stream does not end with the replacement: %q", seen)
			}
			seen = seen[:len(seen)-len(rejectLine)]
		}
		if !bytes.HasPrefix(data, seen) {
			t.Fatalf("delivered and answered bytes are not the input in order:\n%q\nof\n%q", seen, data)
		}
	})
}

// fastServer serves l's connections with net/http, answering on the fast
// path every request whose target starts with "/r" (unless opts.Answer is
// set: then with it), and "slow" otherwise (after reading the body;
// unless srv.Handler is set). srv.ConnState, if set, is called after the
// Listener's. The Listener keeps opts.ReadTimeout; srv must have none.
func fastServer(t *testing.T, opts ListenerOptions, srv *http.Server) (addr string, l *Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Answer == nil {
		opts.Answer = func(r *Request, out []byte) ([]byte, bool) {
			if !bytes.HasPrefix(r.Target, []byte("/r")) {
				return out, false
			}
			return append(out, fastAnswer...), true
		}
	}
	opts.ReadHeaderTimeout = srv.ReadHeaderTimeout
	opts.WriteTimeout, opts.IdleTimeout = srv.WriteTimeout, srv.IdleTimeout
	l = NewListener(ln, opts)
	if cs := srv.ConnState; cs != nil {
		srv.ConnState = func(c net.Conn, st http.ConnState) {
			l.ConnState(c, st)
			cs(c, st)
		}
	} else {
		srv.ConnState = l.ConnState
	}
	srv.ErrorLog = discardLog
	if srv.Handler == nil {
		srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, "slow")
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String(), l
}

// roundTrip sends req on c and reads one response, returning its status
// line's code and body.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, req string) (int, string) {
	t.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestFastPathKeepsTimeouts: while the fast path answers, the connection
// is bound by the server's header and idle timeouts as between requests
// net/http serves, and a request it declines is served by net/http on the
// same connection.
func TestFastPathKeepsTimeouts(t *testing.T) {
	tests := []struct {
		name       string
		header     time.Duration
		idle       time.Duration
		then       string // sent after two answered requests
		wantClosed bool
	}{
		{"header timeout", 100 * time.Millisecond, time.Minute, "GET /r HTTP/1.1\r\nHost: a\r\n", true},
		{"idle timeout", time.Minute, 100 * time.Millisecond, "", true},
		{"declined request served", time.Minute, time.Minute, hostile.Get("/slow"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, _ := fastServer(t, ListenerOptions{}, &http.Server{ReadHeaderTimeout: tt.header, IdleTimeout: tt.idle})
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			// The first request on a new connection and the next are
			// answered on the fast path.
			for range 2 {
				if code, _ := roundTrip(t, c, br, hostile.Get("/r")); code != 429 {
					t.Fatalf("status %d, want the fast path's 429", code)
				}
			}
			start := time.Now()
			if !tt.wantClosed {
				if code, body := roundTrip(t, c, br, tt.then); code != 200 || body != "slow" {
					t.Fatalf("declined request: %d %q, want net/http's 200", code, body)
				}
				// net/http reports the connection idle (ConnState) only
				// after the response is on its way, so a request sent at
				// once may still go to net/http (200); the next ones are
				// offered to the fast path again.
				wait.For(t, 5*time.Second, "the fast path's 429 after net/http served one", func() bool {
					code, _ := roundTrip(t, c, br, hostile.Get("/r"))
					return code == 429
				})
				return
			}
			io.WriteString(c, tt.then)
			if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read %d bytes, %v; want the connection closed by the server", n, err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("closed after %v", d)
			}
		})
	}
}

// TestFastPathReadTimeout: the Listener keeps ReadTimeout in the server's
// place, so that a connection's first request is offered to the fast path
// too, and every request, head and body, is still cut at ReadTimeout from
// its start (well before the header timeout), answered here or by net/http.
func TestFastPathReadTimeout(t *testing.T) {
	const read = 200 * time.Millisecond
	tests := []struct {
		name    string
		before  int    // requests answered on the fast path first
		then    string // sent, and never finished
		closeBy time.Duration
	}{
		{"first request answered", 0, "", 0},
		{"slow first head", 0, "GET /r HTTP/1.1\r\nHost: a\r\n", 3 * time.Second},
		{"slow head after answers", 2, "GET /r HTTP/1.1\r\nHost: a\r\n", 3 * time.Second},
		{"slow head for net/http after answers", 2, "GET /slow HTTP/1.1\r\nHost: a\r\nX: ", 3 * time.Second},
		{"slow body for net/http", 0, hostile.Req("POST /slow HTTP/1.1", hostile.HostAPI, "Content-Length: 5") + "ab", 3 * time.Second},
		{"slow body for net/http after answers", 2, hostile.Req("POST /slow HTTP/1.1", hostile.HostAPI, "Content-Length: 5") + "ab", 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, _ := fastServer(t, ListenerOptions{ReadTimeout: read},
				&http.Server{ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute})
			start := time.Now() // a first request is dated from the connection's start
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			if tt.then == "" {
				if code, body := roundTrip(t, c, br, hostile.Get("/r")); code != 429 {
					t.Fatalf("first request: %d %q, want the fast path's 429", code, body)
				}
				return
			}
			for range tt.before {
				if code, body := roundTrip(t, c, br, hostile.Get("/r")); code != 429 {
					t.Fatalf("status %d %q, want the fast path's 429", code, body)
				}
				start = time.Now() // a later one from its head's first byte
			}
			io.WriteString(c, tt.then)
			// Whatever is answered, the connection closes.
			io.Copy(io.Discard, br)
			if d := time.Since(start); d < read || d > tt.closeBy {
				t.Errorf("closed after %v, want it closed at the read timeout (%v)", d.Round(time.Millisecond), read)
			}
		})
	}
}

// TestFastPathConnectionCap: a connection the fast path answers on is
// idle between its requests, as one net/http serves is: at the cap, a new
// connection closes it.
func TestFastPathConnectionCap(t *testing.T) {
	addr, _ := fastServer(t, ListenerOptions{MaxConnections: 1}, &http.Server{})
	a, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.SetDeadline(time.Now().Add(10 * time.Second))
	ra := bufio.NewReader(a)
	for range 3 {
		if code, _ := roundTrip(t, a, ra, hostile.Get("/r")); code != 429 {
			t.Fatalf("status %d, want 429", code)
		}
	}
	b, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.SetDeadline(time.Now().Add(10 * time.Second))
	if code, _ := roundTrip(t, b, bufio.NewReader(b), hostile.Get("/r")); code != 429 {
		t.Fatalf("new connection: status %d, want 429", code)
	}
	if n, err := ra.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("idle connection: read %d, %v; want it closed for the new one", n, err)
	}
}
