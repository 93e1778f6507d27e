package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
)

// The balancer of these tests is 127.0.0.2; other loopback addresses
// (127.0.0.3 and up: Linux answers on all of 127.0.0.0/8) are clients.

// forwardOrigin answers with the forwarding fields edge sent it.
func forwardOrigin(t *testing.T) *httptest.Server {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "xff=%s proto=%s", r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"))
	}))
	t.Cleanup(o.Close)
	return o
}

// proxyProtocolConfig is the config of a PROXY protocol test: the balancer
// 127.0.0.2 on both listeners, 10.9.9.9 a trusted proxy, one domain
// whose rule allows one request per client.
func proxyProtocolConfig(origin string, fast bool) string {
	return fmt.Sprintf(`
listen: "127.0.0.1:0"
admin_listen: %q
origin: %q
fastpath: %v
client_ip: {trusted_proxies: [10.9.9.9]}
proxy_protocol: {from: [127.0.0.2]}
tls:
  listen: "127.0.0.1:0"
  certificates: [{cert_file: api.pem, key_file: api.key}]
domains:
  - name: api
    hosts: [api.example.com]
    https_redirect: true
    rules: [{name: per-ip, limit: 1, period: 1h}]
`, adminAnyPort, origin, fast)
}

// ppV1 is a v1 header naming src (an IPv4 address) as the client.
func ppV1(src string) string {
	return "PROXY TCP4 " + src + " 192.0.2.1 40000 443\r\n"
}

// ppV2 is a v2 PROXY header naming src (an IPv4 address) as the client,
// with, when ssl, a PP2_TYPE_SSL TLV whose client bit is set and its
// PP2_SUBTYPE_SSL_VERSION, which must then follow.
func ppV2(src string, ssl bool) string {
	a := netip.MustParseAddr(src).As4()
	payload := append(a[:], 192, 0, 2, 1, 0x9c, 0x40, 0x01, 0xbb)
	if ssl {
		payload = append(payload, 0x20, 0x00, 0x0f, 0x01, 0, 0, 0, 0, 0x21, 0x00, 0x07)
		payload = append(payload, "TLSv1.3"...)
	}
	b := []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11")
	b = binary.BigEndian.AppendUint16(b, uint16(len(payload)))
	return string(append(b, payload...))
}

// ppLocal is a v2 LOCAL header: a balancer's own health check.
const ppLocal = "\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00"

// dialFrom connects to addr from the loopback address from, bounded by
// the test.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// exchangeOver sends header (if any) on a new connection from from to
// addr, then a GET for api.example.com with fields, in TLS over it if
// secure, and returns the status and body; 0 for a connection closed
// without an answer.
func exchangeOver(t *testing.T, e *tlsEdge, from, addr, header string, secure bool, fields string) (int, string) {
	t.Helper()
	c := dialFrom(t, from, addr)
	if _, err := io.WriteString(c, header); err != nil {
		return 0, ""
	}
	if secure {
		tc := tls.Client(c, &tls.Config{ServerName: "api.example.com", RootCAs: e.ca.Pool})
		if err := tc.Handshake(); err != nil {
			return 0, ""
		}
		c = tc
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.example.com\r\n"+fields+"\r\n"); err != nil {
		return 0, ""
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProxyProtocol: behind the balancer, each client its header names is
// a client of its own (its own bucket, X-Forwarded-For), on the plain and
// the TLS listener (the header before the handshake); a v2 SSL TLV makes
// the request https (X-Forwarded-Proto, no https_redirect); a LOCAL
// header keeps the balancer; client_ip.trusted_proxies applies to the
// header's client; a header from anyone else, and the balancer's
// connection without one, are closed; every result is counted. The same
// on both request paths.
func TestProxyProtocol(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fastpath %v", fast), func(t *testing.T) {
			e := startTLSEdge(t, proxyProtocolConfig(forwardOrigin(t).URL, fast))
			tests := []struct {
				name, from, header string
				secure             bool
				fields             string
				status             int
				body               string
			}{
				{"v1", "127.0.0.2", ppV1("198.51.100.1"), false, "", 308, ""},
				{"v1, same client", "127.0.0.2", ppV1("198.51.100.1"), false, "", 308, ""},
				{"v2 SSL", "127.0.0.2", ppV2("198.51.100.2", true), false, "", 200, "xff=198.51.100.2 proto=https"},
				{"v2 SSL, same client: its own bucket", "127.0.0.2", ppV2("198.51.100.2", true), false, "", 429, ""},
				{"v2 SSL, a client's X-Forwarded-For ignored", "127.0.0.2", ppV2("198.51.100.3", true), false,
					"X-Forwarded-For: 203.0.113.1\r\nX-Forwarded-Proto: http\r\n", 200, "xff=198.51.100.3 proto=https"},
				{"v2 SSL from a trusted proxy", "127.0.0.2", ppV2("10.9.9.9", true), false,
					"X-Forwarded-For: 203.0.113.2\r\n", 200, "xff=203.0.113.2, 10.9.9.9 proto=https"},
				{"v2 before TLS", "127.0.0.2", ppV2("198.51.100.4", false), true, "", 200, "xff=198.51.100.4 proto=https"},
				{"v1 before TLS", "127.0.0.2", ppV1("198.51.100.5"), true, "", 200, "xff=198.51.100.5 proto=https"},
				{"LOCAL keeps the balancer", "127.0.0.2", ppLocal, true, "", 200, "xff=127.0.0.2 proto=https"},
				{"a direct client", "127.0.0.3", "", true, "", 200, "xff=127.0.0.3 proto=https"},
				{"a header from a direct client", "127.0.0.4", ppV1("198.51.100.6"), false, "", 0, ""},
				{"a header from a direct client, TLS", "127.0.0.4", ppV2("198.51.100.6", false), true, "", 0, ""},
				{"the balancer without a header", "127.0.0.2", "", false, "", 0, ""},
				{"the balancer without a header, TLS", "127.0.0.2", "", true, "", 0, ""},
			}
			for _, tt := range tests {
				addr := e.public
				if tt.secure {
					addr = e.tls
				}
				status, body := exchangeOver(t, e, tt.from, addr, tt.header, tt.secure, tt.fields)
				if status != tt.status || tt.body != "" && body != tt.body {
					t.Errorf("%s: got %d %q, want %d %q", tt.name, status, body, tt.status, tt.body)
				}
			}
			var metrics string
			wait.For(t, 10*time.Second, "the results to be counted", func() bool {
				_, metrics = httpGet(t, "http://"+e.admin+"/metrics")
				return strings.Contains(metrics, `edge_proxy_protocol_total{pop="local",result="missing"} 2`)
			})
			for _, want := range []string{
				`edge_proxy_protocol_total{pop="local",result="v1"} 3`,
				`edge_proxy_protocol_total{pop="local",result="v2"} 5`,
				`edge_proxy_protocol_total{pop="local",result="local"} 1`,
				`edge_proxy_protocol_total{pop="local",result="untrusted"} 2`,
			} {
				if !strings.Contains(metrics, want) {
					t.Errorf("/metrics lacks %q:\n%s", want, grepLines(metrics, "edge_proxy_protocol"))
				}
			}
		})
	}
}

// TestProxyProtocolHAProxy: a real HAProxy in TCP mode in front of edge,
// from 127.0.0.2 with send-proxy-v2, relays two clients: edge keys and
// forwards each by its own address; behind a second frontend that
// terminates TLS (send-proxy-v2-ssl) the request is https.
func TestProxyProtocolHAProxy(t *testing.T) {
	bin := proxyBinary(t, "haproxy", "/usr/sbin/haproxy")
	e := startTLSEdge(t, proxyProtocolConfig(forwardOrigin(t).URL, true))
	dir := t.TempDir()
	// HAProxy reads a certificate and its key from one file.
	pem := filepath.Join(dir, "api-haproxy.pem")
	cert, err := os.ReadFile(filepath.Join(e.dir, "api.pem"))
	must(t, err)
	key, err := os.ReadFile(filepath.Join(e.dir, "api.key"))
	must(t, err)
	must(t, os.WriteFile(pem, append(cert, key...), 0o600))
	plain, secure := freePort(t), freePort(t)
	conf := fmt.Sprintf(`global
    nbthread 1
defaults
    mode tcp
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend plain
    bind 127.0.0.1:%d
    default_backend edge
frontend secure
    bind 127.0.0.1:%d ssl crt %s
    default_backend edge-ssl
backend edge
    server e %s send-proxy-v2 source 127.0.0.2
backend edge-ssl
    server e %s send-proxy-v2-ssl source 127.0.0.2
`, plain, secure, pem, e.public, e.public)
	cfg := filepath.Join(dir, "haproxy.cfg")
	must(t, os.WriteFile(cfg, []byte(conf), 0o644))
	startProxy(t, exec.Command(bin, "-db", "-f", cfg), fmt.Sprintf("127.0.0.1:%d", secure))

	tests := []struct {
		name, from string
		port       int
		secure     bool
		status     int
		body       string
	}{
		{"a client", "127.0.0.5", plain, false, 200, "xff=127.0.0.5 proto=http"},
		{"another client", "127.0.0.6", plain, false, 200, "xff=127.0.0.6 proto=http"},
		{"the first again: its own bucket", "127.0.0.5", plain, false, 429, ""},
		{"TLS at HAProxy", "127.0.0.7", secure, true, 200, "xff=127.0.0.7 proto=https"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// https_redirect sends plain requests away: ask the plain
			// frontend for the ACME challenge path, which it never
			// redirects.
			c := dialFrom(t, tt.from, fmt.Sprintf("127.0.0.1:%d", tt.port))
			if tt.secure {
				tc := tls.Client(c, &tls.Config{ServerName: "api.example.com", RootCAs: e.ca.Pool})
				must(t, tc.Handshake())
				c = tc
			}
			_, err := io.WriteString(c, "GET /.well-known/acme-challenge/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
			must(t, err)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			must(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || tt.body != "" && string(b) != tt.body {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, b, tt.status, tt.body)
			}
		})
	}
}

// TestProxyProtocolHTTP2: HTTP/2 behind the balancer, with h2c on the
// plain listener and ALPN h2 on the TLS one: each connection's requests
// are keyed and forwarded by the client its PROXY header names, and a v2
// SSL TLV makes the requests of an h2c connection https, as on HTTP/1.1.
func TestProxyProtocolHTTP2(t *testing.T) {
	e := startTLSEdge(t, strings.Replace(proxyProtocolConfig(forwardOrigin(t).URL, true),
		"proxy_protocol:", "h2c: true\nproxy_protocol:", 1))
	// get asks for / over a connection that begins with header, h2c on
	// the plain listener or h2 over TLS, and says the protocol, status and
	// body.
	get := func(header string, secure bool) (string, int, string) {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		p.SetHTTP2(true)
		dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
			to := e.public
			if secure {
				to = e.tls
			}
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
			c, err := d.DialContext(ctx, "tcp", to)
			if err != nil {
				return nil, err
			}
			if _, err := io.WriteString(c, header); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		}
		tr := &http.Transport{Protocols: &p, DialContext: dial,
			TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool, ServerName: "api.example.com"}}
		defer tr.CloseIdleConnections()
		scheme := "http"
		if secure {
			scheme = "https"
			tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dial(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				tc := tls.Client(c, &tls.Config{RootCAs: e.ca.Pool, ServerName: "api.example.com", NextProtos: []string{"h2"}})
				if err := tc.HandshakeContext(ctx); err != nil {
					c.Close()
					return nil, err
				}
				return tc, nil
			}
		}
		req, _ := http.NewRequest("GET", scheme+"://api.example.com/", nil)
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatalf("GET over %q: %v", header, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Proto, resp.StatusCode, string(b)
	}
	tests := []struct {
		name, header string
		secure       bool
		status       int
		body         string
	}{
		{"h2c, v2 SSL", ppV2("198.51.100.21", true), false, 200, "xff=198.51.100.21 proto=https"},
		{"h2c, v2 SSL, same client: its own bucket", ppV2("198.51.100.21", true), false, 429, ""},
		{"h2c, v2 without SSL: https_redirect", ppV2("198.51.100.22", false), false, 308, ""},
		{"h2c, v1 from a trusted proxy", ppV1("10.9.9.9"), false, 308, ""},
		{"h2 over TLS, v2", ppV2("198.51.100.23", false), true, 200, "xff=198.51.100.23 proto=https"},
		{"h2 over TLS, v1", ppV1("198.51.100.24"), true, 200, "xff=198.51.100.24 proto=https"},
	}
	for _, tt := range tests {
		proto, status, body := get(tt.header, tt.secure)
		if proto != "HTTP/2.0" || status != tt.status || tt.body != "" && body != tt.body {
			t.Errorf("%s: got %s %d %q, want HTTP/2.0 %d %q", tt.name, proto, status, body, tt.status, tt.body)
		}
	}
}
