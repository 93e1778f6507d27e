package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/certs"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// acmeDomains is a config of api.example.com with acme: true, a rule that
// allows one request a minute, and https_redirect; www.example.com with
// the same but acme; and app.example.com with acme and the rule alone.
func acmeDomains(origin string) rules.Config {
	cfg := oneDomain(origin, rule("per-ip", 1, time.Minute))
	cfg.TLS = rules.TLSConfig{Listen: "127.0.0.1:0", ACME: &rules.ACMEConfig{}}
	cfg.Domains[0].ACME, cfg.Domains[0].HTTPSRedirect = true, true
	cfg.Domains = append(cfg.Domains,
		rules.DomainConfig{Hosts: []string{"www.example.com"}, HTTPSRedirect: true, Rules: []rules.RuleConfig{rule("per-ip", 1, time.Minute)}},
		rules.DomainConfig{Hosts: []string{"app.example.com"}, ACME: true, Rules: []rules.RuleConfig{rule("per-ip", 1, time.Minute)}})
	return cfg
}

// rawResponse sends raw to addr on a new connection and returns the bytes
// of the response, which must close the connection or say its length.
func rawResponse(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(bufio.NewReader(io.TeeReader(br, &b)), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return b.String()
}

var dateLine = regexp.MustCompile(`(?m)^Date: [^\r]*\r\n`)

// TestACMEChallengeAnswered: an HTTP-01 validation of a host of a domain
// with acme: true is answered by edge itself on both paths, with the same
// bytes: the key authorization the hook gives, or 404 for a token it does
// not know; https_redirect does not send it away, no rule counts it, the
// origin never sees it. A domain without acme forwards such a path as
// before (its origin may answer its own challenges).
func TestACMEChallengeAnswered(t *testing.T) {
	origin, seenBy := newOrigin(t, "a")
	cfg := acmeDomains(origin.URL)
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.SetACMEChallenge(func(host, token string) (string, bool) {
		if (host == "api.example.com" || host == "app.example.com") && token == "tok_EN-1" {
			return "tok_EN-1.thumbprint", true
		}
		return "", false
	})
	srv := newRawServer(t, p)
	before := testutil.ToFloat64(p.metrics.requests.WithLabelValues("api.example.com", outcomeACME))
	tests := []struct {
		name, req, status, body string
	}{
		{"known token", "GET /.well-known/acme-challenge/tok_EN-1 HTTP/1.1\r\nHost: API.example.com:80\r\n\r\n",
			"200 OK", "tok_EN-1.thumbprint"},
		{"a query after it", "GET /.well-known/acme-challenge/tok_EN-1?x=1 HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
			"200 OK", "tok_EN-1.thumbprint"},
		{"unknown token", "GET /.well-known/acme-challenge/other HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
			"404 Not Found", "not found: no ACME challenge for this token\n"},
		{"a path below a token", "GET /.well-known/acme-challenge/tok_EN-1/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
			"404 Not Found", "not found: no ACME challenge for this token\n"},
		{"a domain without redirect", "GET /.well-known/acme-challenge/tok_EN-1 HTTP/1.1\r\nHost: app.example.com\r\n\r\n",
			"200 OK", "tok_EN-1.thumbprint"},
		{"a domain without acme: forwarded, not redirected", "GET /.well-known/acme-challenge/tok_EN-1 HTTP/1.1\r\nHost: www.example.com\r\n\r\n",
			"200 OK", "origin:a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen := len(seenBy())
			slow := rawResponse(t, srv, tt.req)
			if !strings.HasPrefix(slow, "HTTP/1.1 "+tt.status+"\r\n") || tt.body != "" && !strings.HasSuffix(slow, "\r\n\r\n"+tt.body) {
				t.Errorf("net/http answered %q, want %s with body %q", slow, tt.status, tt.body)
			}
			fast, ok := p.Answer(fastHead(tt.req), nil)
			if tt.body == "origin:a" {
				return // not a validation edge answers
			}
			if !ok {
				t.Fatalf("the fast path declined it")
			}
			if got, want := dateLine.ReplaceAllString(string(fast), ""), dateLine.ReplaceAllString(slow, ""); got != want {
				t.Errorf("the fast path answered\n%q\nnet/http\n%q", got, want)
			}
			if n := len(seenBy()) - seen; n != 0 {
				t.Errorf("the origin saw %d of them", n)
			}
		})
	}
	if got := testutil.ToFloat64(p.metrics.requests.WithLabelValues("api.example.com", outcomeACME)) - before; got != 8 {
		t.Errorf("edge_requests_total{outcome=\"acme\"} grew by %v, want 8 (4 on each path)", got)
	}
	// per-ip allows one request a minute: none of the validations took it.
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		if status := rawStatus(t, srv, "GET / HTTP/1.1\r\nHost: app.example.com\r\n\r\n"); status != want {
			t.Errorf("request %d after the validations: %d, want %d", i+1, status, want)
		}
	}
	if _, ok := p.Answer(fastHead("HEAD /.well-known/acme-challenge/tok_EN-1 HTTP/1.1\r\nHost: api.example.com\r\n\r\n"), nil); ok {
		t.Error("the fast path answered a HEAD validation, which net/http frames its own way")
	}
}

// TestCertificatesShown: GET /v1/certificates and the status page list the
// certificates from files and each ACME name with its state, valid-until,
// next renewal and last error; the expiry metric has a series for each.
func TestCertificatesShown(t *testing.T) {
	table, err := rules.Compile(acmeDomains("http://127.0.0.1:9"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	p, err := New(Options{Table: table, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	until := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	p.SetCertificates([]certs.Info{{File: "wild.pem", Names: []string{"*.example.net"}, Issuer: "test CA", NotAfter: until}})
	p.SetACMEStatus(func() []certs.ManagedInfo {
		return []certs.ManagedInfo{
			{Name: "api.example.com", State: certs.ManagedValid, NotAfter: until, NextRenewal: until.Add(-30 * 24 * time.Hour)},
			{Name: "app.example.com", State: certs.ManagedFailed, LastError: "urn:ietf:params:acme:error:connection", LastErrorAt: until.Add(-time.Hour)},
		}
	})
	rec := httptest.NewRecorder()
	p.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/certificates", nil))
	want := `{
  "files": [
    {
      "file": "wild.pem",
      "names": [
        "*.example.net"
      ],
      "issuer": "test CA",
      "not_after": "2027-03-01T12:00:00Z"
    }
  ],
  "acme": [
    {
      "name": "api.example.com",
      "state": "valid",
      "not_after": "2027-03-01T12:00:00Z",
      "next_renewal": "2027-01-30T12:00:00Z"
    },
    {
      "name": "app.example.com",
      "state": "failed",
      "last_error": "urn:ietf:params:acme:error:connection",
      "last_error_at": "2027-03-01T11:00:00Z"
    }
  ]
}
`
	if got := rec.Body.String(); got != want {
		t.Errorf("GET /v1/certificates:\n%s\nwant\n%s", got, want)
	}
	rec = httptest.NewRecorder()
	p.StatusPage(StatusPageOptions{TokenRequired: func() bool { return false }, Ready: func() bool { return true }}).
		ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	page := rec.Body.String()
	for _, s := range []string{`<h2 id="h-certificates">Certificates</h2>`,
		`<tr><th scope="row">wild.pem</th><td>*.example.net</td>`,
		`<caption id="acme-t">Names obtained by ACME</caption>`,
		`<tr><th scope="row">api.example.com</th><td>valid</td><td>2027-03-01 12:00:00 UTC</td><td>2027-01-30 12:00:00 UTC</td><td>–</td></tr>`,
		`<tr><th scope="row">app.example.com</th><td>failed</td><td>–</td><td>–</td><td>urn:ietf:params:acme:error:connection (2027-03-01 11:00:00 UTC)</td></tr>`} {
		if !strings.Contains(page, s) {
			t.Errorf("the status page lacks %s", s)
		}
	}
	wantMetric := `
# HELP edge_tls_certificate_expiry_timestamp_seconds When each certificate in use expires (Unix seconds), by its first name and its source (its cert_file, or acme).
# TYPE edge_tls_certificate_expiry_timestamp_seconds gauge
edge_tls_certificate_expiry_timestamp_seconds{name="*.example.net",source="wild.pem"} 1.8039024e+09
edge_tls_certificate_expiry_timestamp_seconds{name="api.example.com",source="acme"} 1.8039024e+09
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantMetric), "edge_tls_certificate_expiry_timestamp_seconds"); err != nil {
		t.Error(err)
	}
}
