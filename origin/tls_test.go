package origin

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/netpeek"
	"github.com/edgerate/edge/internal/testpki"
	"github.com/edgerate/edge/internal/wait"
)

// tlsOrigin is a TLS origin on 127.0.0.1 that answers each GET by its
// path: /close ends the connection after the answer (without saying so),
// /unasked sends bytes nobody asked for once the answer is out, anything
// else gets "ok" on a kept connection. It counts its connections and
// remembers what each negotiated.
type tlsOrigin struct {
	ln      net.Listener
	addr    string
	accepts atomic.Int64
	mu      sync.Mutex
	states  []tls.ConnectionState
	unasked chan struct{} // closed: /unasked's connection sends its bytes
	wg      sync.WaitGroup
}

func startTLSOrigin(t *testing.T, cfg *tls.Config) *tlsOrigin {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := &tlsOrigin{ln: ln, addr: ln.Addr().String(), unasked: make(chan struct{})}
	var conns sync.Map
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.accepts.Add(1)
			conns.Store(c, true)
			o.wg.Add(1)
			go func() {
				defer o.wg.Done()
				defer c.Close()
				o.serve(c.(*tls.Conn))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		o.wg.Wait()
	})
	return o
}

func (o *tlsOrigin) serve(c *tls.Conn) {
	if c.Handshake() != nil {
		return
	}
	o.mu.Lock()
	o.states = append(o.states, c.ConnectionState())
	o.mu.Unlock()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		switch req.URL.Path {
		case "/close":
			return
		case "/unasked":
			<-o.unasked
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nunasked")
		}
	}
}

// get sends GET path on pool and returns the body, putting the
// connection back.
func get(t *testing.T, pool *Pool, path string) (string, error) {
	t.Helper()
	req := &Request{Head: []byte("GET " + path + " HTTP/1.1\r\nHost: origin.test\r\n\r\n"), Replayable: true, Timeout: 5 * time.Second}
	c, resp, err := pool.RoundTrip(req, nil, nil, time.Now(), make([]byte, 4096))
	if err != nil {
		return "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.Close()
		return "", err
	}
	pool.Put(c, time.Now())
	return string(body), nil
}

// pki is a test's certificates: the origin's CA and its server
// certificate for origin.test and 127.0.0.1, another CA, and a client
// certificate of each.
type pki struct {
	ca, other             *testpki.CA
	server                testpki.Issued
	client, strangeClient testpki.Issued
}

func newPKI(t *testing.T) pki {
	dir := t.TempDir()
	k := pki{ca: testpki.NewCA(t, dir, "origin-ca"), other: testpki.NewCA(t, dir, "other-ca")}
	k.server = k.ca.Server(t, "server", "origin.test", "127.0.0.1")
	k.client = k.ca.Client(t, "edge")
	k.strangeClient = k.other.Client(t, "stranger")
	return k
}

// TestOriginTLSVerify: the pools' connections, and the transport's,
// verify the origin's certificate against RootCAs for ServerName (the
// URL's host by default), skip verifying with InsecureSkipVerify, present
// the client certificate an origin that requires one verifies, and a
// handshake that fails is a connect error (nothing was sent).
func TestOriginTLSVerify(t *testing.T) {
	k := newPKI(t)
	serverCfg := func(mutual bool) *tls.Config {
		c := &tls.Config{Certificates: []tls.Certificate{k.server.Pair}, NextProtos: []string{"http/1.1"}}
		if mutual {
			c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, k.ca.Pool
		}
		return c
	}
	plain, mutual := startTLSOrigin(t, serverCfg(false)), startTLSOrigin(t, serverCfg(true))
	// The server certificate is for origin.test and 127.0.0.1; a server
	// name it is not for fails.
	cases := []struct {
		name   string
		origin *tlsOrigin
		opts   TLSOptions
		ok     bool
	}{
		{"verified against the CA", plain, TLSOptions{RootCAs: k.ca.Pool}, true},
		{"system roots do not know the CA", plain, TLSOptions{}, false},
		{"another CA", plain, TLSOptions{RootCAs: k.other.Pool}, false},
		{"server name override", plain, TLSOptions{RootCAs: k.ca.Pool, ServerName: "origin.test"}, true},
		{"server name the certificate is not for", plain, TLSOptions{RootCAs: k.ca.Pool, ServerName: "elsewhere.test"}, false},
		{"insecure skip verify", plain, TLSOptions{InsecureSkipVerify: true}, true},
		{"client certificate", mutual, TLSOptions{RootCAs: k.ca.Pool, Certificates: []tls.Certificate{k.client.Pair}}, true},
		{"no client certificate", mutual, TLSOptions{RootCAs: k.ca.Pool}, false},
		{"client certificate of another CA", mutual, TLSOptions{RootCAs: k.ca.Pool, Certificates: []tls.Certificate{k.strangeClient.Pair}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.ID = tc.name
			tt := NewTLS(tc.opts)
			pools := NewPools(Settings{})
			defer pools.Close()
			body, err := get(t, pools.Pool(tc.origin.addr, tt), "/")
			if got := err == nil && body == "ok"; got != tc.ok {
				t.Fatalf("fast path: got body %q, error %v; want success %v", body, err, tc.ok)
			}
			s := Settings{TLS: tt}
			tr := s.Transport()
			defer tr.CloseIdleConnections()
			resp, terr := tr.RoundTrip(httpGet(t, "https://"+tc.origin.addr+"/"))
			if terr == nil {
				resp.Body.Close()
			}
			if got := terr == nil && resp.StatusCode == 200; got != tc.ok {
				t.Fatalf("transport: got error %v; want success %v", terr, tc.ok)
			}
			if tc.ok {
				return
			}
			// A handshake refused by edge is a connect error on both paths;
			// one refused by the origin (TLS 1.3 checks the client's
			// certificate after edge's handshake ends) fails the response.
			if strings.Contains(tc.name, "client certificate") {
				if f := Classify(err); f != FailConnect && f != FailReset {
					t.Errorf("fast path: failure %v, want a connect error or a reset", f)
				}
				return
			}
			if f := Classify(err); f != FailConnect {
				t.Errorf("fast path: %v classified %v, want FailConnect", err, f)
			}
			if f := Classify(terr); f != FailConnect {
				t.Errorf("transport: %v classified %v, want FailConnect", terr, f)
			}
		})
	}
}

func httpGet(t *testing.T, url string) *http.Request {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestOriginTLSPoolReuse: the fast path's TLS connections offer only
// http/1.1 by ALPN (to an origin that offers h2 first), are reused, and
// are resumed (a session ticket) when dialled again.
func TestOriginTLSPoolReuse(t *testing.T) {
	k := newPKI(t)
	o := startTLSOrigin(t, &tls.Config{Certificates: []tls.Certificate{k.server.Pair}, NextProtos: []string{"h2", "http/1.1"}})
	pools := NewPools(Settings{})
	defer pools.Close()
	pool := pools.Pool(o.addr, NewTLS(TLSOptions{RootCAs: k.ca.Pool, ID: "ca"}))
	for i := range 5 {
		if body, err := get(t, pool, "/"); err != nil || body != "ok" {
			t.Fatalf("request %d: body %q, error %v", i, body, err)
		}
	}
	if n := o.accepts.Load(); n != 1 {
		t.Errorf("5 requests one after another took %d connections, want 1", n)
	}
	// The origin closes it: the next connection resumes the session.
	if body, err := get(t, pool, "/close"); err != nil || body != "ok" {
		t.Fatalf("/close: body %q, error %v", body, err)
	}
	if body, err := get(t, pool, "/"); err != nil || body != "ok" {
		t.Fatalf("after /close: body %q, error %v", body, err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.states) != 2 {
		t.Fatalf("%d connections, want 2", len(o.states))
	}
	for i, st := range o.states {
		if st.NegotiatedProtocol != "http/1.1" {
			t.Errorf("connection %d negotiated %q, want http/1.1", i, st.NegotiatedProtocol)
		}
	}
	if !o.states[1].DidResume {
		t.Errorf("the second connection did not resume the first's session")
	}
}

// TestOriginTLSIdleLiveness: an idle pooled TLS connection is watched by
// its reader. TLS 1.3 session tickets, which a raw peek would take for
// unasked bytes, are consumed and leave it alive; one the origin closed,
// or sent unasked bytes on, is found dead and closed, and the next
// request goes on a new connection, not lost on the dead one (and never
// answered with the unasked bytes).
func TestOriginTLSIdleLiveness(t *testing.T) {
	k := newPKI(t)
	// An origin that asks for a client certificate (and takes none) sends
	// its session tickets once it has read the client's Finished, as
	// OpenSSL's servers do always: after edge's handshake has ended, onto
	// the socket of a connection edge may have pooled.
	o := startTLSOrigin(t, &tls.Config{Certificates: []tls.Certificate{k.server.Pair}, MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequestClientCert})
	pools := NewPools(Settings{})
	defer pools.Close()
	pool := pools.Pool(o.addr, NewTLS(TLSOptions{RootCAs: k.ca.Pool, ID: "ca"}))

	t.Run("session tickets", func(t *testing.T) {
		// A connection put in the pool before any read: the server's
		// tickets wait on its socket.
		c, err := pool.dial(&pools.settings)
		if err != nil {
			t.Fatal(err)
		}
		wait.For(t, 5*time.Second, "the session ticket on the socket", func() bool {
			pending, ok := netpeek.Pending(c.NetConn())
			return ok && pending
		})
		pool.Put(c, time.Now())
		wait.For(t, 5*time.Second, "the idle reader to consume the ticket", func() bool {
			pending, _ := netpeek.Pending(c.NetConn())
			return !pending
		})
		pool.mu.Lock()
		alive := c.alive()
		pool.mu.Unlock()
		if !alive {
			t.Fatal("a connection that received a session ticket was taken for dead")
		}
		before := o.accepts.Load()
		if body, err := get(t, pool, "/"); err != nil || body != "ok" {
			t.Fatalf("body %q, error %v", body, err)
		}
		if n := o.accepts.Load() - before; n != 0 {
			t.Errorf("the request took %d new connections, want the pooled one", n)
		}
	})

	for _, tc := range []struct{ name, path string }{
		{"closed by the origin", "/close"},
		{"unasked bytes", "/unasked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool.retire()
			pool.retired = false
			if body, err := get(t, pool, tc.path); err != nil || body != "ok" {
				t.Fatalf("%s: body %q, error %v", tc.path, body, err)
			}
			pool.mu.Lock()
			c := pool.idle[0]
			pool.mu.Unlock()
			if tc.path == "/unasked" {
				o.unasked <- struct{}{}
			}
			wait.For(t, 5*time.Second, "the idle reader to find the connection dead", func() bool {
				pool.mu.Lock()
				defer pool.mu.Unlock()
				return !c.alive()
			})
			before := o.accepts.Load()
			if body, err := get(t, pool, "/"); err != nil || body != "ok" {
				t.Fatalf("the next request: body %q, error %v", body, err)
			}
			if n := o.accepts.Load() - before; n != 1 {
				t.Errorf("the next request took %d new connections, want 1", n)
			}
		})
	}
}

// TestOriginTLSReadersStop: Close ends the idle connections' readers,
// and so does taking a connection back.
func TestOriginTLSReadersStop(t *testing.T) {
	k := newPKI(t)
	o := startTLSOrigin(t, &tls.Config{Certificates: []tls.Certificate{k.server.Pair}})
	pools := NewPools(Settings{})
	pool := pools.Pool(o.addr, NewTLS(TLSOptions{RootCAs: k.ca.Pool, ID: "ca"}))
	var cs []*Conn
	for range 3 {
		c, err := pool.dial(&pools.settings)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		pool.Put(c, time.Now())
	}
	taken := pool.take(time.Now())
	if !taken.takeBack() {
		t.Fatal("a live connection taken back was found dead")
	}
	if taken.idle.running {
		t.Fatal("the idle reader of a connection taken back is still running")
	}
	taken.Close()
	done := make(chan struct{})
	go func() {
		pools.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return: an idle reader kept running")
	}
	for _, c := range cs {
		if c != taken && len(c.idle.done) != 1 {
			t.Error("an idle reader had not returned when Close did")
		}
	}
}
