package proxy

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/testpki"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
)

// tlsGroupOrigin is an https origin on 127.0.0.1 whose certificate is for
// origin.test alone (so that reaching it at https://127.0.0.1 needs
// server_name), that requires a client certificate of its CA, and answers
// with the common name of the one it got and the protocol it spoke.
type tlsGroupOrigin struct {
	*httptest.Server
	got   atomic.Int64
	conns atomic.Int64 // accepted
}

func startTLSGroupOrigin(t *testing.T, ca *testpki.CA, mutual bool) *tlsGroupOrigin {
	t.Helper()
	cert := ca.Server(t, "origin", "origin.test")
	o := &tlsGroupOrigin{}
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.got.Add(1)
		cn := "none"
		if len(r.TLS.PeerCertificates) > 0 {
			cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		fmt.Fprintf(w, "%s %s %s", cn, r.TLS.NegotiatedProtocol, r.Proto)
	}))
	// h2 offered first: the fast path takes http/1.1 all the same.
	o.TLS = &tls.Config{Certificates: []tls.Certificate{cert.Pair}, NextProtos: []string{"h2", "http/1.1"}}
	o.Config.ErrorLog = discardLog // the refused handshakes
	o.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			o.conns.Add(1)
		}
	}
	if mutual {
		o.TLS.ClientAuth, o.TLS.ClientCAs = tls.RequireAndVerifyClientCert, ca.Pool
	}
	o.EnableHTTP2 = true
	o.StartTLS()
	t.Cleanup(o.Close)
	return o
}

// TestOriginTLSBothPaths: a domain's origin_tls is spoken on both request
// paths and by its health checks: its server's certificate verified
// against ca_file for server_name, the client certificate presented to an
// origin that requires one. A certificate the origin refuses, or one edge
// cannot verify, is a 502 counted as an upstream error.
func TestOriginTLSBothPaths(t *testing.T) {
	dir := t.TempDir()
	ca, other := testpki.NewCA(t, dir, "ca"), testpki.NewCA(t, dir, "other")
	client, stranger := ca.Client(t, "edge"), other.Client(t, "stranger")
	o := startTLSGroupOrigin(t, ca, true)
	keyPEM, err := os.ReadFile(client.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		tls    rules.OriginTLSConfig
		status int
		body   string // of the fast path; the net/http path's may be HTTP/2
	}{
		{"mutual TLS", rules.OriginTLSConfig{CAFile: ca.File, ServerName: "origin.test", ClientCertFile: client.CertFile, ClientKeyFile: client.KeyFile},
			200, "edge http/1.1 HTTP/1.1"},
		{"insecure skip verify", rules.OriginTLSConfig{InsecureSkipVerify: true, ClientCertFile: client.CertFile, ClientKeyFile: client.KeyFile},
			200, "edge http/1.1 HTTP/1.1"},
		{"a client certificate the origin refuses", rules.OriginTLSConfig{CAFile: ca.File, ServerName: "origin.test",
			ClientCertFile: stranger.CertFile, ClientKeyFile: stranger.KeyFile}, 502, ""},
		{"no client certificate", rules.OriginTLSConfig{CAFile: ca.File, ServerName: "origin.test"}, 502, ""},
		{"the certificate is not for the URL's host", rules.OriginTLSConfig{CAFile: ca.File, ClientCertFile: client.CertFile, ClientKeyFile: client.KeyFile}, 502, ""},
		{"an origin of another CA", rules.OriginTLSConfig{CAFile: other.File, ServerName: "origin.test", ClientCertFile: client.CertFile, ClientKeyFile: client.KeyFile}, 502, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oc := tc.tls
			dc := rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(o.URL), OriginTLS: &oc,
				Health: &rules.HealthConfig{Path: "/healthz", Interval: 100 * time.Millisecond, UnhealthyAfter: 100}}}
			ge := newGroupEnv(t, dc, rules.TimeoutsConfig{})
			before := o.got.Load()
			for _, addr := range []string{ge.fast, ge.slow} {
				st, body, _ := ge.send(t, addr, "GET", "")
				if st != tc.status || addr == ge.fast && tc.body != "" && body != tc.body ||
					addr == ge.slow && tc.status == 200 && !strings.HasPrefix(body, "edge ") {
					t.Errorf("%s: got %d %q, want %d %q", map[bool]string{true: "fast", false: "net/http"}[addr == ge.fast], st, body, tc.status, tc.body)
				}
			}
			if n := ge.fastAnswered.Load(); n != 1 {
				t.Errorf("the fast path answered %d requests, want 1 (https servers are forwarded on it)", n)
			}
			s := ge.proxy.state.Load().domains[0].group("").origins.Servers()[0]
			wait.For(t, 5*time.Second, "a health check", func() bool { at, _ := s.LastCheck(); return !at.IsZero() })
			_, outcome := s.LastCheck()
			if passed := strings.HasPrefix(outcome, "passed"); passed != (tc.status == 200) {
				t.Errorf("health check: %q, want passed %v", outcome, tc.status == 200)
			}
			metrics := metricsBody(t, ge.env)
			if tc.status != 200 {
				want := fmt.Sprintf(`edge_origin_requests_total{code_class="error",domain="api",route="",server=%q} 2`, o.URL)
				if !strings.Contains(metrics, want) {
					t.Errorf("metrics lack %s", want)
				}
				if o.got.Load() != before {
					t.Errorf("the origin answered a request over a connection it should have refused")
				}
			}
			// The key is in no output: metrics, /v1/origins, /v1/config.
			origins, _ := json.Marshal(ge.proxy.originsView())
			config, _ := json.Marshal(ge.proxy.configView())
			for _, out := range []string{metrics, string(origins), string(config)} {
				if strings.Contains(out, string(keyPEM[40:80])) {
					t.Errorf("the client key's content is shown:\n%s", out)
				}
			}
		})
	}
}

// TestOriginTLSReload: a reload that keeps a group's origin_tls keeps its
// pooled connections; one that changes it (another client certificate)
// dials anew, with the new certificate, on both paths.
func TestOriginTLSReload(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	one, two := ca.Client(t, "one"), ca.Client(t, "two")
	o := startTLSGroupOrigin(t, ca, true)
	cfg := func(c testpki.Issued) rules.DomainConfig {
		return rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(o.URL),
			OriginTLS: &rules.OriginTLSConfig{CAFile: ca.File, ServerName: "origin.test", ClientCertFile: c.CertFile, ClientKeyFile: c.KeyFile}}}
	}
	ge := newGroupEnv(t, cfg(one), rules.TimeoutsConfig{})
	reload := func(dc rules.DomainConfig) {
		t.Helper()
		dc.Name, dc.Hosts, dc.Rules = "api", []string{"api.example.com"}, []rules.RuleConfig{rule("all", 1000000, time.Minute)}
		table, err := rules.Compile(rules.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1", Domains: []rules.DomainConfig{dc}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ge.proxy.Reload(table, "h"); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(step, cn string, newConns int64) {
		t.Helper()
		before := o.conns.Load()
		for range 3 {
			if st, body, _ := ge.send(t, ge.fast, "GET", ""); st != 200 || body != cn+" http/1.1 HTTP/1.1" {
				t.Fatalf("%s: got %d %q, want 200 from %s", step, st, body, cn)
			}
		}
		if st, body, _ := ge.send(t, ge.slow, "GET", ""); st != 200 || !strings.HasPrefix(body, cn+" ") {
			t.Fatalf("%s, net/http: got %d %q, want 200 from %s", step, st, body, cn)
		}
		if n := o.conns.Load() - before; n > newConns {
			t.Errorf("%s: %d new connections, want at most %d", step, n, newConns)
		}
	}
	expect("first", "one", 2) // one a path
	reload(cfg(one))
	expect("the same origin_tls", "one", 0)
	reload(cfg(two))
	expect("another client certificate", "two", 2)
}

// TestOriginTLSPerRoute: a route of https servers speaks its own
// origin_tls (mutual TLS) on both paths, beside the domain's own http
// servers; a route of http servers ignores the origin_tls it inherits
// from a domain of https servers.
func TestOriginTLSPerRoute(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	client := ca.Client(t, "edge")
	o, plain := startTLSGroupOrigin(t, ca, true), startGroupOrigin(t, "plain")
	oc := rules.OriginTLSConfig{CAFile: ca.File, ServerName: "origin.test", ClientCertFile: client.CertFile, ClientKeyFile: client.KeyFile}
	for _, tc := range []struct {
		name string
		dc   rules.DomainConfig
	}{
		{"the route's own", rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(plain.URL)},
			Routes: []rules.RouteConfig{{Name: "secure", Match: &rules.RouteMatchConfig{PathPrefix: "/x"},
				UpstreamConfig: rules.UpstreamConfig{Origins: origins(o.URL), OriginTLS: &oc}}}}},
		{"the domain's, ignored by an http route", rules.DomainConfig{UpstreamConfig: rules.UpstreamConfig{Origins: origins(o.URL), OriginTLS: &oc},
			Routes: []rules.RouteConfig{{Name: "plain", Match: &rules.RouteMatchConfig{PathPrefix: "/other"},
				UpstreamConfig: rules.UpstreamConfig{Origins: origins(plain.URL)}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ge := newGroupEnv(t, tc.dc, rules.TimeoutsConfig{})
			for _, addr := range []string{ge.fast, ge.slow} {
				if st, body, _ := ge.send(t, addr, "GET", ""); st != 200 || !strings.HasPrefix(body, "edge ") { // /x: the https servers
					t.Errorf("/x on %s: got %d %q, want 200 from the https origin, which saw edge's certificate", addr, st, body)
				}
				if st, body := ge.get(addr, "/other"); st != 200 || body != "plain" {
					t.Errorf("/other on %s: got %d %q, want 200 from the http origin", addr, st, body)
				}
			}
			if n := ge.fastAnswered.Load(); n < 2 {
				t.Errorf("the fast path answered %d requests, want both of its own (https and http groups alike)", n)
			}
		})
	}
}
