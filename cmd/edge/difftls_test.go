package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/proxy"
	"github.com/edgerate/edge/rules"
)

// The differential tests over TLS: the same sequences as over plain HTTP
// (fastPathCases, forwardSeqs), and a few of TLS's own, sent over an HTTPS
// connection to edges whose HTTPS listener is joined to the plain one as
// edge's listen does, so that what a request's TLS changes is compared on
// both paths too: X-Forwarded-Proto https, a domain's HSTS, 421 for a
// Host the certificate is not for, tls.fingerprint_header with the
// client's JA4 (the same client settings, hence the same JA4, on both
// edges), rules keyed by ja4, and, on the plain listener, https_redirect.

// diffTLS is the certificate the TLS variants serve, for every host of
// diffConfig, fwdConfig and bodyConfig but uncovered.example.com (and the sentinel's
// nobody.example.com), and the client settings that trust it. One is made
// for a test and shared by its edges, so that both paths' metrics name one
// expiry.
type diffTLS struct {
	dir    string
	client *tls.Config
}

func newDiffTLS(t testing.TB) *diffTLS {
	t.Helper()
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	ca.issue(t, dir, "diff", 24*time.Hour, "api.example.com", "www.example.com", "asked.example.com",
		"plain.example.com", "limited.example.com", "small.example.com", "stream.example.com", "once.example.com",
		"tok.example.com", "anon.example.com", "gql.example.com", "plans.example.com", "routed.example.com")
	return &diffTLS{dir: dir, client: &tls.Config{ServerName: "api.example.com", RootCAs: ca.Pool}}
}

// section is the tls section serving f's certificate, with the JA4 sent to
// the origin in X-JA4.
func (f *diffTLS) section() string {
	return fmt.Sprintf("tls:\n  listen: \"127.0.0.1:0\"\n  fingerprint_header: X-JA4\n  certificates: [{cert_file: %q, key_file: %q}]\n",
		filepath.Join(f.dir, "diff.pem"), filepath.Join(f.dir, "diff.key"))
}

// edits applies each edit of cfg, an anchor and what is put after it, and
// fails t if an anchor is not there (the config it edits changed).
func edits(t testing.TB, cfg string, anchorThen ...string) string {
	t.Helper()
	for i := 0; i < len(anchorThen); i += 2 {
		anchor := anchorThen[i]
		if !strings.Contains(cfg, anchor) {
			t.Fatalf("the config has no %q to edit:\n%s", anchor, cfg)
		}
		cfg = strings.Replace(cfg, anchor, anchor+anchorThen[i+1], 1)
	}
	return cfg
}

// diffConfig is diffConfig serving TLS: api redirects plain requests to
// https, has HSTS and two rules keyed by ja4 (under /ja4/: alone, limit 3;
// under /ja4/ip/: with the address, limit 2); uncovered.example.com, a
// domain with HSTS of its own, is not the certificate's.
func (f *diffTLS) diffConfig(t testing.TB) string {
	return edits(t, diffConfig,
		"    hosts: [api.example.com]\n", "    https_redirect: true\n    hsts_max_age: 1h\n",
		"      - {name: hidden, limit: 100, period: 1m, key: [host], headers: none}\n",
		"      - {name: per-ja4, limit: 3, period: 1m, key: [ja4], match: {path_prefix: /ja4/}}\n"+
			"      - {name: per-ip-ja4, limit: 2, period: 1m, key: [ip, ja4], match: {path_prefix: /ja4/ip/}}\n",
		"      - {name: per-ip, limit: 1, period: 1m, key: [ip]}\n", "  - name: uncovered\n    hosts: [uncovered.example.com]\n    hsts_max_age: 2h\n",
	) + f.section()
}

// fwdConfig is fwdConfig serving TLS: limited has HSTS (replacing the
// origin's own) and counts by ja4 too, never refusing;
// uncovered.example.com is not the certificate's.
func (f *diffTLS) fwdConfig(t testing.TB) string {
	return edits(t, fwdConfig,
		"    hosts: [limited.example.com]\n", "    hsts_max_age: 1h\n",
		"      - {name: per-ip, limit: 1000000, period: 1m, key: [ip]}\n",
		"      - {name: per-ja4, limit: 1000000, period: 1m, key: [ja4]}\n  - name: uncovered\n    hosts: [uncovered.example.com]\n",
	) + f.section()
}

// bodyConfig is bodyConfig serving TLS: small, stream and once have HSTS,
// on their refusals too.
func (f *diffTLS) bodyConfig(t testing.TB) string {
	return edits(t, bodyConfig,
		"    hosts: [small.example.com]\n", "    hsts_max_age: 1h\n",
		"    hosts: [stream.example.com]\n", "    hsts_max_age: 1h\n",
		"    hosts: [once.example.com]\n", "    hsts_max_age: 1h\n",
	) + f.section()
}

// join binds the HTTPS listener of table for p, as edge's listen does
// (tlsSocket), joins it to ln, the plain socket, and gives srv's requests
// their connection's TLS; ds's client then connects to it. Both edges of a
// test redirect to port 8443 (the port https_redirect names), so that
// their redirects are the same bytes.
func (f *diffTLS) join(t testing.TB, table *rules.Table, p *proxy.Proxy, ln net.Listener, srv *http.Server, ds *diffServer) net.Listener {
	t.Helper()
	set, err := loadCertificates("", table)
	must(t, err)
	sock, _, _, err := tlsSocket(table, set, p, nil, nil, "", "", nil) // no PROXY header, HTTP/1.1 only, no ACME
	must(t, err)
	p.SetHTTPSPort(8443)
	joined, err := guard.Join(guard.Socket{Listener: ln, Name: proxy.ListenerPublic}, sock)
	must(t, err)
	srv.ConnContext = proxy.ConnContext(guard.TLSOf, guard.FrontOf)
	ds.tls, ds.clientTLS = sock.Listener.Addr().String(), f.client
	return joined
}

// tlsCases are the fast path's differential sequences of TLS's own.
func tlsCases() []diffCase {
	api, uncovered := "api.example.com", "uncovered.example.com"
	prime := repeat(get(api, "/a"), 3)
	then := func(steps ...string) []string { return append(append([]string(nil), prime...), steps...) }
	const (
		misdirected = "HTTP/1.1 421 Misdirected Request\r\n"
		hsts        = "Strict-Transport-Security: max-age=3600\r\n"
		redirect    = "HTTP/1.1 308 Permanent Redirect\r\n"
	)
	return []diffCase{
		{name: "HSTS", steps: repeat(get(api, "/a"), 5), wait: true, limit: 100, fast: true, has: hsts},
		{name: "HSTS on a refusal", steps: repeat(get(api, "/a"), 5), wait: true, limit: 1, fast: true, has: "HTTP/1.1 429 Too Many Requests\r\n"},
		{name: "ja4 rule", steps: repeat(get(api, "/ja4/a"), 6), wait: true, limit: 100, fast: true, has: "HTTP/1.1 429 Too Many Requests\r\n"},
		{name: "ip and ja4 rule", steps: repeat(get(api, "/ja4/ip/a"), 5), wait: true, limit: 100, fast: true, has: "HTTP/1.1 429 Too Many Requests\r\n"},
		{name: "ja4 rule, pipelined", steps: []string{strings.Repeat(get(api, "/ja4/a"), 6)}, limit: 100, has: "HTTP/1.1 429 Too Many Requests\r\n"},
		{name: "host the certificate is not for", steps: then(get(uncovered, "/a"), get(api, "/a")), wait: true, limit: 100, fast: true, has: misdirected},
		{name: "host the certificate is not for, HSTS", steps: then(get(uncovered, "/a")), wait: true, limit: 100, has: "Strict-Transport-Security: max-age=7200\r\n"},
		{name: "host the certificate is not for, HEAD", steps: then(hostile.Req("HEAD /a HTTP/1.1", "Host: "+uncovered), get(api, "/a")), wait: true, limit: 100, has: misdirected},
		{name: "host the certificate is not for, POST with a body", steps: then(hostile.Req("POST /a HTTP/1.1", "Host: "+uncovered, "Content-Length: 5")+"hello", get(api, "/a")), wait: true, limit: 100, has: misdirected},
		{name: "host the certificate is not for, refused too", steps: then(get(uncovered, "/a"), get(api, "/a")), wait: true, limit: 1, has: misdirected},
		{name: "host the certificate is not for, pipelined", steps: []string{get(api, "/a") + get(uncovered, "/a") + get(api, "/a")}, limit: 100, has: misdirected},
		{name: "redirect over plain HTTP", steps: repeat(get(api, "/a?b=c"), 5), wait: true, limit: 100, fast: true, plain: true, has: redirect},
		{name: "redirect over plain HTTP, HEAD and POST", steps: []string{get(api, "/a"), get(api, "/a"), hostile.Req("HEAD /a HTTP/1.1", "Host: "+api),
			hostile.Req("POST /a HTTP/1.1", "Host: "+api, "Content-Length: 5") + "hello", get(api, "/a")}, wait: true, limit: 100, plain: true, has: redirect},
		{name: "ACME challenge over plain HTTP", steps: repeat(get(api, "/.well-known/acme-challenge/t"), 5), wait: true, limit: 100, fast: true, plain: true},
	}
}

// TestFastPathDifferentialTLS is TestFastPathDifferential over TLS, with
// the sequences of TLS's own (tlsCases).
func TestFastPathDifferentialTLS(t *testing.T) {
	origin := diffOrigin(t)
	fix := newDiffTLS(t)
	for _, tc := range append(fastPathCases(), tlsCases()...) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runFastPathCase(t, origin, tc, fix)
		})
	}
}

// TestFastForwardDifferentialTLS is TestFastForwardDifferential over TLS
// (the origin receives X-Forwarded-Proto https and X-JA4, the client's own
// X-JA4 removed; limited's HSTS replaces the origin's), with a host the
// certificate is not for among forwards.
func TestFastForwardDifferentialTLS(t *testing.T) {
	fix := newDiffTLS(t)
	plain := "plain.example.com"
	seqs := append(forwardSeqs(), forwardSeq{"host the certificate is not for",
		[]string{get(plain, "/r/cl"), get(plain, "/r/cl"), get("uncovered.example.com", "/r/cl"), get(plain, "/r/cl")}, true})
	for _, trust := range []bool{true, false} {
		for _, sq := range seqs {
			t.Run(fmt.Sprintf("trusted=%v/%s", trust, sq.name), func(t *testing.T) {
				t.Parallel()
				runForwardSeq(t, sq, trust, fix)
			})
		}
	}
}

// TestFastForwardBodiesTLS is TestFastForwardBodies over TLS: bodies read
// from the decrypted stream, and HSTS on forwards and on refusals of a
// body (413, 400, 408) and of a request (429).
func TestFastForwardBodiesTLS(t *testing.T) {
	fix := newDiffTLS(t)
	runBodySeqsOver(t, fix.bodyConfig(t), bodySeqs(), fix)
}
