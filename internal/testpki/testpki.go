// Package testpki makes certificates for tests: a CA, and server and
// client certificates it signs, written as PEM files, with the crypto/tls
// values of each. It is for tests only.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority of a test, its certificate in File.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	Pool *x509.CertPool // the CA alone
	File string         // its certificate, PEM
	dir  string
}

// Issued is a certificate a CA signed: its files and its pair.
type Issued struct {
	CertFile, KeyFile string
	Pair              tls.Certificate
}

// NewCA makes a CA named name whose files go in dir.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	return NewCAFile(t, dir, name, name)
}

// NewCAFile makes a CA of common name cn whose certificate is file.pem in
// dir, as are the certificates it issues.
func NewCAFile(t testing.TB, dir, file, cn string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	check(t, err)
	cert, err := x509.ParseCertificate(der)
	check(t, err)
	ca := &CA{Cert: cert, key: key, Pool: x509.NewCertPool(), File: filepath.Join(dir, file+".pem"), dir: dir}
	ca.Pool.AddCert(cert)
	check(t, os.WriteFile(ca.File, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return ca
}

// Server issues a server certificate for names (DNS names or addresses)
// as name.pem and name.key.
func (ca *CA) Server(t testing.TB, name string, names ...string) Issued {
	t.Helper()
	return ca.issue(t, ca.dir, name, 24*time.Hour, x509.ExtKeyUsageServerAuth, names)
}

// ServerIn is Server with its files in dir, valid for validFor.
func (ca *CA) ServerIn(t testing.TB, dir, name string, validFor time.Duration, names ...string) Issued {
	t.Helper()
	return ca.issue(t, dir, name, validFor, x509.ExtKeyUsageServerAuth, names)
}

// Client issues a client certificate with common name name.
func (ca *CA) Client(t testing.TB, name string) Issued {
	t.Helper()
	return ca.issue(t, ca.dir, name, 24*time.Hour, x509.ExtKeyUsageClientAuth, nil)
}

func (ca *CA) issue(t testing.TB, dir, name string, validFor time.Duration, usage x509.ExtKeyUsage, names []string) Issued {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	check(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(validFor),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	check(t, err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	check(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	is := Issued{CertFile: filepath.Join(dir, name+".pem"), KeyFile: filepath.Join(dir, name+".key")}
	check(t, os.WriteFile(is.CertFile, certPEM, 0o600))
	check(t, os.WriteFile(is.KeyFile, keyPEM, 0o600))
	is.Pair, err = tls.X509KeyPair(certPEM, keyPEM)
	check(t, err)
	return is
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
