package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestParseHead(t *testing.T) {
	tests := []struct {
		name        string
		head        string
		wantLen     int64
		upgrade     bool
		passthrough bool
		reject      bool
	}{
		{"no body", req("GET / HTTP/1.1", hAPI), 0, false, false, false},
		{"content-length", req("POST / HTTP/1.1", hAPI, "Content-Length: 12"), 12, false, false, false},
		{"content-length with OWS", req("POST / HTTP/1.1", hAPI, "Content-Length: \t12 "), 12, false, false, false},
		{"chunked", req("POST / HTTP/1.1", hAPI, "transfer-encoding: Chunked"), -1, false, false, false},
		{"HTTP/1.0 content-length", req("POST / HTTP/1.0", "Content-Length: 1"), 1, false, false, false},
		{"upgrade", req("GET / HTTP/1.1", hAPI, "Upgrade: websocket", "Connection: Upgrade"), 0, true, false, false},
		{"bare LF", "GET / HTTP/1.1\nHost: a\n\n", 0, false, false, true},
		{"bare LF request line", "GET / HTTP/1.1\nHost: a\r\n\r\n", 0, false, false, true},
		{"bare LF field line", "GET / HTTP/1.1\r\nHost: a\n\r\n", 0, false, false, true},
		{"bare LF empty line", "GET / HTTP/1.1\r\nHost: a\r\n\n", 0, false, false, true},
		{"OPTIONS *", req("OPTIONS * HTTP/1.1", hAPI), 0, false, false, true},
		{"GET *", req("GET * HTTP/1.1", hAPI), 0, false, false, true},
		{"OPTIONS path", req("OPTIONS /* HTTP/1.1", hAPI), 0, false, false, false},
		{"unsupported coding", req("POST / HTTP/1.1", hAPI, "Transfer-Encoding: gzip"), 0, false, true, false},
		{"two codings", req("POST / HTTP/1.1", hAPI, "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"), 0, false, true, false},
		{"HTTP/2.0", req("GET / HTTP/2.0", hAPI), 0, false, true, false},
		{"TE and CL", req("POST / HTTP/1.1", hAPI, "Transfer-Encoding: chunked", "Content-Length: 1"), 0, false, false, true},
		{"two CL", req("POST / HTTP/1.1", hAPI, "Content-Length: 1", "Content-Length: 1"), 0, false, false, true},
		{"CL list", req("POST / HTTP/1.1", hAPI, "Content-Length: 1, 1"), 0, false, false, true},
		{"CL too long", req("POST / HTTP/1.1", hAPI, "Content-Length: 12345678901234567890"), 0, false, false, true},
		{"TE in 1.0", req("POST / HTTP/1.0", "Transfer-Encoding: chunked"), 0, false, false, true},
		{"two Hosts", req("GET / HTTP/1.1", hAPI, hWWW), 0, false, false, true},
		{"obs-fold", req("GET / HTTP/1.1", hAPI, "X: a", " b"), 0, false, false, true},
		{"CR in line", req("GET / HTTP/1.1", hAPI, "X: a\rb"), 0, false, false, true},
		{"PRI", "PRI * HTTP/2.0\r\n\r\n", 0, false, false, true},
		{"absolute, same host", req("GET http://api.example.com:80/x HTTP/1.1", "Host: API.example.com."), 0, false, false, false},
		{"absolute, other host", req("GET http://www.example.com/x HTTP/1.1", hAPI), 0, false, false, true},
		{"absolute, userinfo", req("GET http://a@api.example.com/x HTTP/1.1", hAPI), 0, false, false, true},
		{"absolute, no Host", req("GET http://api.example.com/x HTTP/1.0"), 0, false, false, false},
	}
	for _, tt := range tests {
		h, reason := parseHead([]byte(tt.head))
		if got := reason != ""; got != tt.reject {
			t.Errorf("%s: rejected = %v (%q), want %v", tt.name, got, reason, tt.reject)
			continue
		}
		if tt.reject {
			continue
		}
		if h.bodyLen != tt.wantLen || h.upgrade != tt.upgrade || h.passthrough != tt.passthrough {
			t.Errorf("%s: got %+v, want bodyLen %d upgrade %v passthrough %v", tt.name, h, tt.wantLen, tt.upgrade, tt.passthrough)
		}
	}
}

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
	valid := rawGet("/a") +
		req("POST /b HTTP/1.1", hAPI, "Content-Length: 5") + "hello" +
		req("POST /c HTTP/1.1", hAPI, "Transfer-Encoding: chunked") + "5;x=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n" +
		rawGet("/d")
	tests := []struct {
		name   string
		in     string
		want   string // delivered bytes
		ends   int    // messages completed
		broken bool
	}{
		{"valid pipeline", valid, valid, 4, false},
		{"TE+CL after valid", rawGet("/") + req("POST / HTTP/1.1", hAPI, "Transfer-Encoding: chunked", "Content-Length: 3") + "abc",
			rawGet("/") + rejectLine, 1, false},
		{"garbage request line", rawGet("/") + "\x16\x03\x01\n", rawGet("/") + rejectLine, 1, false},
		{"bad chunk", req("POST / HTTP/1.1", hAPI, "Transfer-Encoding: chunked") + "3\r\nabcX\r\n",
			req("POST / HTTP/1.1", hAPI, "Transfer-Encoding: chunked") + "3\r\nabc", 0, true},
		{"bare LF chunk line", req("POST / HTTP/1.1", hAPI, "Transfer-Encoding: chunked") + "3\nabc",
			req("POST / HTTP/1.1", hAPI, "Transfer-Encoding: chunked"), 0, true},
		{"head over the limit passes through", rawGet("/", "X: "+strings.Repeat("a", 300)) + "\x00garbage",
			rawGet("/", "X: "+strings.Repeat("a", 300)) + "\x00garbage", 0, false},
		{"unsupported coding passes through", req("POST / HTTP/1.1", hAPI, "Transfer-Encoding: gzip") + "\x00anything",
			req("POST / HTTP/1.1", hAPI, "Transfer-Encoding: gzip") + "\x00anything", 0, false},
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
	up := rawGet("/ws", "Connection: Upgrade", "Upgrade: websocket")
	for _, tt := range []struct {
		name     string
		response string
		next     string
		want     string // delivered after the one early byte
	}{
		{"101: the rest passes", "HTTP/1.1 101 Switching Protocols\r\n\r\n", "\x81\x05hello frames", "\x81\x05hello frames"[1:]},
		{"100 then 101", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching Protocols\r\n\r\n", "\x81\x05hello", "\x81\x05hello"[1:]},
		{"refused: next request checked", "HTTP/1.1 400 Bad Request\r\n\r\n", rawGet("/"), rawGet("/")[1:]},
		{"refused: bad next request rejected", "HTTP/1.1 200 OK\r\n\r\n",
			req("POST / HTTP/1.1", hAPI, "Transfer-Encoding: chunked", "Content-Length: 1"), rejectLine},
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

// wsOrigin upgrades to a line-echo protocol.
func wsOrigin(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want upgrade", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString("echo:" + line)
			brw.Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// listenerEnv serves cfg's Proxy through a Listener on a real server.
func listenerEnv(t *testing.T, cfg rules.Config, lo ListenerOptions) (*hostileServer, *clock) {
	t.Helper()
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	transport := newTransport(table.Timeouts)
	t.Cleanup(transport.CloseIdleConnections)
	p, err := New(Options{Table: table, Now: clk.Now, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	s := startHostileServer(t, p, table, lo)
	t.Cleanup(func() { s.stop(t) })
	return s, clk
}

func TestListenerWebSocket(t *testing.T) {
	origin := wsOrigin(t)
	s, _ := listenerEnv(t, oneDomain(origin.URL), ListenerOptions{})
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, rawGet("/ws", "Upgrade: websocket", "Connection: Upgrade"))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: got %v, %v, want 101", resp, err)
	}
	// Once upgraded, bytes that would be refused as HTTP pass untouched.
	for _, line := range []string{"hello\n", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n", "\x00\x01\n"} {
		io.WriteString(conn, line)
		want := "echo:" + line[:strings.IndexByte(line, '\n')+1]
		got := make([]byte, len(want))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != want {
			t.Fatalf("echo: got %q, %v, want %q", got, err, want)
		}
		if rest := line[strings.IndexByte(line, '\n')+1:]; rest != "" {
			// The rest of a multi-line write comes back line by line.
			for _, l := range strings.SplitAfter(rest, "\n") {
				if l == "" {
					continue
				}
				got := make([]byte, len("echo:")+len(l))
				if _, err := io.ReadFull(br, got); err != nil || string(got) != "echo:"+l {
					t.Fatalf("echo: got %q, %v, want %q", got, err, "echo:"+l)
				}
			}
		}
	}
}

// TestListenerRefusalsCounted sends over raw TCP, to a server configured
// as cmd/edge configures its public one, what the Listener refuses before
// net/http parses it: the asterisk-form target (net/http's own OPTIONS *
// answer is off) and heads with bare-LF line ends. Each gets 400, is
// counted in edge_framing_refused_total and not in the screen's
// edge_refused_requests_total, and nothing reaches the origin.
func TestListenerRefusalsCounted(t *testing.T) {
	origin := newHostileOrigin(t)
	table, err := rules.Compile(hostileConfig(origin.srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	transport := newTransport(table.Timeouts)
	t.Cleanup(transport.CloseIdleConnections)
	p, err := New(Options{Table: table, Registerer: prometheus.NewRegistry(), Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	s := startHostileServer(t, p, table, ListenerOptions{OnReject: p.FramingRefused})
	t.Cleanup(func() { s.stop(t) })

	tests := []struct {
		name      string
		raw       string
		want      []int // statuses, in order
		refused   float64
		forwarded int
	}{
		{"OPTIONS *", req("OPTIONS * HTTP/1.1", hAPI), []int{400}, 1, 0},
		{"OPTIONS * with an invalid Host", req("OPTIONS * HTTP/1.1", "Host: a b"), []int{400}, 1, 0},
		{"OPTIONS * without Host", req("OPTIONS * HTTP/1.1"), []int{400}, 1, 0},
		{"OPTIONS * in HTTP/1.0", req("OPTIONS * HTTP/1.0"), []int{400}, 1, 0},
		{"GET *", req("GET * HTTP/1.1", hAPI), []int{400}, 1, 0},
		{"bare LF everywhere", "GET / HTTP/1.1\n" + hAPI + "\n\n", []int{400}, 1, 0},
		{"bare LF ends the request line", "GET / HTTP/1.1\n" + hAPI + "\r\n\r\n", []int{400}, 1, 0},
		{"bare LF ends a field line", "GET / HTTP/1.1\r\n" + hAPI + "\nAccept: */*\r\n\r\n", []int{400}, 1, 0},
		{"bare LF ends the head", "GET / HTTP/1.1\r\n" + hAPI + "\r\n\n", []int{400}, 1, 0},
		{"bare LF in a pipelined second request", rawGet("/") + "GET / HTTP/1.1\n" + hAPI + "\n\n", []int{200, 400}, 1, 1},
		{"CRLF throughout", rawGet("/") + req("OPTIONS /x HTTP/1.1", hAPI), []int{200, 200}, 0, 2},
	}
	for _, tt := range tests {
		framing0 := testutil.ToFloat64(p.metrics.framing)
		screen0 := testutil.ToFloat64(p.metrics.refused.WithLabelValues("400"))
		origin.settle(t)
		_, c0, _ := origin.counts()
		got, bodies := exchange(t, s.addr, hostileCase{raw: tt.raw, want: tt.want})
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: got %v (%q), want %v", tt.name, got, bodies, tt.want)
		}
		if got := testutil.ToFloat64(p.metrics.framing) - framing0; got != tt.refused {
			t.Errorf("%s: edge_framing_refused_total grew by %v, want %v", tt.name, got, tt.refused)
		}
		if got := testutil.ToFloat64(p.metrics.refused.WithLabelValues("400")) - screen0; got != 0 {
			t.Errorf("%s: edge_refused_requests_total{code=\"400\"} grew by %v, want 0", tt.name, got)
		}
		origin.settle(t)
		if _, c1, _ := origin.counts(); c1-c0 != tt.forwarded {
			t.Errorf("%s: origin got %d requests, want %d", tt.name, c1-c0, tt.forwarded)
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
	for _, c := range hostileCorpus() {
		f.Add([]byte(c.raw), uint8(3))
	}
	f.Add([]byte(rawGet("/")+req("POST / HTTP/1.1", hAPI, "Transfer-Encoding: chunked")+"1\r\na\r\n0\r\n\r\n"+rawGet("/")), uint8(1))
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
