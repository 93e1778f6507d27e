package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// h3Config is h2Config with HTTP/3 served beside (tls.http3).
func h3Config(origin, extra string) string {
	return strings.Replace(h2Config(origin, extra), "  listen: \"127.0.0.1:0\"\n", "  listen: \"127.0.0.1:0\"\n  http3: true\n", 1)
}

// h3Client is an HTTP/3 client of e's QUIC socket (at its TLS listener's
// port), whatever the URL's host, with its transport to close; dial, if
// set, makes its connections instead of quic.DialAddrEarly to the socket.
type h3Client struct {
	*http.Client
	tr *http3.Transport
	mu sync.Mutex
	// conns are the connections dialled, in order.
	conns []*quic.Conn
}

func (e *tlsEdge) h3Client(t testing.TB, conf *tls.Config, dial func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error)) *h3Client {
	c := &h3Client{}
	tc := &tls.Config{RootCAs: e.ca.Pool}
	if conf != nil {
		tc = conf.Clone()
		tc.RootCAs = e.ca.Pool
	}
	if dial == nil {
		dial = quic.DialAddrEarly
	}
	c.tr = &http3.Transport{
		TLSClientConfig: tc,
		Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			conn, err := dial(ctx, e.tls, tc, qc)
			if err == nil {
				c.mu.Lock()
				c.conns = append(c.conns, conn)
				c.mu.Unlock()
			}
			return conn, err
		},
	}
	c.Client = &http.Client{Transport: c.tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(func() { c.tr.Close() })
	return c
}

// h3OrPlain sends https requests over HTTP/3 to h3, others over HTTP/1.1
// by plain.
type h3OrPlain struct{ h3, plain http.RoundTripper }

func (r h3OrPlain) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "https" {
		return r.h3.RoundTrip(req)
	}
	return r.plain.RoundTrip(req)
}

// TestHTTP3Requests: with tls.http3, edge serves HTTP/3 on UDP at the TLS
// listener's port (chosen by the system: port 0), with the TLS listener's
// certificates chosen by SNI; requests are forwarded (the origin is told
// https and the client's JA4, whose first character is q for QUIC) and
// refused as over TCP; every HTTPS response, over HTTP/1.1 (the fast path
// and net/http), HTTP/2 and HTTP/3, carries Alt-Svc with that port, and
// no plain one does; connections are counted.
func TestHTTP3Requests(t *testing.T) {
	o := echoOrigin(t)
	e := startTLSEdge(t, strings.Replace(tlsOriginConfig(o.URL, "  fingerprint_header: X-JA4\n  http3: true"), "rules: [{name: per-ip, limit: 1000, period: 1m}]",
		"rules: [{name: per-ip, limit: 1000, period: 1m}, {name: few, match: {path_prefix: /few}, limit: 1, period: 1h}]", 1))
	_, port, _ := net.SplitHostPort(e.tls)
	wantAlt := `h3=":` + port + `"; ma=86400`
	c := e.h3Client(t, nil, nil)
	get := func(c *http.Client, url string) (*http.Response, string) {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	resp, body := get(c.Client, "https://api.example.com/x")
	if resp.ProtoMajor != 3 || resp.StatusCode != 200 || !strings.HasPrefix(body, `proto=https ja4="q13`) {
		t.Fatalf("GET over HTTP/3: %s %d %q", resp.Proto, resp.StatusCode, body)
	}
	if got := resp.Header.Get("Alt-Svc"); got != wantAlt {
		t.Errorf("Alt-Svc over HTTP/3: got %q, want %q", got, wantAlt)
	}
	if got := resp.Header.Get("Strict-Transport-Security"); got != "max-age=3600" {
		t.Errorf("HSTS over HTTP/3: got %q, want the domain's", got)
	}
	if st := c.conns[0].ConnectionState().TLS; st.PeerCertificates[0].Subject.CommonName != "api" {
		t.Errorf("certificate for api.example.com: got %q", st.PeerCertificates[0].Subject.CommonName)
	}
	resp, _ = get(c.Client, "https://x.example.net/")
	if resp.StatusCode != 200 || c.conns[len(c.conns)-1].ConnectionState().TLS.PeerCertificates[0].Subject.CommonName != "wild" {
		t.Errorf("x.example.net over HTTP/3: %d, certificate %q", resp.StatusCode, c.conns[len(c.conns)-1].ConnectionState().TLS.PeerCertificates[0].Subject.CommonName)
	}
	get(c.Client, "https://api.example.com/few")
	resp, body = get(c.Client, "https://api.example.com/few")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("Alt-Svc") != wantAlt {
		t.Errorf("second /few over HTTP/3: got %d %v %q, want 429 with Retry-After and Alt-Svc", resp.StatusCode, resp.Header, body)
	}
	// Over TCP: the fast path's refusal, net/http's forward, HTTP/2's.
	for _, proto := range []string{"h1", "h2"} {
		pc := e.protoClient(proto)
		for _, path := range []string{"/few", "/y"} {
			resp, _ := get(pc, "https://api.example.com"+path)
			if got := resp.Header.Get("Alt-Svc"); got != wantAlt {
				t.Errorf("%s %s over TLS (%d): Alt-Svc %q, want %q", proto, path, resp.StatusCode, got, wantAlt)
			}
		}
		if proto == "h2" {
			continue // no h2c here
		}
		resp, _ := get(pc, "http://plain.example.com/y")
		if got := resp.Header.Get("Alt-Svc"); got != "" {
			t.Errorf("%s over plain HTTP: Alt-Svc %q, want none", proto, got)
		}
		pc.CloseIdleConnections()
	}
	if n := metricValue(t, e.admin, "edge_http3_connections_total", `result="ok"`); n != 2 {
		t.Errorf("edge_http3_connections_total{result=ok}: got %v, want 2", n)
	}
	if !strings.Contains(e.log.String(), "http3_listen=127.0.0.1:"+port) {
		t.Errorf("the start line does not name the HTTP/3 socket at port %s:\n%s", port, e.log)
	}
}

// heldConn is a client's UDP socket that holds back the datagrams that
// begin with a Handshake packet (the client's Finished) for hold, or
// forever for 0, so that the server handles the client's 0-RTT requests
// before the handshake is done, deterministically; dropped forever, the
// server's view is that of a replay of the client's first flight, whose
// handshake never completes (RFC 9001 §9.2).
type heldConn struct {
	net.PacketConn // not the *net.UDPConn: quic-go would write with WriteMsgUDP
	hold           time.Duration
	// first delays the first read, the server's first flight, so that
	// the client sends its requests before it has 1-RTT keys: in 0-RTT.
	first *sync.Once
}

func (c heldConn) ReadFrom(b []byte) (int, net.Addr, error) {
	c.first.Do(func() { time.Sleep(50 * time.Millisecond) })
	return c.PacketConn.ReadFrom(b)
}

func (c heldConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	if hasHandshakePacket(b) {
		if c.hold == 0 {
			return len(b), nil
		}
		p := append([]byte(nil), b...)
		time.AfterFunc(c.hold, func() { c.PacketConn.WriteTo(p, addr) })
		return len(b), nil
	}
	return c.PacketConn.WriteTo(b, addr)
}

// hasHandshakePacket reports whether datagram b holds a Handshake packet
// (RFC 9000 §17.2: long headers, coalesced one after another, each with
// its length; type 0x20 in QUIC v1's first byte).
func hasHandshakePacket(b []byte) bool {
	for len(b) > 7 && b[0]&0x80 != 0 {
		typ := b[0] & 0x30
		if typ == 0x20 {
			return true
		}
		i := 5
		i += 1 + int(b[i]) // destination connection ID
		if i >= len(b) {
			return false
		}
		i += 1 + int(b[i]) // source connection ID
		if typ == 0x00 {   // Initial: a token
			n, w := quicVarint(b[i:])
			i += w + int(n)
		}
		if i >= len(b) {
			return false
		}
		n, w := quicVarint(b[i:])
		if w == 0 || i+w+int(n) > len(b) {
			return false
		}
		b = b[i+w+int(n):]
	}
	return false
}

// quicVarint reads a variable-length integer (RFC 9000 §16): its value and
// width, 0 when b is too short.
func quicVarint(b []byte) (uint64, int) {
	if len(b) == 0 {
		return 0, 0
	}
	w := 1 << (b[0] >> 6)
	if len(b) < w {
		return 0, 0
	}
	v := uint64(b[0] & 0x3f)
	for _, c := range b[1:w] {
		v = v<<8 | uint64(c)
	}
	return v, w
}

// dialHeld dials e's QUIC socket early from a heldConn holding for hold,
// and returns the connection with what to close after it.
func dialHeld(t testing.TB, e *tlsEdge, hold time.Duration) func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
	return func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return nil, err
		}
		tr := &quic.Transport{Conn: heldConn{PacketConn: udp, hold: hold, first: new(sync.Once)}}
		t.Cleanup(func() { tr.Close(); udp.Close() })
		ua, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return nil, err
		}
		return tr.DialEarly(ctx, ua, tc, qc)
	}
}

// TestHTTP3ZeroRTT: with http3.allow_0rtt, a resuming client's GET sent in
// 0-RTT data is forwarded with Early-Data: 1 and counted against its key,
// and a replay of it counts again; an unsafe method sent early (a POST) is
// answered 425 Too Early. Without allow_0rtt (the default) the server
// refuses 0-RTT: the same requests wait for the handshake and go on as any
// other.
func TestHTTP3ZeroRTT(t *testing.T) {
	for _, allow := range []bool{true, false} {
		t.Run(fmt.Sprint("allow_0rtt=", allow), func(t *testing.T) {
			var mu sync.Mutex
			var early []string
			origin, _ := recordingOrigin(t)
			o := http.Handler(origin.Config.Handler)
			origin.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				early = append(early, r.Method+" "+r.URL.Path+" early="+r.Header.Get("Early-Data"))
				mu.Unlock()
				o.ServeHTTP(w, r)
			})
			extra := ""
			if allow {
				extra = "http3: {allow_0rtt: true}"
			}
			e := startTLSEdge(t, h3Config(origin.URL, extra))
			conf := &tls.Config{ClientSessionCache: tls.NewLRUClientSessionCache(8)}
			// A first connection, for a session ticket; the next resume.
			c := e.h3Client(t, conf, nil)
			if resp, err := c.Get("https://api.example.com/first"); err != nil {
				t.Fatal(err)
			} else {
				resp.Body.Close()
			}
			c.tr.Close()
			wait.For(t, 5*time.Second, "a session ticket", func() bool {
				_, ok := conf.ClientSessionCache.Get("api.example.com")
				return ok
			})
			send := func(method, path string, hold time.Duration) (int, bool) {
				c := e.h3Client(t, conf, dialHeld(t, e, hold))
				defer c.tr.Close()
				req, _ := http.NewRequest(method, "https://api.example.com"+path, strings.NewReader("x"))
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
				resp.Body.Close()
				return resp.StatusCode, c.conns[0].ConnectionState().Used0RTT
			}
			const hold = 300 * time.Millisecond
			status, used := send(http3.MethodGet0RTT, "/limited", hold)
			if used != allow || status != 200 {
				t.Errorf("early GET: %d, 0-RTT used %v; want 200, %v", status, used, allow)
			}
			if allow { // as a replay: the handshake never completes
				status, _ = send(http3.MethodGet0RTT, "/limited", 0)
			} else {
				status, _ = send(http3.MethodGet0RTT, "/limited", hold)
			}
			if status != 200 {
				t.Errorf("replayed GET: %d, want 200", status)
			}
			status, _ = send(http3.MethodGet0RTT, "/limited", hold)
			if status != 429 {
				t.Errorf("third early GET of /limited (limit 2): got %d, want 429: replays count", status)
			}
			// quic-go's client sends only GET_0RTT and HEAD_0RTT early; a
			// POST is sent early by a connection made to send it early.
			status, used = sendEarlyPOST(t, e, conf, hold)
			want := 200
			if allow {
				want = 425
			}
			if status != want || used != allow {
				t.Errorf("early POST: %d (0-RTT used %v), want %d", status, used, want)
			}
			mu.Lock()
			got := strings.Join(early, "\n")
			mu.Unlock()
			wantSeen := "GET /first early=\nGET /limited early=1\nGET /limited early=1"
			if !allow {
				wantSeen = "GET /first early=\nGET /limited early=\nGET /limited early=\nPOST /echo early="
			}
			if got != wantSeen {
				t.Errorf("the origin saw:\n%s\nwant:\n%s", got, wantSeen)
			}
		})
	}
}

// sendEarlyPOST sends POST /echo with no body in the 0-RTT data of a new
// connection resuming conf's session (quic-go's own round trip waits for
// the handshake before an unsafe method), and returns the status and
// whether the server took 0-RTT.
func sendEarlyPOST(t *testing.T, e *tlsEdge, conf *tls.Config, hold time.Duration) (int, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tc := conf.Clone()
	tc.RootCAs, tc.ServerName, tc.NextProtos = e.ca.Pool, "api.example.com", []string{http3.NextProtoH3}
	conn, err := dialHeld(t, e, hold)(ctx, e.tls, tc, &quic.Config{})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.CloseWithError(0, "")
	tr := &http3.Transport{}
	defer tr.Close()
	cc := tr.NewClientConn(conn)
	str, err := cc.OpenRequestStream(ctx)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	req, _ := http.NewRequest(http.MethodPost, "https://api.example.com/echo", nil)
	if err := str.SendRequestHeader(req); err != nil {
		t.Fatalf("send: %v", err)
	}
	str.Close()
	resp, err := str.ReadResponse()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, conn.ConnectionState().Used0RTT
}

// TestHTTP3Migration: a client's QUIC connection really moves from
// 127.0.0.1 to 127.0.0.2 (a new path, probed and switched to, as a phone
// changes networks): the requests after it are the new address's for a
// rule keyed by ip (a fresh count) and for X-Forwarded-For, and the same
// key's for a rule keyed by a header (the count goes on).
func TestHTTP3Migration(t *testing.T) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "xff=%s", r.Header.Get("X-Forwarded-For"))
	}))
	t.Cleanup(o.Close)
	e := startTLSEdge(t, fmt.Sprintf(`
listen: %q
admin_listen: %q
origin: %q
tls:
  listen: "127.0.0.1:0"
  http3: true
  certificates:
    - {cert_file: api.pem, key_file: api.key}
domains:
  - name: api
    hosts: [api.example.com]
    rules:
      - {name: per-ip, match: {path_prefix: /ip}, key: [ip], limit: 2, period: 1h}
      - {name: per-key, match: {path_prefix: /key}, key: ["header:X-Key"], limit: 3, period: 1h}
`, publicAnyPort, adminAnyPort, o.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	transport := func(ip string) *quic.Transport {
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
		if err != nil {
			t.Skipf("no %s to bind: %v", ip, err)
		}
		tr := &quic.Transport{Conn: udp}
		t.Cleanup(func() { tr.Close(); udp.Close() })
		return tr
	}
	first := transport("127.0.0.1")
	c := e.h3Client(t, nil, func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
		ua, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return nil, err
		}
		return first.Dial(ctx, ua, tc, qc)
	})
	get := func(path string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://api.example.com"+path, nil)
		req.Header.Set("X-Key", "k1")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(strings.SplitN(string(body), "\n", 2)[0]))
	}
	var got []string
	for _, p := range []string{"/ip", "/ip", "/key", "/key"} {
		got = append(got, get(p))
	}
	if len(c.conns) != 1 {
		t.Fatalf("%d connections dialled, want 1", len(c.conns))
	}
	conn := c.conns[0]
	path, err := conn.AddPath(transport("127.0.0.2"))
	if err != nil {
		t.Fatalf("AddPath: %v", err)
	}
	if err := path.Probe(ctx); err != nil {
		t.Fatalf("probing the new path: %v", err)
	}
	if err := path.Switch(); err != nil {
		t.Fatalf("switching to the new path: %v", err)
	}
	for _, p := range []string{"/ip", "/ip", "/ip", "/key", "/key"} {
		got = append(got, get(p))
	}
	want := []string{
		"200 xff=127.0.0.1", "200 xff=127.0.0.1", "200 xff=127.0.0.1", "200 xff=127.0.0.1",
		// Migrated: a new address for per-ip, the same key for per-key.
		"200 xff=127.0.0.2", "200 xff=127.0.0.2", "429 rate limited: retry in", "200 xff=127.0.0.2", "429 rate limited: retry in",
	}
	for i := range want {
		if i >= len(got) || !strings.HasPrefix(got[i], want[i]) {
			t.Fatalf("answers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if len(c.conns) != 1 || conn.Context().Err() != nil {
		t.Errorf("the connection did not survive the migration: %d dialled, %v", len(c.conns), conn.Context().Err())
	}
	conn.CloseWithError(0, "") // else edge's shutdown waits for it to time out
}

// captureConn is a client's socket that sends nothing: it keeps the first
// datagram written (a client's first Initial packet) and reads nothing.
type captureConn struct {
	first  chan []byte
	closed chan struct{}
	once   sync.Once
}

func (c *captureConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	select {
	case c.first <- append([]byte(nil), b...):
	default:
	}
	return len(b), nil
}

func (c *captureConn) ReadFrom([]byte) (int, net.Addr, error) {
	<-c.closed
	return 0, nil, net.ErrClosed
}

func (c *captureConn) Close() error                     { c.once.Do(func() { close(c.closed) }); return nil }
func (c *captureConn) LocalAddr() net.Addr              { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9} }
func (c *captureConn) SetDeadline(time.Time) error      { return nil }
func (c *captureConn) SetReadDeadline(time.Time) error  { return nil }
func (c *captureConn) SetWriteDeadline(time.Time) error { return nil }

// initialPackets makes n first Initial packets of quic-go's client for
// addr, each of a connection of its own (its own connection IDs), none
// sent.
func initialPackets(t *testing.T, e *tlsEdge, n int) [][]byte {
	t.Helper()
	ua, err := net.ResolveUDPAddr("udp", e.tls)
	must(t, err)
	cc := &captureConn{first: make(chan []byte, 1), closed: make(chan struct{})}
	tr := &quic.Transport{Conn: cc}
	defer func() { cc.Close(); tr.Close() }() // the transport waits for its reads to end
	// X25519 alone keeps the ClientHello in one packet.
	tc := &tls.Config{ServerName: "api.example.com", NextProtos: []string{http3.NextProtoH3}, RootCAs: e.ca.Pool,
		CurvePreferences: []tls.CurveID{tls.X25519}}
	out := make([][]byte, 0, n)
	for range n {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			tr.Dial(ctx, ua, tc, &quic.Config{})
		}()
		out = append(out, <-cc.first)
		cancel()
		<-done
	}
	return out
}

// TestHTTP3InitialFlood: a flood of Initial packets, each of a new
// connection, from 200 source ports that never answer (as a spoofed flood
// cannot): edge keeps state for http3.retry_above handshakes and one more,
// answers every later one with a Retry (stateless), so that the flood ends
// in Retry packets; its memory stays bounded while the handshakes are
// held, and returns when they time out (each counted as a
// handshake_error). The flood spends nothing of its source address's
// connections.rate_per_client, which a real client's completed
// handshakes do.
func TestHTTP3InitialFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for quic-go's handshake timeout (5 s)")
	}
	const retryAbove, packets, ports = 50, 2000, 200
	e := startTLSEdge(t, h3Config(echoOrigin(t).URL, fmt.Sprintf("http3: {retry_above: %d}\nconnections: {rate_per_client: {limit: 3, period: 1m}}", retryAbove)))
	initials := initialPackets(t, e, packets)
	ua, err := net.ResolveUDPAddr("udp", e.tls)
	must(t, err)
	var socks []*net.UDPConn
	for range ports {
		s, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		must(t, err)
		t.Cleanup(func() { s.Close() })
		socks = append(socks, s)
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	before := heap()
	droppedBefore := udpReceiveDrops()
	// Each answer is for the connection whose source connection ID it is
	// sent to: which packet of the flood it answers.
	index := map[string]int{}
	for i, p := range initials {
		dcid := int(p[5])
		index[string(p[7+dcid:7+dcid+int(p[6+dcid])])] = i
	}
	var mu sync.Mutex
	retried, kept := map[int]bool{}, map[int]bool{} // by packet index
	var readers sync.WaitGroup
	for _, s := range socks {
		readers.Go(func() {
			b := make([]byte, 2048)
			for {
				s.SetReadDeadline(time.Now().Add(time.Second))
				n, _, err := s.ReadFrom(b)
				if err != nil {
					return
				}
				if n < 7 || b[0]&0x80 == 0 || 6+int(b[5]) > n {
					continue
				}
				i, ok := index[string(b[6:6+int(b[5])])]
				mu.Lock()
				switch {
				case !ok:
				case b[0]&0x30 == 0x30: // a Retry (QUIC v1)
					retried[i] = true
				case b[0]&0x30 == 0x00: // an Initial: a handshake edge keeps
					kept[i] = true
				}
				mu.Unlock()
			}
		})
	}
	for i, p := range initials {
		if _, err := socks[i%ports].WriteTo(p, ua); err != nil {
			t.Fatalf("sending: %v", err)
		}
		if i%100 == 99 {
			time.Sleep(time.Millisecond) // paced a little: the kernel's buffer would drop what edge does not read in time
		}
	}
	during := heap()
	readers.Wait()
	counted := metricValue(t, e.admin, "edge_http3_connections_total", `result="retry"`)
	last, lastKept := 0, 0
	for i := range retried {
		last = max(last, i)
	}
	for i := range kept {
		lastKept = max(lastKept, i)
	}
	t.Logf("%d Initial packets from %d ports: %d answered with a Retry (the last of them packet %d), %d handshakes kept (the last packet %d); edge counted %v retries; heap in use %d KiB before, %d KiB during",
		packets, ports, len(retried), last, len(kept), lastKept, counted, before>>10, during>>10)
	// Packets the kernel dropped for a full receive buffer (a loaded
	// machine reads the socket late) never reached edge: every other one
	// beyond the handshakes kept is a Retry decision.
	dropped := udpReceiveDrops() - droppedBefore
	if counted < float64(packets-2*(retryAbove+1)-dropped) {
		t.Errorf("edge counted %v retries of %d packets (%d dropped by the kernel), want all but about %d", counted, packets, dropped, retryAbove+1)
	}
	// quic-go drops a Retry it cannot send at once (its queue is short):
	// a flood receives some.
	if len(retried) == 0 || last < packets-packets/4 {
		t.Errorf("Retry answered %d packets, the last of them %d, want the flood's last ones among them", len(retried), last)
	}
	if len(kept) == 0 || len(kept) > retryAbove+1 || lastKept >= packets/4 {
		t.Errorf("edge kept the handshakes of %d packets, the last %d, want at most %d, from the flood's first", len(kept), lastKept, retryAbove+1)
	}
	if grown := int64(during) - int64(before); grown > 64<<20 {
		t.Errorf("the heap grew by %d MiB during the flood, want a bounded amount", grown>>20)
	}
	// The handshakes kept time out (quic-go's 5 s).
	wait.For(t, 15*time.Second, "the handshakes kept to time out", func() bool {
		return metricValue(t, e.admin, "edge_http3_connections_total", `result="handshake_error"`) >= retryAbove+1
	})
	if n := metricValue(t, e.admin, "edge_http3_connections_total", `result="handshake_error"`); n > retryAbove+1 {
		t.Errorf("%v handshakes were kept, want at most %d", n, retryAbove+1)
	}
	if after := heap(); int64(after)-int64(before) > 16<<20 {
		t.Errorf("the heap in use is %d KiB after the flood's handshakes ended, %d KiB before", after>>10, before>>10)
	}
	// The flood, from 127.0.0.1 but never validated, spent none of its
	// connections.rate_per_client (3 a minute): a real client there gets
	// three connections, and the fourth is refused once its handshake
	// proves the address.
	for i := range 4 {
		c := e.h3Client(t, nil, nil)
		resp, err := c.Get("https://api.example.com/")
		if err == nil {
			resp.Body.Close()
		}
		if (err == nil) != (i < 3) {
			t.Errorf("connection %d after the flood: %v", i+1, err)
		}
		c.tr.Close()
	}
	if n := metricValue(t, e.admin, "edge_http3_connections_total", `result="refused"`); n != 1 {
		t.Errorf("edge_http3_connections_total{result=refused}: got %v, want 1", n)
	}
	if n := metricValue(t, e.admin, "edge_connections_refused_total", `reason="rate"`); n != 1 {
		t.Errorf("edge_connections_refused_total{reason=rate}: got %v, want 1", n)
	}
}

// TestWarnUDPBuffers: edge warns, once, of a QUIC socket whose buffers
// are below what quic-go asks for, naming the sysctls to raise; and says
// nothing of one large enough (where the kernel allows it).
func TestWarnUDPBuffers(t *testing.T) {
	for _, size := range []int{64 << 10, udpBufferSize} {
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		must(t, err)
		defer udp.Close()
		udp.SetReadBuffer(size)
		udp.SetWriteBuffer(size)
		l := newEdgeLog()
		warnUDPBuffers(udp, slog.New(slog.NewTextHandler(l, nil)))
		rc, _ := udp.SyscallConn()
		var got int
		rc.Control(func(fd uintptr) { got, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF) })
		small := got/2 < udpBufferSize
		warned := strings.Count(l.String(), "net.core.rmem_max and net.core.wmem_max")
		if small && warned != 1 || !small && warned != 0 {
			t.Errorf("buffers of %d bytes asked, %d got: warned %d times:\n%s", size, got/2, warned, l)
		}
	}
}

// TestHTTP3MaxConcurrentStreams: http3.max_concurrent_streams is the
// request streams a client may open at once on a connection: quic-go's
// client may open that many, and the next fails at once.
func TestHTTP3MaxConcurrentStreams(t *testing.T) {
	e := startTLSEdge(t, h3Config(echoOrigin(t).URL, "http3: {max_concurrent_streams: 3}"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tc := &tls.Config{RootCAs: e.ca.Pool, ServerName: "api.example.com", NextProtos: []string{http3.NextProtoH3}}
	conn, err := quic.DialAddr(ctx, e.tls, tc, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	for i := range 4 {
		_, err := conn.OpenStream()
		if (err == nil) != (i < 3) {
			t.Errorf("stream %d: %v", i+1, err)
		}
	}
}

// udpReceiveDrops is the machine's count of UDP datagrams dropped for a
// full receive buffer (RcvbufErrors in /proc/net/snmp), 0 where it cannot
// be read.
func udpReceiveDrops() int {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "RcvbufErrors" && i < len(f) {
				v, _ := strconv.Atoi(f[i])
				return v
			}
		}
	}
	return 0
}
