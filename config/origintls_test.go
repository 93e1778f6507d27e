package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgerate/edge/internal/testpki"
)

// TestOriginTLSConfig: origin_tls's files are read at load, relative to
// the configuration file's directory, into the compiled group (a domain's
// own, or the top level's for a domain of https servers); a file that
// cannot be read or parsed is a problem naming the key, the domain and
// the file as written, and no problem shows what the key file holds.
func TestOriginTLSConfig(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	client := ca.Client(t, "client")
	ca.Client(t, "other") // other.pem: a certificate whose key is not client.key
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	keyPEM, err := os.ReadFile(client.KeyFile)
	must(err)
	must(os.WriteFile(filepath.Join(dir, "garbage.pem"), []byte("not a certificate\n"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "secret.key"), []byte("TOPSECRETKEYMATERIAL\n"), 0o600))
	load := func(t *testing.T, yaml string) error {
		t.Helper()
		path := filepath.Join(dir, "edge.yaml")
		must(os.WriteFile(path, []byte(yaml), 0o600))
		tab, _, err := Load(path)
		if err == nil && tab == nil {
			t.Fatal("no table and no error")
		}
		return err
	}

	t.Run("compiled", func(t *testing.T) {
		path := filepath.Join(dir, "edge.yaml")
		must(os.WriteFile(path, []byte(`
origin_tls: {ca_file: ca.pem}
domains:
  - name: api
    hosts: [api.example.com]
    origins: [{url: "https://10.0.0.1:8443"}, {url: "https://10.0.0.2:8443"}]
    origin_tls: {ca_file: ca.pem, server_name: origin.internal, client_cert_file: client.pem, client_key_file: client.key}
  - name: top
    hosts: [top.example.com]
    origin: "https://10.0.0.3"
  - name: plain
    hosts: [plain.example.com]
    origin: "http://10.0.0.4"
  - name: off
    hosts: [off.example.com]
    origin: "https://10.0.0.5"
    origin_tls: {insecure_skip_verify: true}
`), 0o600))
		tab, _, err := Load(path)
		must(err)
		api, top, plain, off := tab.Domains[0].Upstream.TLS, tab.Domains[1].Upstream.TLS, tab.Domains[2].Upstream.TLS, tab.Domains[3].Upstream.TLS
		for _, tc := range []struct {
			name      string
			got, want any
		}{
			{"roots read", api != nil && api.RootCAs != nil, true},
			{"server name", api.ServerName, "origin.internal"},
			{"client certificate", api.Certificate != nil && len(api.Certificate.Certificate) == 1, true},
			{"top level's for https servers", top != nil && top.RootCAs != nil && top.Certificate == nil, true},
			{"none for http servers", plain == nil, true},
			{"insecure", off != nil && off.InsecureSkipVerify && off.RootCAs == nil, true},
			{"IDs differ", api.ID != top.ID && top.ID != off.ID, true},
		} {
			if tc.got != tc.want {
				t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
			}
		}
	})

	const domain = "domains:\n  - name: api\n    hosts: [api.example.com]\n    origin: \"https://10.0.0.1\"\n    origin_tls: "
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"ca_file missing", domain + "{ca_file: missing.pem}\n",
			`domains[0] (api).origin_tls.ca_file: "missing.pem" cannot be read: no such file or directory`},
		{"ca_file not PEM", domain + "{ca_file: garbage.pem}\n",
			`domains[0] (api).origin_tls.ca_file: "garbage.pem" must hold PEM certificates`},
		{"key without certificate", domain + "{client_key_file: client.key}\n",
			`domains[0] (api).origin_tls.client_cert_file: required with client_key_file`},
		{"certificate without key", domain + "{client_cert_file: client.pem}\n",
			`domains[0] (api).origin_tls.client_key_file: required with client_cert_file`},
		{"key of another certificate", domain + "{client_cert_file: other.pem, client_key_file: client.key}\n",
			`domains[0] (api).origin_tls.client_key_file: "client.key" is not the key of client_cert_file "other.pem"`},
		{"key not PEM", domain + "{client_cert_file: client.pem, client_key_file: secret.key}\n",
			`domains[0] (api).origin_tls.client_key_file: "secret.key" must be a PEM private key`},
		{"key missing", domain + "{client_cert_file: client.pem, client_key_file: gone.key}\n",
			`domains[0] (api).origin_tls.client_key_file: "gone.key" cannot be read`},
		{"insecure with a CA", domain + "{ca_file: ca.pem, insecure_skip_verify: true}\n",
			`domains[0] (api).origin_tls.ca_file: does not apply with insecure_skip_verify`},
		{"server name with a port", domain + "{server_name: \"origin:443\"}\n",
			`domains[0] (api).origin_tls.server_name: must be a host name without a port, got "origin:443"`},
		{"http servers", "domains:\n  - name: api\n    hosts: [api.example.com]\n    origin: \"http://10.0.0.1\"\n    origin_tls: {ca_file: ca.pem}\n",
			`domains[0] (api).origin_tls: applies only to https servers, got http servers`},
		{"top level over http", "origin: \"http://10.0.0.1\"\norigin_tls: {ca_file: ca.pem}\ndomains: [{name: api, hosts: [api.example.com]}]\n",
			`origin_tls: applies only to https servers, got http servers`},
		{"top level's bad file, once", "origin: \"https://10.0.0.1\"\norigin_tls: {ca_file: missing.pem}\ndomains: [{name: a, hosts: [a.example.com]}, {name: b, hosts: [b.example.com]}]\n",
			`origin_tls.ca_file: "missing.pem" cannot be read`},
		{"unknown key", domain + "{ca: ca.pem}\n", `origin_tls`},
		{"respond domain", "domains:\n  - name: api\n    hosts: [api.example.com]\n    respond: {status: 200}\n    origin_tls: {}\n",
			`domains[0] (api).origin_tls: applies only to a domain forwarded to origins`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := load(t, "listen: \":8080\"\n"+tc.yaml)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a problem with %q", err, tc.want)
			}
			if n := strings.Count(err.Error(), tc.want); n != 1 {
				t.Errorf("the problem is reported %d times, want once:\n%v", n, err)
			}
			for _, secret := range []string{"TOPSECRETKEYMATERIAL", string(keyPEM[40:80])} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the problem shows what the key file holds:\n%v", err)
				}
			}
		})
	}
}
