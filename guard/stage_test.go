package guard

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/internal/wait"
	"go.uber.org/goleak"
)

// goroutineID returns the calling goroutine's number, from its stack's
// first line ("goroutine 42 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}

// addrConn is a connection with another client address, as a PROXY
// protocol stage would make it.
type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c *addrConn) RemoteAddr() net.Addr { return c.remote }

// dial connects to addr, with a deadline that bounds the test.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// TestStagesRunInOrder: the stages run in their order, in the goroutine
// that then answers the connection's requests on the fast path, one for
// each connection; each stage gets the connection the one before it
// returned, and the Listener reads it: the fast path and net/http see the
// client address a stage put in.
func TestStagesRunInOrder(t *testing.T) {
	source := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 4711}
	var mu sync.Mutex
	var order, seen []string
	gid := map[string]string{} // by what ran: the connection's goroutine
	record := func(what, g string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, what)
		if old, ok := gid[what]; ok && old == g {
			t.Errorf("%s: two connections ran in goroutine %s", what, g)
		}
		gid[what] = g
	}
	opts := ListenerOptions{Stages: []Stage{
		func(c net.Conn) (StageResult, error) {
			record("proxy", goroutineID())
			return StageResult{Conn: &addrConn{Conn: c, remote: source}}, nil
		},
		func(c net.Conn) (StageResult, error) {
			record("next", goroutineID())
			mu.Lock()
			seen = append(seen, c.RemoteAddr().String())
			mu.Unlock()
			return StageResult{}, nil
		},
	}}
	opts.Answer = func(r *Request, out []byte) ([]byte, bool) {
		if !bytes.HasPrefix(r.Target, []byte("/r")) {
			return out, false
		}
		mu.Lock()
		defer mu.Unlock()
		if g := goroutineID(); g != gid["next"] {
			t.Errorf("answered in goroutine %s, the stages ran in %s", g, gid["next"])
		}
		seen = append(seen, r.Peer.String())
		return append(out, fastAnswer...), true
	}
	addr, _ := fastServer(t, opts, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.RemoteAddr)
		mu.Unlock()
		io.WriteString(w, "slow")
	})})
	for range 2 {
		c := dial(t, addr)
		br := bufio.NewReader(c)
		if code, _ := roundTrip(t, c, br, hostile.Get("/r")); code != 429 {
			t.Fatalf("status %d, want the fast path's 429", code)
		}
		if code, body := roundTrip(t, c, br, hostile.Get("/slow")); code != 200 || body != "slow" {
			t.Fatalf("net/http: %d %q", code, body)
		}
		c.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(order, " "), "proxy next proxy next"; got != want {
		t.Errorf("stages ran %q, want %q", got, want)
	}
	want := strings.Repeat("192.0.2.7:4711 192.0.2.7 192.0.2.7:4711 ", 2)
	if got := strings.Join(seen, " ") + " "; got != want {
		t.Errorf("client addresses seen (stage, fast path, net/http): %q, want %q", got, want)
	}
}

// selfSigned returns a certificate for 127.0.0.1 made for the test, and a
// pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "guard test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// tlsStage makes the TLS server connection, under the stages' deadline.
func tlsStage(cfg *tls.Config) Stage {
	return func(c net.Conn) (StageResult, error) {
		tc := tls.Server(c, cfg)
		return StageResult{Conn: tc}, tc.Handshake()
	}
}

// TestStageTLS: behind a stage that makes the TLS server connection, the
// Listener reads the decrypted stream: a TLS client's requests are
// answered by the fast path and by net/http, on one connection.
func TestStageTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	addr, _ := fastServer(t, ListenerOptions{Stages: []Stage{tlsStage(&tls.Config{Certificates: []tls.Certificate{cert}})}},
		&http.Server{ReadHeaderTimeout: 5 * time.Second})
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	if code, _ := roundTrip(t, c, br, hostile.Get("/r")); code != 429 {
		t.Fatalf("status %d, want the fast path's 429", code)
	}
	if code, body := roundTrip(t, c, br, hostile.Req("POST /slow HTTP/1.1", hostile.HostAPI, "Content-Length: 3")+"abc"); code != 200 || body != "slow" {
		t.Fatalf("net/http: %d %q, want 200 \"slow\"", code, body)
	}
}

// TestStageHandoff: a connection a stage hands off goes to its new owner
// with every byte the client sent, and neither the fast path nor net/http
// sees it; it stays counted against MaxConnections until its new owner
// closes it.
func TestStageHandoff(t *testing.T) {
	handed := make(chan net.Conn, 1)
	var conns, offered, served atomic.Int64
	capped := make(chan CapEvent, 1)
	opts := ListenerOptions{
		MaxConnections: 1,
		OnCapped:       func(ev CapEvent) { capped <- ev },
		Stages: []Stage{func(c net.Conn) (StageResult, error) {
			if conns.Add(1) > 1 {
				return StageResult{}, nil // the next connection stays
			}
			return StageResult{Handoff: func(c net.Conn) { handed <- c }}, nil
		}},
		Answer: func(r *Request, out []byte) ([]byte, bool) {
			offered.Add(1)
			return append(out, fastAnswer...), true
		},
	}
	addr, _ := fastServer(t, opts, &http.Server{ConnState: func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			served.Add(1)
		}
	}})
	a := dial(t, addr)
	io.WriteString(a, hostile.Get("/r"))
	h := <-handed
	h.SetDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(hostile.Get("/r")))
	if _, err := io.ReadFull(h, got); err != nil || string(got) != hostile.Get("/r") {
		t.Fatalf("new owner read %q, %v; want the client's request whole", got, err)
	}
	io.WriteString(h, "mine\n")
	if line, err := bufio.NewReader(a).ReadString('\n'); line != "mine\n" {
		t.Fatalf("client read %q, %v; want the new owner's answer", line, err)
	}
	// The handed connection holds the one place: the next waits for it.
	b := dial(t, addr)
	if ev := <-capped; ev.ClosedIdle {
		t.Errorf("a handed-off connection was closed to make room")
	}
	h.Close()
	if code, _ := roundTrip(t, b, bufio.NewReader(b), hostile.Get("/r")); code != 429 {
		t.Fatalf("next connection: status %d, want 429", code)
	}
	if n := offered.Load(); n != 1 {
		t.Errorf("the fast path was offered %d requests, want 1 (the next connection's)", n)
	}
	if n := served.Load(); n != 0 {
		t.Errorf("net/http was handed %d connections, want none", n)
	}
}

// TestStageRefuses: a stage's error closes the connection, which is
// counted out and never served.
func TestStageRefuses(t *testing.T) {
	var open atomic.Int64
	refused := errors.New("refused")
	addr, _ := fastServer(t, ListenerOptions{
		OnConnections: func(_ string, d int) { open.Add(int64(d)) },
		Stages:        []Stage{func(net.Conn) (StageResult, error) { return StageResult{}, refused }},
	}, &http.Server{})
	c := dial(t, addr)
	io.WriteString(c, hostile.Get("/slow"))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d, %v; want the connection closed", n, err)
	}
	wait.For(t, 5*time.Second, "the refused connection counted out", func() bool { return open.Load() == 0 })
}

// TestStageStallsNoOther: a connection whose stage blocks holds only its
// own goroutine: another connection is set up and served meanwhile, by
// the fast path and by net/http.
func TestStageStallsNoOther(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{})
	var n atomic.Int64
	addr, _ := fastServer(t, ListenerOptions{Stages: []Stage{func(net.Conn) (StageResult, error) {
		if n.Add(1) == 1 {
			close(entered)
			<-release
		}
		return StageResult{}, nil
	}}}, &http.Server{ReadHeaderTimeout: time.Minute})
	dial(t, addr)
	<-entered
	c := dial(t, addr)
	br := bufio.NewReader(c)
	if code, _ := roundTrip(t, c, br, hostile.Get("/r")); code != 429 {
		t.Fatalf("status %d, want the fast path's 429", code)
	}
	if code, body := roundTrip(t, c, br, hostile.Get("/slow")); code != 200 || body != "slow" {
		t.Fatalf("net/http: %d %q", code, body)
	}
}

// TestStageDeadline: a stage that waits for bytes that never come (a
// PROXY header, a TLS hello) is ended by the stages' deadline, the header
// timeout from the accept, and the connection closed.
func TestStageDeadline(t *testing.T) {
	const header = 100 * time.Millisecond
	ended := make(chan error, 1)
	addr, _ := fastServer(t, ListenerOptions{Stages: []Stage{func(c net.Conn) (StageResult, error) {
		_, err := c.Read(make([]byte, 1))
		ended <- err
		return StageResult{}, err
	}}}, &http.Server{ReadHeaderTimeout: header})
	start := time.Now()
	c := dial(t, addr)
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d, %v; want the connection closed", n, err)
	}
	if d := time.Since(start); d < header || d > 5*time.Second {
		t.Errorf("closed after %v, want it closed at the header timeout (%v)", d.Round(time.Millisecond), header)
	}
	if err := <-ended; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the stage's read ended with %v, want its deadline", err)
	}
}

// TestStageListenerClose: closing the Listener closes the connections its
// stages hold (as net/http's Close does through it), and every goroutine
// of the Listener, the stages and the server stops.
func TestStageListenerClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Int64
	entered := make(chan struct{}, 2)
	l := NewListener(ln, ListenerOptions{
		ReadHeaderTimeout: time.Minute,
		OnConnections:     func(_ string, d int) { open.Add(int64(d)) },
		Stages: []Stage{func(c net.Conn) (StageResult, error) {
			entered <- struct{}{}
			_, err := c.Read(make([]byte, 1)) // the client sends nothing
			return StageResult{}, err
		}},
	})
	srv := &http.Server{ConnState: l.ConnState, ErrorLog: discardLog, ReadHeaderTimeout: time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	var clients []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		clients = append(clients, c)
		<-entered
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v, want http.ErrServerClosed", err)
	}
	for i, c := range clients {
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("client %d: read %d, %v; want the connection closed", i, n, err)
		}
	}
	wait.For(t, 5*time.Second, "the staged connections counted out", func() bool { return open.Load() == 0 })
}
