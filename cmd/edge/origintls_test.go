package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/config"
	"github.com/edgerate/edge/internal/testpki"
	"github.com/edgerate/edge/internal/wait"
)

// TestOriginTLSDocExample loads the example of docs/origins.md's "TLS to
// origins", beside the certificate files it names, made by the test.
func TestOriginTLSDocExample(t *testing.T) {
	section := docSection(t, "docs/origins.md", "TLS to origins: `origin_tls`")
	example := docExample(t, "docs/origins.md", "TLS to origins: `origin_tls`")
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	must(t, os.Mkdir(certs, 0o700))
	ca := testpki.NewCA(t, certs, "origin-ca")
	ca.Client(t, "edge-client")
	path := filepath.Join(dir, "edge.yaml")
	must(t, os.WriteFile(path, []byte(example), 0o600))
	table, _, err := config.Load(path)
	if err != nil {
		t.Fatalf("the example does not load: %v", err)
	}
	tls := table.Domains[0].Upstream.TLS
	if tls == nil || tls.RootCAs == nil || tls.Certificate == nil || tls.ServerName != "api.internal" {
		t.Fatalf("the example's origin_tls compiled to %+v", tls)
	}
	// Its error messages, as the section quotes them.
	must(t, os.Remove(ca.File))
	if _, _, err := config.Load(path); err == nil || !strings.Contains(section, strings.SplitN(err.Error(), "\n", 2)[0]) {
		t.Errorf("the section does not quote the problem of a missing ca_file: %v", err)
	}
}

// TestOriginTLSEndToEnd runs edge in front of an origin that requires a
// client certificate of its CA: edge presents origin_tls's; renewing the
// certificate's files is a change of the configuration that the running
// edge reloads (new connections present the new certificate); a file
// broken on reload leaves the running configuration in place; and one
// broken at start stops edge with a problem naming key, domain and file.
func TestOriginTLSEndToEnd(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	server := ca.Server(t, "origin", "127.0.0.1")
	one, two := ca.Client(t, "one"), ca.Client(t, "two")
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{server.Pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool}
	origin.Config.ErrorLog = log.New(io.Discard, "", 0)
	origin.StartTLS()
	defer origin.Close()
	copyFile := func(from, to string) {
		t.Helper()
		b, err := os.ReadFile(from)
		must(t, err)
		must(t, os.WriteFile(to, b, 0o600))
	}
	copyFile(one.CertFile, filepath.Join(dir, "client.pem"))
	copyFile(one.KeyFile, filepath.Join(dir, "client.key"))
	path := filepath.Join(dir, "edge.yaml")
	must(t, os.WriteFile(path, []byte(fmt.Sprintf(`
listen: %q
admin_listen: %q
domains:
  - name: api
    hosts: ["*"]
    origin: %q
    origin_tls: {ca_file: ca.pem, client_cert_file: client.pem, client_key_file: client.key}
    rules:
      - {name: all, limit: 1000000, period: 1m}
`, publicAnyPort, adminAnyPort, origin.URL)), 0o600))
	e := startEdge(t, path)
	body := func() string {
		t.Helper()
		resp, err := http.Get("http://" + e.public + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	if got := body(); got != "200 one" {
		t.Fatalf("got %q, want 200 one", got)
	}
	copyFile(two.KeyFile, filepath.Join(dir, "client.key"))
	copyFile(two.CertFile, filepath.Join(dir, "client.pem"))
	wait.For(t, 10*time.Second, "the renewed certificate presented", func() bool { return body() == "200 two" })

	must(t, os.WriteFile(filepath.Join(dir, "client.key"), []byte("not a key\n"), 0o600))
	wait.For(t, 10*time.Second, "the failed reload logged", func() bool {
		return strings.Contains(e.log.String(), `client_key_file: \"client.key\" must be a PEM private key`) ||
			strings.Contains(e.log.String(), `client_key_file: "client.key" must be a PEM private key`)
	})
	if got := body(); got != "200 two" {
		t.Errorf("after a broken reload: got %q, want the running configuration's 200 two", got)
	}
	e.stop()

	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-config", path}, &stdout, &stderr); code == 0 {
		t.Fatal("edge started with a broken client_key_file")
	}
	if want := `domains[0] (api).origin_tls.client_key_file: "client.key" must be a PEM private key`; !strings.Contains(stderr.String(), want) {
		t.Errorf("the start's problems lack %q:\n%s", want, stderr.String())
	}
}
