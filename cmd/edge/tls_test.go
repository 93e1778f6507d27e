package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/testpki"
	"github.com/edgerate/edge/internal/wait"
)

// testCA signs the certificates of a TLS test: package testpki's CA, its
// file ca.pem.
type testCA struct{ *testpki.CA }

func newTestCA(t testing.TB, dir string) *testCA {
	t.Helper()
	return &testCA{testpki.NewCAFile(t, dir, "ca", "edge test CA")}
}

// issue writes a certificate for names (DNS names or IP addresses), valid
// for validFor, and its key, as name.pem and name.key in dir.
func (ca *testCA) issue(t testing.TB, dir, name string, validFor time.Duration, names ...string) {
	t.Helper()
	ca.ServerIn(t, dir, name, validFor, names...)
}

// tlsEdge is an edge serving TLS, started in-process by run.
type tlsEdge struct {
	public, admin, tls string
	dir, cfg           string
	ca                 *testCA
	log                *edgeLog
}

// startTLSEdge writes the config (its tls section included) into a fresh
// directory with certificates api (api.example.com, 127.0.0.1), wild
// (*.example.net) and other (other.example.org), and runs edge on it.
func startTLSEdge(t *testing.T, config string) *tlsEdge {
	t.Helper()
	e := &tlsEdge{dir: t.TempDir(), log: newEdgeLog()}
	e.cfg = filepath.Join(e.dir, "edge.yaml")
	e.ca = newTestCA(t, e.dir)
	e.ca.issue(t, e.dir, "api", 24*time.Hour, "api.example.com", "127.0.0.1")
	e.ca.issue(t, e.dir, "wild", 24*time.Hour, "*.example.net")
	e.ca.issue(t, e.dir, "other", 24*time.Hour, "other.example.org")
	must(t, os.WriteFile(e.cfg, []byte(config), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"-config", e.cfg}, io.Discard, e.log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("edge did not stop")
		}
	})
	e.public, e.admin = e.log.waitStarted(t)
	e.log.mu.Lock()
	e.tls = e.log.tls
	e.log.mu.Unlock()
	if e.tls == "" {
		t.Fatalf("edge started without a TLS listener; log:\n%s", e.log)
	}
	return e
}

// client returns an HTTPS client that trusts the test CA, dials the TLS
// listener whatever the URL's host, and offers only conf's settings.
func (e *tlsEdge) client(conf *tls.Config) *http.Client {
	c := conf.Clone()
	if c.RootCAs == nil {
		c.RootCAs = e.ca.Pool
	}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   c,
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, e.tls)
		},
	}, Timeout: 10 * time.Second}
}

// handshake dials the TLS listener with conf and returns the certificate
// served (its first DNS name or address) or the handshake's error.
func (e *tlsEdge) handshake(conf *tls.Config) (string, tls.ConnectionState, error) {
	c := conf.Clone()
	if c.RootCAs == nil {
		c.RootCAs = e.ca.Pool
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", e.tls, c)
	if err != nil {
		return "", tls.ConnectionState{}, err
	}
	defer conn.Close()
	st := conn.ConnectionState()
	leaf := st.PeerCertificates[0]
	return leaf.Subject.CommonName, st, nil
}

// tlsOriginConfig is the config of a TLS test: an origin that echoes what
// edge told it, domains for the three certificates.
func tlsOriginConfig(origin, tlsExtra string) string {
	return fmt.Sprintf(`
listen: %q
admin_listen: %q
origin: %q
tls:
  listen: "127.0.0.1:0"
  certificates:
    - {cert_file: api.pem, key_file: api.key}
    - {cert_file: wild.pem, key_file: wild.key}
    - {cert_file: other.pem, key_file: other.key}
%s
domains:
  - name: api
    hosts: [api.example.com, 127.0.0.1]
    https_redirect: true
    hsts_max_age: 1h
    rules: [{name: per-ip, limit: 1000, period: 1m}]
  - name: net
    hosts: ["*.example.net"]
  - name: plain
    hosts: [plain.example.com]
`, publicAnyPort, adminAnyPort, origin, tlsExtra)
}

// echoOrigin answers with the forwarding fields edge sent and sets its own
// Strict-Transport-Security, which edge must replace.
func echoOrigin(t *testing.T) *httptest.Server {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Strict-Transport-Security", "max-age=1")
		fmt.Fprintf(w, "proto=%s ja4=%q", r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Ja4"))
	}))
	t.Cleanup(o.Close)
	return o
}

// TestTLSChoosesCertificateBySNI: SNI picks the certificate for an exact
// and a wildcard name; no SNI, and a name no certificate covers, get the
// default (the first, or default_certificate); the handshakes are counted.
func TestTLSChoosesCertificateBySNI(t *testing.T) {
	e := startTLSEdge(t, tlsOriginConfig(echoOrigin(t).URL, "  default_certificate: other.pem"))
	tests := []struct {
		name, sni, want string
	}{
		{"exact", "api.example.com", "api"},
		{"exact, upper case and a trailing dot", "API.Example.COM.", "api"},
		{"wildcard", "a.example.net", "wild"},
		{"wildcard at depth", "a.b.example.net", "wild"},
		{"the wildcard's suffix itself is not covered", "example.net", "other"},
		{"no SNI", "", "other"},
		{"unknown name", "unknown.example", "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := e.handshake(&tls.Config{ServerName: tt.sni, InsecureSkipVerify: true})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("served %q, want %q", got, tt.want)
			}
		})
	}
	// A verifying client accepts what it is served for its name (and
	// gets h2, which tls.http2 offers by default).
	if _, st, err := e.handshake(&tls.Config{ServerName: "x.example.net", NextProtos: []string{"h2", "http/1.1"}}); err != nil || st.Version != tls.VersionTLS13 || st.NegotiatedProtocol != "h2" {
		t.Errorf("verified handshake: %v, version %x, ALPN %q; want TLS 1.3 with h2", err, st.Version, st.NegotiatedProtocol)
	}
	// The server counts a handshake as it ends, which may be after the
	// client's end.
	var body string
	wait.For(t, 10*time.Second, "the handshakes to be counted", func() bool {
		_, body = httpGet(t, "http://"+e.admin+"/metrics")
		return strings.Contains(body, `edge_tls_handshake_seconds_count{pop="local"} 8`)
	})
	for _, want := range []string{
		`edge_tls_handshakes_total{pop="local",result="ok"} 6`, // five with a name covered or none, and the verified one
		`edge_tls_handshakes_total{pop="local",result="unknown_sni"} 2`,
		`edge_tls_certificate_expiry_timestamp_seconds{name="*.example.net",pop="local",source="wild.pem"}`,
		`edge_tls_handshake_seconds_count{pop="local"} 8`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grepLines(body, "edge_tls_"))
		}
	}
}

// TestTLSUnknownSNIReject: with unknown_sni: reject, a name no certificate
// covers ends with the alert unrecognized_name, and so does a ClientHello
// without SNI unless default_certificate is set.
func TestTLSUnknownSNIReject(t *testing.T) {
	origin := echoOrigin(t).URL
	for _, explicit := range []bool{false, true} {
		t.Run(fmt.Sprintf("default_certificate set %v", explicit), func(t *testing.T) {
			extra := "  unknown_sni: reject"
			if explicit {
				extra += "\n  default_certificate: api.pem"
			}
			e := startTLSEdge(t, tlsOriginConfig(origin, extra))
			if got, _, err := e.handshake(&tls.Config{ServerName: "api.example.com"}); err != nil || got != "api" {
				t.Errorf("a covered name: got %q, %v", got, err)
			}
			_, _, err := e.handshake(&tls.Config{ServerName: "unknown.example", InsecureSkipVerify: true})
			if err == nil || !strings.Contains(err.Error(), "unrecognized name") {
				t.Errorf("unknown name: got %v, want the alert unrecognized_name", err)
			}
			got, _, err := e.handshake(&tls.Config{InsecureSkipVerify: true})
			switch {
			case explicit && (err != nil || got != "api"):
				t.Errorf("no SNI with default_certificate: got %q, %v, want api", got, err)
			case !explicit && (err == nil || !strings.Contains(err.Error(), "unrecognized name")):
				t.Errorf("no SNI: got %q, %v, want the alert unrecognized_name", got, err)
			}
			want := 2
			if explicit {
				want = 1
			}
			line := fmt.Sprintf(`edge_tls_handshakes_total{pop="local",result="rejected"} %d`, want)
			wait.For(t, 10*time.Second, line, func() bool {
				_, body := httpGet(t, "http://"+e.admin+"/metrics")
				return strings.Contains(body, line)
			})
		})
	}
}

// TestTLSRefusesWeakClients: TLS 1.0 and 1.1, TLS 1.2 with only CBC or RSA
// key exchange suites, and min_version 1.3 against a TLS 1.2 client all
// fail the handshake; garbage and a slow ClientHello end the connection;
// plain HTTP gets 400 in plain text. Each is counted.
func TestTLSRefusesWeakClients(t *testing.T) {
	e := startTLSEdge(t, tlsOriginConfig(echoOrigin(t).URL, "")+"timeouts: {read_header: 1s}\n")
	tests := []struct {
		name string
		conf *tls.Config
	}{
		{"TLS 1.0", &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS10}},
		{"TLS 1.1", &tls.Config{MinVersion: tls.VersionTLS11, MaxVersion: tls.VersionTLS11}},
		{"TLS 1.2 with CBC suites only", &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA}}},
		{"TLS 1.2 with RSA key exchange only", &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{
			tls.TLS_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_RSA_WITH_AES_256_GCM_SHA384}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.conf.ServerName = "api.example.com"
			if _, st, err := e.handshake(tt.conf); err == nil {
				t.Errorf("handshake succeeded with version %x, suite %s", st.Version, tls.CipherSuiteName(st.CipherSuite))
			}
		})
	}
	if _, st, err := e.handshake(&tls.Config{ServerName: "api.example.com", MaxVersion: tls.VersionTLS12}); err != nil ||
		!strings.Contains(tls.CipherSuiteName(st.CipherSuite), "ECDHE_ECDSA_WITH_AES_128_GCM") {
		t.Errorf("a TLS 1.2 client: %v, suite %s; want ECDHE with AES-GCM", err, tls.CipherSuiteName(st.CipherSuite))
	}

	t.Run("garbage", func(t *testing.T) {
		c, err := net.Dial("tcp", e.tls)
		must(t, err)
		defer c.Close()
		_, _ = c.Write([]byte("\x16\x03\x01\x00\x05hello, not TLS at all"))
		must(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		if _, err := io.ReadAll(c); err != nil && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
			t.Errorf("the connection stayed open: %v", err)
		}
	})
	t.Run("slow ClientHello", func(t *testing.T) {
		c, err := net.Dial("tcp", e.tls)
		must(t, err)
		defer c.Close()
		_, _ = c.Write([]byte("\x16\x03\x01")) // and nothing more
		must(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		start := time.Now()
		_, _ = io.ReadAll(c)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("closed after %v, want about timeouts.read_header (1s)", d)
		}
	})
	t.Run("plain HTTP", func(t *testing.T) {
		c, err := net.Dial("tcp", e.tls)
		must(t, err)
		defer c.Close()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		must(t, err)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 400 || !strings.Contains(string(body), "HTTP request to an HTTPS server") {
			t.Errorf("got %d %q, want 400 saying so", resp.StatusCode, body)
		}
	})
	var body string
	t.Cleanup(func() { t.Log(grepLines(body, "edge_tls_handshakes")) })
	wait.For(t, 10*time.Second, "the failed handshakes to be counted", func() bool {
		_, body = httpGet(t, "http://"+e.admin+"/metrics")
		return strings.Contains(body, `edge_tls_handshakes_total{pop="local",result="error"} 6`)
	})
	if !strings.Contains(body, `edge_tls_handshakes_total{pop="local",result="plain_http"} 1`) {
		t.Errorf("/metrics:\n%s", grepLines(body, "edge_tls_handshakes"))
	}
	if n := strings.Count(e.log.String(), "tls handshake failed"); n < 1 || n > 3 {
		t.Errorf("logged %d failed handshakes, want a few (at most one a second): %s", n, e.log)
	}
}

// TestTLSRequests: a request over TLS reaches the origin with
// X-Forwarded-Proto: https and comes back with the domain's HSTS (the
// origin's replaced), on both request paths; a Host the certificate does
// not cover gets 421; the plain listener redirects a domain with
// https_redirect to https (but ACME challenges), with the port of
// tls.listen.
func TestTLSRequests(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fastpath %v", fast), func(t *testing.T) {
			e := startTLSEdge(t, tlsOriginConfig(echoOrigin(t).URL, "")+fmt.Sprintf("fastpath: %v\n", fast))
			c := e.client(&tls.Config{})
			resp, err := c.Get("https://api.example.com/x")
			must(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if got := resp.Header.Values("Strict-Transport-Security"); resp.StatusCode != 200 || string(body) != `proto=https ja4=""` ||
				len(got) != 1 || got[0] != "max-age=3600" {
				t.Errorf("got %d %q, HSTS %q; want 200 proto=https, one max-age=3600", resp.StatusCode, body, got)
			}
			resp, err = c.Get("https://a.example.net/")
			must(t, err)
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if got := resp.Header.Values("Strict-Transport-Security"); string(body) != `proto=https ja4=""` || len(got) != 1 || got[0] != "max-age=1" {
				t.Errorf("a domain without hsts_max_age: got %q, HSTS %q, want the origin's own", body, got)
			}

			// Host outside the connection's certificate.
			req, _ := http.NewRequest("GET", "https://api.example.com/", nil)
			req.Host = "plain.example.com"
			resp, err = c.Do(req)
			must(t, err)
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 421 || !strings.Contains(string(body), "certificate is not for this host") {
				t.Errorf("Host outside the certificate: got %d %q, want 421", resp.StatusCode, body)
			}

			// The plain listener redirects.
			_, tlsPort, _ := net.SplitHostPort(e.tls)
			noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			req, _ = http.NewRequest("POST", "http://"+e.public+"/a/b?c=d", strings.NewReader("body"))
			req.Host = "api.example.com:8080"
			resp, err = noFollow.Do(req)
			must(t, err)
			resp.Body.Close()
			if want := "https://api.example.com:" + tlsPort + "/a/b?c=d"; resp.StatusCode != 308 || resp.Header.Get("Location") != want {
				t.Errorf("redirect: got %d to %q, want 308 to %q", resp.StatusCode, resp.Header.Get("Location"), want)
			}
			req, _ = http.NewRequest("GET", "http://"+e.public+"/.well-known/acme-challenge/token", nil)
			req.Host = "api.example.com"
			resp, err = noFollow.Do(req)
			must(t, err)
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != `proto=http ja4=""` {
				t.Errorf("ACME challenge: got %d %q, want the origin's answer over plain HTTP", resp.StatusCode, body)
			}
			req, _ = http.NewRequest("GET", "http://"+e.public+"/", nil)
			req.Host = "plain.example.com"
			if resp, err = noFollow.Do(req); err != nil || resp.StatusCode != 200 || resp.Header.Get("Strict-Transport-Security") != "max-age=1" {
				t.Errorf("a domain without https_redirect over plain HTTP: %v %v", resp.StatusCode, err)
			} else {
				resp.Body.Close()
			}
			_, m := httpGet(t, "http://"+e.admin+"/metrics")
			if !strings.Contains(m, `edge_requests_total{domain="api",outcome="redirect",pop="local"} 1`) {
				t.Errorf("/metrics lacks the redirect:\n%s", grepLines(m, "outcome=\"redirect\""))
			}
		})
	}
}

// TestTLSReload: a reload swaps the certificate for new handshakes only
// (a connection open before keeps serving); a reload with a broken
// certificate fails whole, naming the file, and the running certificates
// stay; a certificate file that changes is reloaded without SIGHUP.
func TestTLSReload(t *testing.T) {
	e := startTLSEdge(t, tlsOriginConfig(echoOrigin(t).URL, ""))
	before, _, err := e.handshake(&tls.Config{ServerName: "api.example.com"})
	if err != nil || before != "api" {
		t.Fatalf("before: %q, %v", before, err)
	}
	old := e.client(&tls.Config{})
	old.Transport.(*http.Transport).DisableKeepAlives = false
	resp, err := old.Get("https://api.example.com/")
	must(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	// A new certificate for api.example.com, written over the old files:
	// the poll sees it.
	e.ca.issue(t, e.dir, "api2", 48*time.Hour, "api.example.com", "127.0.0.1")
	for _, ext := range []string{".pem", ".key"} {
		b, err := os.ReadFile(filepath.Join(e.dir, "api2"+ext))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(e.dir, "api"+ext), b, 0o600))
	}
	wait.For(t, 10*time.Second, "the new certificate to be served", func() bool {
		got, _, err := e.handshake(&tls.Config{ServerName: "api.example.com"})
		return err == nil && got == "api2"
	})
	// The connection opened before keeps its certificate.
	resp, err = old.Get("https://api.example.com/")
	must(t, err)
	if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != "api" || resp.TLS.DidResume {
		t.Errorf("the open connection: served %q (resumed %v), want the old api on the same connection", cn, resp.TLS.DidResume)
	}
	resp.Body.Close()

	// A broken key fails the reload whole.
	must(t, os.WriteFile(filepath.Join(e.dir, "wild.key"), []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600))
	wait.For(t, 10*time.Second, "the failed reload", func() bool { return strings.Contains(e.log.String(), "configuration reload failed") })
	if log := e.log.String(); !strings.Contains(log, `tls.certificates[1]: cert_file \"wild.pem\" with key_file \"wild.key\"`) || strings.Contains(log, "AAAA") {
		t.Errorf("the failure does not name the file, or shows the key:\n%s", log)
	}
	if got, _, err := e.handshake(&tls.Config{ServerName: "a.example.net"}); err != nil || got != "wild" {
		t.Errorf("after the failed reload: served %q, %v, want the running wild", got, err)
	}
	if got, _, err := e.handshake(&tls.Config{ServerName: "api.example.com"}); err != nil || got != "api2" {
		t.Errorf("after the failed reload: served %q, %v, want api2", got, err)
	}
}

// TestTLSCheckFlag: -check loads the certificates: a missing file and a key
// that does not match are errors naming the file; expiry within a week is
// a warning.
func TestTLSCheckFlag(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	ca.issue(t, dir, "a", 3*24*time.Hour, "a.example.com")
	ca.issue(t, dir, "b", 24*time.Hour, "b.example.com")
	cfg := func(certs string) string {
		p := filepath.Join(dir, "edge.yaml")
		must(t, os.WriteFile(p, []byte("tls: {listen: \"127.0.0.1:0\", certificates: ["+certs+"]}\ndomains: [{hosts: [\"*\"], respond: {body: ok}}]\n"), 0o600))
		return p
	}
	tests := []struct {
		name, certs string
		code        int
		want        string
	}{
		{"valid, expiring", "{cert_file: a.pem, key_file: a.key}", 0, `warning: tls.certificates[0]: "a.pem" expires on`},
		{"missing file", "{cert_file: a.pem, key_file: nope.key}", 1, `tls.certificates[0]: key_file "nope.key": no such file or directory`},
		{"mismatched key", "{cert_file: a.pem, key_file: b.key}", 1, `tls.certificates[0]: cert_file "a.pem" with key_file "b.key": tls: private key does not match public key`},
		{"not PEM", "{cert_file: edge.yaml, key_file: a.key}", 1, `tls.certificates[0]: cert_file "edge.yaml": not a PEM certificate`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			code := run(context.Background(), []string{"-check", "-config", cfg(tt.certs)}, &out, &out)
			if code != tt.code || !strings.Contains(out.String(), tt.want) {
				t.Errorf("got %d:\n%s\nwant %d with %q", code, out.String(), tt.code, tt.want)
			}
		})
	}
}

// TestTLSRealClients: curl and openssl s_client, as a user runs them.
func TestTLSRealClients(t *testing.T) {
	e := startTLSEdge(t, tlsOriginConfig(echoOrigin(t).URL, ""))
	_, port, _ := net.SplitHostPort(e.tls)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	out, err := exec.Command("curl", "-sS", "--cacert", e.ca.File, "--resolve", "api.example.com:"+port+":127.0.0.1",
		"-D", "-", "https://api.example.com:"+port+"/v1").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "proto=https") || !strings.Contains(string(out), "strict-transport-security: max-age=3600") &&
		!strings.Contains(string(out), "Strict-Transport-Security: max-age=3600") {
		t.Errorf("curl: %v\n%s", err, out)
	}
	out, err = exec.Command("curl", "-sS", "--cacert", e.ca.File, "--tls-max", "1.1", "--resolve", "api.example.com:"+port+":127.0.0.1",
		"https://api.example.com:"+port+"/").CombinedOutput()
	if err == nil {
		t.Errorf("curl --tls-max 1.1 succeeded:\n%s", out)
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed")
	}
	for _, tt := range []struct{ sni, want string }{{"a.example.net", "CN = wild"}, {"other.example.org", "CN = other"}} {
		cmd := exec.Command("openssl", "s_client", "-connect", e.tls, "-servername", tt.sni, "-CAfile", e.ca.File, "-verify_return_error")
		cmd.Stdin = strings.NewReader("")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), tt.want) || !strings.Contains(string(out), "Verify return code: 0 (ok)") {
			t.Errorf("openssl s_client -servername %s: %v\n%s", tt.sni, err, out)
		}
	}
	cmd := exec.Command("openssl", "s_client", "-connect", e.tls, "-servername", "api.example.com", "-tls1_2", "-cipher", "AES128-SHA")
	cmd.Stdin = strings.NewReader("")
	if out, err := cmd.CombinedOutput(); err == nil && strings.Contains(string(out), "Cipher is AES128-SHA") {
		t.Errorf("openssl negotiated a CBC suite with RSA key exchange:\n%s", out)
	}
}

// TestTLSHSTSOnEveryAnswer: over TLS, every final answer of a domain with
// hsts_max_age carries its Strict-Transport-Security once, on both request
// paths (each request sent twice on one connection: the second may be the
// fast path's) and over HTTP/2: a forward (the origin's own replaced), a forward after a
// 103 (the 103, an interim response, goes as the origin sent it), edge's
// 502 for an origin that cannot be reached, 413 for a body over
// max_request_body (declared, or found so while read), 429, and 508 for
// a request that came back to the node (its Via as the origin saw it).
func TestTLSHSTSOnEveryAnswer(t *testing.T) {
	var via atomic.Value // the Via field of the last request the origin saw
	via.Store("")
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		via.Store(r.Header.Get("Via"))
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Strict-Transport-Security", "max-age=1")
		if r.URL.Path == "/early" {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(origin.Close)
	down, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	downAddr := down.Addr().String()
	down.Close() // nothing listens there: 502
	for _, run := range []struct{ fast, h2 bool }{{true, false}, {false, false}, {true, true}} {
		fast := run.fast
		t.Run(fmt.Sprintf("fastpath %v, HTTP/2 %v", fast, run.h2), func(t *testing.T) {
			e := startTLSEdge(t, fmt.Sprintf(`
listen: %q
admin_listen: %q
origin: %q
fastpath: %v
max_request_body: 4
tls:
  listen: "127.0.0.1:0"
  certificates: [{cert_file: api.pem, key_file: api.key}, {cert_file: wild.pem, key_file: wild.key}]
domains:
  - name: api
    hosts: [api.example.com]
    hsts_max_age: 1h
    rules: [{name: limited, limit: 1, period: 1h, match: {path_prefix: /limited}}]
  - name: down
    hosts: [a.example.net]
    origin: "http://%s"
    hsts_max_age: 2h
`, publicAnyPort, adminAnyPort, origin.URL, fast, downAddr))
			tests := []struct {
				name, host, method, path, body string
				status                         int
				hsts                           string
			}{
				{"forward", "api.example.com", "GET", "/", "", 200, "max-age=3600"},
				{"forward after a 103", "api.example.com", "GET", "/early", "", 200, "max-age=3600"},
				{"origin unreachable", "a.example.net", "GET", "/", "", 502, "max-age=7200"},
				{"body too large", "api.example.com", "POST", "/", "too large", 413, "max-age=3600"},
				{"body too large, chunked", "api.example.com", "POST", "/chunked", "too large", 413, "max-age=3600"},
				{"refused", "api.example.com", "GET", "/limited", "", 429, "max-age=3600"},
				{"loop", "api.example.com", "GET", "/loop", "", 508, "max-age=3600"},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					conf := &tls.Config{}
					if run.h2 {
						conf.NextProtos = []string{"h2", "http/1.1"}
					}
					c := e.client(conf)
					tr := c.Transport.(*http.Transport)
					tr.DisableKeepAlives, tr.ForceAttemptHTTP2 = false, run.h2
					defer c.CloseIdleConnections()
					for i := range 2 {
						var early []string
						trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
							early = append(early, fmt.Sprintf("%d %q", code, h.Values("Strict-Transport-Security")))
							return nil
						}}
						req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
							tc.method, "https://"+tc.host+tc.path, strings.NewReader(tc.body))
						if tc.path == "/chunked" {
							req.ContentLength = -1 // of unknown length: read on either path, not judged by its declared length
						}
						if tc.name == "loop" {
							req.Header.Set("Via", via.Load().(string)) // set by the forwards before it
						}
						resp, err := c.Do(req)
						must(t, err)
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						got := resp.Header.Values("Strict-Transport-Security")
						status := tc.status
						if tc.name == "refused" && i == 0 {
							status = 200 // the first is within the limit
						}
						if resp.StatusCode != status || len(got) != 1 || got[0] != tc.hsts {
							t.Errorf("request %d: %d with Strict-Transport-Security %q, want %d with %s once", i, resp.StatusCode, got, status, tc.hsts)
						}
						if h2 := resp.ProtoMajor == 2; h2 != run.h2 {
							t.Errorf("request %d: over %s, want HTTP/2 %v", i, resp.Proto, run.h2)
						}
						if tc.path == "/early" && (len(early) != 1 || early[0] != `103 ["max-age=1"]`) {
							t.Errorf("request %d: 1xx %q, want one 103 as the origin sent it, with its own max-age=1", i, early)
						}
					}
				})
			}
		})
	}
}
