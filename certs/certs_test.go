package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// writeCert writes a self-signed certificate for names as name.pem and its
// key as name.key in dir, valid until notAfter.
func writeCert(t *testing.T, dir, name string, notAfter time.Time, names ...string) rules.CertificateConfig {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		Issuer: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return rules.CertificateConfig{CertFile: name + ".pem", KeyFile: name + ".key"}
}

func TestLookup(t *testing.T) {
	dir := t.TempDir()
	later := time.Now().Add(90 * 24 * time.Hour)
	set, err := Load(dir, rules.TLS{Certificates: []rules.CertificateConfig{
		writeCert(t, dir, "first", later, "first.example"),
		writeCert(t, dir, "wide", later, "*.example.com"),
		writeCert(t, dir, "narrow", later, "*.api.example.com", "API.example.com"),
		writeCert(t, dir, "addr", later, "192.0.2.1", "2001:db8::1"),
		writeCert(t, dir, "dup", later, "first.example"),
	}, Default: 1}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		sni, want string
		known     bool
	}{
		{"first.example", "first.pem", true}, // the first certificate for a name wins
		{"FIRST.example.", "first.pem", true},
		{"api.example.com", "narrow.pem", true},    // exact beats wildcard
		{"v1.api.example.com", "narrow.pem", true}, // a longer wildcard beats a shorter one
		{"a.b.api.example.com", "narrow.pem", true},
		{"www.example.com", "wide.pem", true},
		{"example.com", "wide.pem", false}, // the default
		{"", "wide.pem", false},
		{"192.0.2.1", "addr.pem", true},
		{"nope", "wide.pem", false},
		{"bad..name", "wide.pem", false},
	}
	for _, tt := range tests {
		c, known := set.Lookup(tt.sni)
		if c == nil || c.File != tt.want || known != tt.known {
			t.Errorf("Lookup(%q): got %v, %v, want %s, %v", tt.sni, c, known, tt.want, tt.known)
		}
	}
	for _, tt := range []struct {
		host string
		file string
		want bool
	}{
		{"api.example.com", "narrow.pem", true}, {"x.api.example.com", "narrow.pem", true},
		{"example.com", "wide.pem", false}, {"a.example.com", "wide.pem", true},
		{"[2001:db8::1]", "addr.pem", true}, {"192.0.2.2", "addr.pem", false},
	} {
		for _, c := range set.certs {
			if c.File == tt.file && c.Covers(tt.host) != tt.want {
				t.Errorf("%s covers %q: got %v, want %v", tt.file, tt.host, !tt.want, tt.want)
			}
		}
	}
}

func TestLookupReject(t *testing.T) {
	dir := t.TempDir()
	cc := writeCert(t, dir, "a", time.Now().Add(time.Hour*24*30), "a.example")
	for _, tt := range []struct {
		name         string
		defaultGiven bool
		sni          string
		want         bool // a certificate
	}{
		{"covered", false, "a.example", true},
		{"unknown", false, "b.example", false},
		{"unknown, default given", true, "b.example", false},
		{"no SNI", false, "", false},
		{"no SNI, default given", true, "", true},
	} {
		set, err := Load(dir, rules.TLS{Certificates: []rules.CertificateConfig{cc}, RejectUnknown: true, DefaultGiven: tt.defaultGiven}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := set.Lookup(tt.sni); (c != nil) != tt.want {
			t.Errorf("%s: got %v, want a certificate %v", tt.name, c, tt.want)
		}
	}
}

func TestLoadProblems(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	a := writeCert(t, dir, "a", now.Add(30*24*time.Hour), "a.example")
	writeCert(t, dir, "b", now.Add(30*24*time.Hour), "b.example")
	soon := writeCert(t, dir, "soon", now.Add(3*24*time.Hour), "soon.example")
	old := writeCert(t, dir, "old", now.Add(-time.Minute), "old.example")
	bare := writeCert(t, dir, "bare", now.Add(30*24*time.Hour))
	secret, _ := os.ReadFile(filepath.Join(dir, "b.key"))
	if err := os.WriteFile(filepath.Join(dir, "swapped.key"), []byte(strings.Replace(string(secret), "PRIVATE KEY", "CERTIFICATE", 2)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir, rules.TLS{Certificates: []rules.CertificateConfig{
		a,
		{CertFile: "a.pem", KeyFile: "b.key"},
		{CertFile: "missing.pem", KeyFile: "a.key"},
		{CertFile: "a.pem", KeyFile: "swapped.key"},
		{CertFile: "b.key", KeyFile: "b.key"},
	}}, now)
	want := []string{
		`tls.certificates[1]: cert_file "a.pem" with key_file "b.key": tls: private key does not match public key`,
		`tls.certificates[2]: cert_file "missing.pem": no such file or directory`,
		`tls.certificates[3]: key_file "swapped.key": not a PEM private key (want a -----BEGIN ... PRIVATE KEY----- block)`,
		`tls.certificates[4]: cert_file "b.key": not a PEM certificate (want a -----BEGIN CERTIFICATE----- block)`,
	}
	if err == nil {
		t.Fatal("Load accepted them")
	}
	if got := err.Error(); got != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
	body := strings.Split(string(secret), "\n")[1]
	if strings.Contains(err.Error(), body[:20]) {
		t.Errorf("the error shows the key")
	}
	set, err := Load(dir, rules.TLS{Certificates: []rules.CertificateConfig{a, soon, old, bare}}, now)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(set.Warnings(), "\n")
	for _, w := range []string{`tls.certificates[1]: "soon.pem" expires on`, `tls.certificates[2]: "old.pem" expired on`,
		`tls.certificates[3]: "bare.pem" names no DNS name or address`} {
		if !strings.Contains(got, w) {
			t.Errorf("warnings lack %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, `"a.pem"`) {
		t.Errorf("a.pem, valid for 30 days, is warned of:\n%s", got)
	}
	if info := set.Info(); len(info) != 4 || info[0].Names[0] != "a.example" || info[0].Issuer != "a" {
		t.Errorf("Info: got %+v", info)
	}
}
