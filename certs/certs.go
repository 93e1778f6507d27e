// Package certs serves edge's TLS: the certificates of the tls section,
// loaded from their files into a Set that chooses one by the name a client
// asks for (SNI), and the Server whose handshake Stage turns each new
// connection of the HTTPS listener into its decrypted stream. A reload
// swaps the Set; handshakes after it get the new certificates, connections
// already open keep theirs.
//
// The package never logs and never touches metrics: what it loads is
// returned (Set.Warnings, Set.Info), and each handshake is reported
// through Options.OnHandshake, for the caller to count and log.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
)

// ExpiryWarning is how close to its expiry a certificate is warned of.
const ExpiryWarning = 7 * 24 * time.Hour

// Cert is one certificate of a Set, read from its files.
type Cert struct {
	// File is cert_file as configured; the metric and the status page
	// name the certificate by it.
	File string
	// Names are the names it is for: its DNS names, normalised like a
	// domain's hosts ("*.example.com" a wildcard), then its IP addresses.
	Names    []string
	NotAfter time.Time
	Issuer   string // the issuer's common name, else its whole name

	cert *tls.Certificate
	// conf is the server config of a handshake served this certificate.
	conf *tls.Config
}

// Covers reports whether c is for host, normalised with wire.NormalizeHost
// (no port): one of its names is host, or a wildcard whose suffix host
// ends with, at any depth, as a domain's hosts match.
func (c *Cert) Covers(host string) bool {
	for _, n := range c.Names {
		if n == host || strings.HasPrefix(n, "*.") && len(host) > len(n)-1 && strings.HasSuffix(host, n[1:]) {
			return true
		}
	}
	return false
}

// Info describes a certificate for people (the status page) and metrics.
type Info struct {
	File     string
	Names    []string
	Issuer   string
	NotAfter time.Time
}

// Set is the certificates of one configuration, indexed by name. It is
// immutable, and safe for concurrent use.
type Set struct {
	certs    []*Cert
	exact    map[string]*Cert // a normalised name → the first certificate for it
	wildcard map[string]*Cert // ".suffix" of "*.suffix" → the first certificate for it
	def      *Cert
	// defaultGiven and rejectUnknown are tls.default_certificate set and
	// tls.unknown_sni: reject.
	defaultGiven, rejectUnknown bool
	warnings                    []string
}

// Load reads the certificates of t's tls section from their files, whose
// relative paths are relative to dir, and indexes them by name, judging
// expiry at now. Each problem names the certificate's config path and file
// (an unreadable file, no PEM, a key that does not match); the error joins
// them all, and never shows a private key's contents.
func Load(dir string, t rules.TLS, now time.Time) (*Set, error) {
	s := &Set{exact: make(map[string]*Cert), wildcard: make(map[string]*Cert),
		defaultGiven: t.DefaultGiven, rejectUnknown: t.RejectUnknown}
	var errs []error
	for i, cc := range t.Certificates {
		c, err := loadCert(dir, cc)
		if err != nil {
			errs = append(errs, fmt.Errorf("tls.certificates[%d]: %w", i, err))
			continue
		}
		s.certs = append(s.certs, c)
		switch left := c.NotAfter.Sub(now); {
		case left <= 0:
			s.warnings = append(s.warnings, fmt.Sprintf("tls.certificates[%d]: %q expired on %s; clients will refuse it",
				i, cc.CertFile, c.NotAfter.UTC().Format(time.RFC3339)))
		case left <= ExpiryWarning:
			s.warnings = append(s.warnings, fmt.Sprintf("tls.certificates[%d]: %q expires on %s, in less than %d days",
				i, cc.CertFile, c.NotAfter.UTC().Format(time.RFC3339), int(ExpiryWarning/(24*time.Hour))))
		}
		if len(c.Names) == 0 {
			s.warnings = append(s.warnings, fmt.Sprintf("tls.certificates[%d]: %q names no DNS name or address (subject alternative name); it can only be the default",
				i, cc.CertFile))
		}
		for _, n := range c.Names {
			idx, key := s.exact, n
			if suffix, ok := strings.CutPrefix(n, "*"); ok {
				idx, key = s.wildcard, suffix
			}
			if _, taken := idx[key]; !taken {
				idx[key] = c
			}
		}
		if i == t.Default {
			s.def = c
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// loadCert reads one certificate and its key.
func loadCert(dir string, cc rules.CertificateConfig) (*Cert, error) {
	certPEM, err := os.ReadFile(resolve(dir, cc.CertFile))
	if err != nil {
		return nil, fmt.Errorf("cert_file %q: %w", cc.CertFile, unwrapPath(err))
	}
	keyPEM, err := os.ReadFile(resolve(dir, cc.KeyFile))
	if err != nil {
		return nil, fmt.Errorf("key_file %q: %w", cc.KeyFile, unwrapPath(err))
	}
	if b, _ := pem.Decode(certPEM); b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("cert_file %q: not a PEM certificate (want a -----BEGIN CERTIFICATE----- block)", cc.CertFile)
	}
	if b, _ := pem.Decode(keyPEM); b == nil || !strings.HasSuffix(b.Type, "PRIVATE KEY") {
		return nil, fmt.Errorf("key_file %q: not a PEM private key (want a -----BEGIN ... PRIVATE KEY----- block)", cc.KeyFile)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// crypto/tls words these without the key's bytes.
		return nil, fmt.Errorf("cert_file %q with key_file %q: %w", cc.CertFile, cc.KeyFile, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("cert_file %q: %w", cc.CertFile, err)
		}
	}
	c := &Cert{File: cc.CertFile, NotAfter: leaf.NotAfter, Issuer: leaf.Issuer.CommonName, cert: &pair}
	if c.Issuer == "" {
		c.Issuer = leaf.Issuer.String()
	}
	for _, n := range leaf.DNSNames {
		wild := strings.HasPrefix(n, "*.")
		h, ok := wire.NormalizeHost(strings.TrimPrefix(n, "*."))
		if !ok || strings.ContainsRune(h, ':') {
			continue // not a name a client can send as SNI
		}
		if wild {
			h = "*." + h
		}
		if !slices.Contains(c.Names, h) {
			c.Names = append(c.Names, h)
		}
	}
	for _, ip := range leaf.IPAddresses {
		if h, ok := wire.NormalizeHost(ipHost(ip)); ok && !slices.Contains(c.Names, h) {
			c.Names = append(c.Names, h)
		}
	}
	return c, nil
}

// ipHost writes an address as a Host field does: IPv6 in brackets.
func ipHost(ip net.IP) string {
	if ip.To4() == nil {
		return "[" + ip.String() + "]"
	}
	return ip.String()
}

func resolve(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// unwrapPath drops the path an *os.PathError repeats: the message names the
// file as configured already.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Lookup returns the certificate for a client's SNI name, and whether a
// certificate covers it: an exact name beats a wildcard, a longer wildcard
// a shorter one, case and one trailing dot are ignored. A name no
// certificate covers (or none sent) gets the default, unless the Set
// rejects it: then Lookup returns nil.
func (s *Set) Lookup(serverName string) (c *Cert, known bool) {
	if serverName == "" {
		if s.rejectUnknown && !s.defaultGiven {
			return nil, false
		}
		return s.def, false
	}
	if h, ok := wire.NormalizeHost(serverName); ok {
		if c := s.exact[h]; c != nil {
			return c, true
		}
		for i := 0; i < len(h); i++ {
			if h[i] == '.' {
				if c := s.wildcard[h[i:]]; c != nil {
					return c, true
				}
			}
		}
	}
	if s.rejectUnknown {
		return nil, false
	}
	return s.def, false
}

// Warnings are what Load accepted but an operator should know: a
// certificate expired or expiring within ExpiryWarning, or one without
// names.
func (s *Set) Warnings() []string { return s.warnings }

// Info describes the Set's certificates, in config order.
func (s *Set) Info() []Info {
	out := make([]Info, len(s.certs))
	for i, c := range s.certs {
		out[i] = Info{File: c.File, Names: c.Names, Issuer: c.Issuer, NotAfter: c.NotAfter}
	}
	return out
}

// Files returns the paths of the files of t's certificates, relative ones
// joined to dir, for a caller that watches them for changes.
func Files(dir string, t rules.TLS) []string {
	var out []string
	for _, cc := range t.Certificates {
		out = append(out, resolve(dir, cc.CertFile), resolve(dir, cc.KeyFile))
	}
	return out
}

// ManagedInfo describes a name whose certificate edge obtains at run time
// (ACME), for people (the status page).
type ManagedInfo struct {
	Name  string
	State string // one of the Managed* states
	// NotAfter is when the certificate served expires; NextRenewal when
	// it is due for renewal. Both zero without a certificate.
	NotAfter, NextRenewal time.Time
	// LastError is the last failed order's or renewal's error, kept after
	// a success; "" if none failed. LastErrorAt is when it failed.
	LastError   string
	LastErrorAt time.Time
}

// States of a managed name (ManagedInfo.State).
const (
	ManagedPending   = "pending"   // no certificate yet, none ordered or loaded
	ManagedObtaining = "obtaining" // this node is ordering its first certificate
	ManagedRenewing  = "renewing"  // this node is renewing its certificate
	ManagedValid     = "valid"     // a certificate serves it
	ManagedExpired   = "expired"   // its certificate has expired and was not renewed
	ManagedFailed    = "failed"    // no certificate, and the last order failed (retried with backoff)
)
