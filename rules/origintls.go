package rules

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// This file compiles a group's origin_tls: how edge speaks TLS to its
// https:// servers (docs/origins.md, "TLS to origins"). Its files are read
// as part of the configuration, through Config.ReadFile: one that cannot
// be read or parsed is a problem of the configuration, naming the key and
// the file as written. The private key is a secret: no message quotes
// what it holds (crypto/tls and crypto/x509 word their errors without
// it), and nothing shows it.

// OriginTLSConfig is the origin_tls section of a group: the roots its
// servers' certificates are verified against, the name they are verified
// for, and the certificate edge presents when a server asks for one
// (mutual TLS). It applies to https:// servers only.
type OriginTLSConfig struct {
	// CAFile is a PEM file of the certificates that are trusted as roots
	// (default: the system's roots); relative to the configuration file's
	// directory.
	CAFile string `mapstructure:"ca_file"`
	// ServerName is the name sent as SNI and verified in the server's
	// certificate (default: the server's host in its URL).
	ServerName string `mapstructure:"server_name"`
	// ClientCertFile and ClientKeyFile are the PEM files of the
	// certificate (and chain) and private key edge presents to a server
	// that asks for one; both or neither.
	ClientCertFile string `mapstructure:"client_cert_file"`
	ClientKeyFile  string `mapstructure:"client_key_file"`
	// InsecureSkipVerify accepts any certificate the server presents:
	// for tests and a private network only; not with CAFile.
	InsecureSkipVerify bool `mapstructure:"insecure_skip_verify"`
}

// OriginTLS is a compiled origin_tls. It is immutable.
type OriginTLS struct {
	// The files as configured, and the other keys, for display.
	CAFile, ServerName, ClientCertFile, ClientKeyFile string
	InsecureSkipVerify                                bool
	// RootCAs are CAFile's certificates; nil: the system's roots.
	RootCAs *x509.CertPool
	// Certificate is the client certificate with its key; nil: none.
	Certificate *tls.Certificate
	// ID identifies what the section holds (the keys and the files'
	// contents): two sections with the same ID are spoken alike, so
	// connections made under one serve the other, across reloads. It is a
	// digest, which shows nothing of the key.
	ID string
}

// compileOriginTLS compiles oc, the origin_tls at path of a group whose
// servers are servers; own says the section is the group's own, not
// inherited from the top level (which is ignored by a group without
// https servers).
func compileOriginTLS(p *problems, path string, oc OriginTLSConfig, servers []OriginServer, own bool) *OriginTLS {
	if len(servers) > 0 && servers[0].URL.Scheme != "https" {
		if own {
			p.add(path, "applies only to https servers, got %s servers", servers[0].URL.Scheme)
		}
		return nil
	}
	t := &OriginTLS{CAFile: oc.CAFile, ServerName: oc.ServerName, ClientCertFile: oc.ClientCertFile,
		ClientKeyFile: oc.ClientKeyFile, InsecureSkipVerify: oc.InsecureSkipVerify}
	id := sha256.New()
	fmt.Fprintf(id, "%q %v\n", oc.ServerName, oc.InsecureSkipVerify)
	ok := true
	if sn := oc.ServerName; sn != "" && (strings.ContainsAny(sn, ":/ \t\r\n@[]") || strings.HasPrefix(sn, ".") || len(sn) > 253) {
		p.add(path+".server_name", "must be a host name without a port, got %q", sn)
		ok = false
	}
	if oc.InsecureSkipVerify && oc.CAFile != "" {
		p.add(path+".ca_file", "does not apply with insecure_skip_verify (no certificate is verified), got %q", oc.CAFile)
		ok = false
	}
	if oc.CAFile != "" {
		data, err := p.read(oc.CAFile)
		id.Write(data)
		switch {
		case err != nil:
			p.add(path+".ca_file", "%q cannot be read: %v", oc.CAFile, err)
			ok = false
		default:
			pool, n, err := certPool(data)
			if err != nil || n == 0 {
				p.add(path+".ca_file", "%q must hold PEM certificates (-----BEGIN CERTIFICATE-----)%s", oc.CAFile, because(err))
				ok = false
			}
			t.RootCAs = pool
		}
	}
	switch {
	case oc.ClientCertFile == "" && oc.ClientKeyFile == "":
	case oc.ClientCertFile == "":
		p.add(path+".client_cert_file", "required with client_key_file")
		ok = false
	case oc.ClientKeyFile == "":
		p.add(path+".client_key_file", "required with client_cert_file")
		ok = false
	default:
		certPEM, cerr := p.read(oc.ClientCertFile)
		keyPEM, kerr := p.read(oc.ClientKeyFile)
		id.Write(certPEM)
		id.Write(keyPEM)
		if cerr != nil {
			p.add(path+".client_cert_file", "%q cannot be read: %v", oc.ClientCertFile, cerr)
		}
		if kerr != nil {
			p.add(path+".client_key_file", "%q cannot be read: %v", oc.ClientKeyFile, kerr)
		}
		if cerr != nil || kerr != nil {
			ok = false
			break
		}
		if b, _ := pem.Decode(certPEM); b == nil || b.Type != "CERTIFICATE" {
			p.add(path+".client_cert_file", "%q must be a PEM certificate (-----BEGIN CERTIFICATE-----)", oc.ClientCertFile)
			ok = false
			break
		}
		if b, _ := pem.Decode(keyPEM); b == nil || !strings.HasSuffix(b.Type, "PRIVATE KEY") {
			p.add(path+".client_key_file", "%q must be a PEM private key (-----BEGIN ... PRIVATE KEY-----)", oc.ClientKeyFile)
			ok = false
			break
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// crypto/tls words these without the key's bytes.
			p.add(path+".client_key_file", "%q is not the key of client_cert_file %q: %v", oc.ClientKeyFile, oc.ClientCertFile, err)
			ok = false
			break
		}
		t.Certificate = &pair
	}
	if !ok {
		return nil
	}
	t.ID = hex.EncodeToString(id.Sum(nil))
	return t
}

// certPool returns the certificates of PEM data as a pool, and how many.
func certPool(data []byte) (*x509.CertPool, int, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, 0, err
		}
		pool.AddCert(c)
		n++
	}
	return pool, n, nil
}

func because(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// read returns the content of the file name through the compile's
// reader (Config.ReadFile), once per compile however many groups name
// it. Its error does not repeat the path the caller names.
func (p *problems) read(name string) ([]byte, error) {
	if r, ok := p.files[name]; ok {
		return r.data, r.err
	}
	readFile := p.readFile
	if readFile == nil {
		readFile = os.ReadFile
	}
	data, err := readFile(name)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if p.files == nil {
		p.files = make(map[string]fileRead)
	}
	p.files[name] = fileRead{data, err}
	return data, err
}

// fileRead is a file read by a compile.
type fileRead struct {
	data []byte
	err  error
}
