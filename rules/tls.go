package rules

import (
	"crypto/tls"
	"fmt"
	"net/mail"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/edgerate/edge/internal/wire"
)

// TLSConfig is the tls section: edge's HTTPS listener and the certificates
// it serves, chosen by the name the client asks for (SNI). Every key of it
// takes effect at a restart, except the certificates, which reload with the
// configuration (and when one of their files changes).
type TLSConfig struct {
	// Listen is the HTTPS listener's address, host:port; "" (default)
	// binds none. It must differ from every other listener's.
	Listen string `mapstructure:"listen"`
	// Certificates are the certificates served, each for the names of its
	// subject alternative names; at least one with Listen.
	Certificates []CertificateConfig `mapstructure:"certificates"`
	// DefaultCertificate is the cert_file of the certificate served to a
	// client that sends no name, or a name no certificate covers. Default:
	// the first certificate.
	DefaultCertificate string `mapstructure:"default_certificate"`
	// UnknownSNI is "default" (serve the default certificate to a name no
	// certificate covers) or "reject" (end such a handshake with the alert
	// unrecognized_name). Default "default".
	UnknownSNI string `mapstructure:"unknown_sni"`
	// MinVersion is the oldest protocol served: "1.2" (default) or "1.3".
	MinVersion TLSVersion `mapstructure:"min_version"`
	// FingerprintHeader, when set, is the request field in which the
	// origin receives the JA4 fingerprint of the client's TLS ClientHello;
	// a field of that name sent by a client is removed, on every listener.
	FingerprintHeader string `mapstructure:"fingerprint_header"`
	// HTTP2 offers h2 beside http/1.1 by ALPN; false offers http/1.1
	// alone. Default true.
	HTTP2 *bool `mapstructure:"http2"`
	// HTTP3 serves HTTP/3 over QUIC on UDP at Listen's port (with port 0,
	// the port the system chose for TCP), with the same certificates, and
	// announces it in Alt-Svc on HTTPS responses. Default false.
	HTTP3 bool `mapstructure:"http3"`
	// ACME, when set, obtains and renews a certificate for every exact
	// host of every domain that sets acme: true (docs/tls.md, "ACME").
	ACME *ACMEConfig `mapstructure:"acme"`
}

// ACMEConfig is the tls.acme section: the ACME certificate authority edge
// obtains certificates from, and where it keeps them.
type ACMEConfig struct {
	// Email is the contact address of the ACME account; "" registers one
	// without.
	Email string `mapstructure:"email"`
	// CA is the directory URL of the certificate authority, https.
	// Default: Let's Encrypt's production directory (DefaultACMECA).
	CA string `mapstructure:"ca"`
	// CARoot is a PEM file of the roots trusted when talking to the CA
	// (a private one); relative to the configuration file's directory.
	// Default: the system's roots.
	CARoot string `mapstructure:"ca_root"`
	// Storage is the directory where accounts and certificates survive
	// restarts, relative to the configuration file's directory. Default
	// DefaultACMEStorage. With cluster.store redis the PoP's Redis holds
	// them and Storage keeps a copy of the certificates.
	Storage string `mapstructure:"storage"`
	// Challenges are the challenge types offered to the CA: http-01
	// (answered on the plain listener) and tls-alpn-01 (on the TLS
	// listener). Default both.
	Challenges []string `mapstructure:"challenges"`
}

// TLSVersion is a protocol version as the file writes it, "1.2" or "1.3"
// (a bare 1.2 in YAML is a number, which the decoder turns into its text).
type TLSVersion string

// CertificateConfig is one certificate and its private key, PEM files.
type CertificateConfig struct {
	// CertFile holds the certificate, followed by its chain; relative to
	// the configuration file's directory.
	CertFile string `mapstructure:"cert_file"`
	// KeyFile holds the certificate's private key; relative to the
	// configuration file's directory.
	KeyFile string `mapstructure:"key_file"`
}

// TLS is a compiled [TLSConfig]; Listen "" means edge serves no TLS.
type TLS struct {
	Listen       string
	Certificates []CertificateConfig // as configured, in order
	// Default is the index in Certificates of the default certificate.
	Default int
	// DefaultGiven is true when default_certificate names one: a
	// ClientHello without SNI then gets it even with RejectUnknown.
	DefaultGiven bool
	// RejectUnknown ends a handshake for a name no certificate covers
	// with the alert unrecognized_name (unknown_sni: reject).
	RejectUnknown bool
	MinVersion    uint16 // tls.VersionTLS12 or tls.VersionTLS13
	// FingerprintHeader is fingerprint_header in canonical form; "" none.
	FingerprintHeader string
	// HTTP2: ALPN offers h2 before http/1.1 (tls.http2).
	HTTP2 bool
	// HTTP3: HTTP/3 is served over QUIC at Listen's port (tls.http3).
	HTTP3 bool
	// ACME is the compiled tls.acme; nil without.
	ACME *ACME
}

// ACME is a compiled [ACMEConfig].
type ACME struct {
	Email string
	CA    string // the directory URL
	// CARoot and Storage are as configured (Storage defaulted), relative
	// to the configuration file's directory.
	CARoot, Storage string
	// HTTP01 and TLSALPN01 are the challenge types offered.
	HTTP01, TLSALPN01 bool
	// Names are the names certificates are obtained for: every exact host
	// of every domain with acme: true, in configuration order.
	Names []string
}

// Defaults of tls.acme.
const (
	// DefaultACMECA is Let's Encrypt's production directory.
	DefaultACMECA = "https://acme-v02.api.letsencrypt.org/directory"
	// DefaultACMEStorage is beside the configuration file.
	DefaultACMEStorage = "edge-data/acme"
)

// Challenge types of tls.acme.challenges.
const (
	ChallengeHTTP01    = "http-01"
	ChallengeTLSALPN01 = "tls-alpn-01"
)

// Values of tls.unknown_sni.
const (
	unknownSNIDefault = "default"
	unknownSNIReject  = "reject"
)

// MaxHSTSMaxAge bounds a domain's hsts_max_age: two years, which the HSTS
// preload list asks for, is well inside it.
const MaxHSTSMaxAge = 10 * 365 * 24 * time.Hour

// compileTLS validates the tls section, whose listener must not collide
// with the others of t (compiled before it).
func compileTLS(p *problems, c TLSConfig) TLS {
	out := TLS{Listen: c.Listen, Certificates: c.Certificates, MinVersion: tls.VersionTLS12, HTTP2: c.HTTP2 == nil || *c.HTTP2, HTTP3: c.HTTP3}
	if c.Listen == "" {
		for _, k := range []struct {
			path string
			set  bool
		}{
			{"tls.certificates", len(c.Certificates) > 0},
			{"tls.default_certificate", c.DefaultCertificate != ""},
			{"tls.unknown_sni", c.UnknownSNI != ""},
			{"tls.min_version", c.MinVersion != ""},
			{"tls.fingerprint_header", c.FingerprintHeader != ""},
			{"tls.http2", c.HTTP2 != nil},
			{"tls.http3", c.HTTP3},
			{"tls.acme", c.ACME != nil},
		} {
			if k.set {
				p.add(k.path, "needs tls.listen: edge serves no TLS without it")
			}
		}
		out.HTTP3 = false
		return out
	}
	checkAddr(p, "tls.listen", c.Listen)
	if len(c.Certificates) == 0 && c.ACME == nil {
		p.missing("tls.certificates", "with tls.listen", "must list at least one {cert_file, key_file}, or tls.acme obtain them")
	}
	for i, cc := range c.Certificates {
		path := fmt.Sprintf("tls.certificates[%d]", i)
		if cc.CertFile == "" {
			p.missing(path+".cert_file", "", "must be a file, got \"\"")
		}
		if cc.KeyFile == "" {
			p.missing(path+".key_file", "", "must be a file, got \"\"")
		}
		for j := range i {
			if cc.CertFile != "" && c.Certificates[j].CertFile == cc.CertFile {
				p.add(path+".cert_file", "is also tls.certificates[%d]'s, got %q", j, cc.CertFile)
				break
			}
		}
	}
	if c.DefaultCertificate != "" {
		out.DefaultGiven = true
		out.Default = -1
		for i, cc := range c.Certificates {
			if cc.CertFile == c.DefaultCertificate {
				out.Default = i
				break
			}
		}
		if out.Default < 0 {
			p.add("tls.default_certificate", "must be the cert_file of one of tls.certificates, got %q", c.DefaultCertificate)
			out.Default = 0
		}
	}
	switch c.UnknownSNI {
	case "", unknownSNIDefault:
	case unknownSNIReject:
		out.RejectUnknown = true
	default:
		p.add("tls.unknown_sni", "must be default or reject, got %q", c.UnknownSNI)
	}
	switch c.MinVersion {
	case "", "1.2":
	case "1.3":
		out.MinVersion = tls.VersionTLS13
	default:
		p.add("tls.min_version", "must be \"1.2\" or \"1.3\" (older versions are broken), got %q", c.MinVersion)
	}
	if h := c.FingerprintHeader; h != "" {
		canon := textproto.CanonicalMIMEHeaderKey(h)
		switch {
		case !wire.IsToken(h):
			p.add("tls.fingerprint_header", "must be an HTTP field name, got %q", h)
		case reservedField(canon):
			p.add("tls.fingerprint_header", "must not be a field edge or HTTP itself sets, got %q", h)
		}
		out.FingerprintHeader = canon
	}
	if c.ACME != nil {
		out.ACME = compileACME(p, *c.ACME)
	}
	return out
}

// compileACME validates the tls.acme section; its names come from the
// domains (compileDomainTLS).
func compileACME(p *problems, c ACMEConfig) *ACME {
	out := &ACME{Email: c.Email, CA: c.CA, CARoot: c.CARoot, Storage: c.Storage}
	if out.CA == "" {
		out.CA = DefaultACMECA
	} else if u, err := url.Parse(c.CA); err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		p.add("tls.acme.ca", "must be the https URL of an ACME directory (RFC 8555 asks for https), got %q", c.CA)
	}
	if out.Storage == "" {
		out.Storage = DefaultACMEStorage
	}
	if e := c.Email; e != "" {
		if a, err := mail.ParseAddress(e); err != nil || a.Address != e {
			p.add("tls.acme.email", "must be an email address such as ops@example.com, got %q", e)
		}
	}
	if len(c.Challenges) == 0 {
		out.HTTP01, out.TLSALPN01 = true, true
	}
	for i, ch := range c.Challenges {
		path := fmt.Sprintf("tls.acme.challenges[%d]", i)
		var seen *bool
		switch ch {
		case ChallengeHTTP01:
			seen = &out.HTTP01
		case ChallengeTLSALPN01:
			seen = &out.TLSALPN01
		default:
			p.add(path, "must be http-01 or tls-alpn-01 (edge does not do dns-01), got %q", ch)
			continue
		}
		if *seen {
			p.add(path, "is listed twice, got %q", ch)
		}
		*seen = true
	}
	return out
}

// reservedField reports whether a canonical field name is one the origin
// must receive from HTTP or from edge itself, never a fingerprint.
func reservedField(canon string) bool {
	switch canon {
	case "Host", "Connection", "Content-Length", "Transfer-Encoding", "Te", "Trailer", "Upgrade",
		"Keep-Alive", "Proxy-Connection", "Via", "Forwarded",
		"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Cookie", "Authorization":
		return true
	}
	return false
}

// compileDomainTLS validates a domain's https_redirect and hsts_max_age,
// which need the TLS listener.
func compileDomainTLS(p *problems, d *Domain, path string, dc DomainConfig, t *Table) {
	d.HTTPSRedirect = dc.HTTPSRedirect
	d.HSTSMaxAge = dc.HSTSMaxAge
	if dc.ACME {
		compileDomainACME(p, d, path, dc, t)
	}
	if t.TLS.Listen == "" {
		if dc.HTTPSRedirect {
			p.add(path+".https_redirect", "needs tls.listen: there is no HTTPS listener to redirect to")
		}
		if dc.HSTSMaxAge != 0 {
			p.add(path+".hsts_max_age", "needs tls.listen: HSTS is sent on HTTPS responses only")
		}
		return
	}
	switch {
	case dc.HSTSMaxAge < 0 || dc.HSTSMaxAge > MaxHSTSMaxAge:
		p.add(path+".hsts_max_age", "must be between 0 (none) and %v, got %v", MaxHSTSMaxAge, dc.HSTSMaxAge)
	case dc.HSTSMaxAge%time.Second != 0:
		p.add(path+".hsts_max_age", "must be whole seconds (max-age counts seconds), got %v", dc.HSTSMaxAge)
	}
}

// checkTLSListener refuses a tls.listen that collides with the other
// listeners of t.
func checkTLSListener(p *problems, t *Table) {
	if t.TLS.Listen == "" {
		return
	}
	if a := t.TLS.ACME; a != nil && a.HTTP01 && t.Listen == "" {
		p.add("tls.acme.challenges", "http-01 needs listen: the plain listener answers it")
	}
	h, port, err := splitListen(t.TLS.Listen)
	if err != nil {
		return // checkAddr has said so
	}
	others := []struct{ key, addr string }{{"listen", t.Listen}, {"admin_listen", t.AdminListen}}
	if t.Check != nil {
		others = append(others, struct{ key, addr string }{"check.listen", t.Check.Listen})
	}
	if t.RLS.Listen != "" {
		others = append(others, struct{ key, addr string }{"rls.listen", t.RLS.Listen})
	}
	for _, o := range others {
		oh, op, err := splitListen(o.addr)
		if err == nil && collide(t.TLS.Listen, h, port, o.addr, oh, op) {
			p.add("tls.listen", "must differ from %s (%q), got %q", o.key, o.addr, t.TLS.Listen)
		}
	}
}

// compileDomainACME validates a domain's acme: true and adds its exact hosts
// to the names tls.acme obtains certificates for. A wildcard needs the
// DNS-01 challenge, which edge does not do; an IP literal and the
// catch-all name no host a certificate authority validates.
func compileDomainACME(p *problems, d *Domain, path string, dc DomainConfig, t *Table) {
	if t.TLS.ACME == nil {
		if t.TLS.Listen == "" {
			p.add(path+".acme", "needs tls.listen and tls.acme: edge obtains certificates for its HTTPS listener")
		} else {
			p.add(path+".acme", "needs tls.acme: it says which certificate authority to obtain certificates from")
		}
		return
	}
	if !d.Proxied {
		p.add(path+".acme", "needs a domain the public listener serves (serve: proxy or both)")
		return
	}
	d.ACME = true
	for j, raw := range dc.Hosts {
		h := strings.TrimSuffix(strings.ToLower(raw), ".")
		if !slices.Contains(d.Hosts, h) {
			continue // invalid, or claimed by another domain: reported
		}
		hpath := fmt.Sprintf("%s.hosts[%d]", path, j)
		switch _, ipErr := netip.ParseAddr(h); {
		case h == "*":
			p.add(hpath, "acme needs exact host names, and the catch-all names none to obtain a certificate for, got %q", raw)
		case strings.HasPrefix(h, "*."):
			p.add(hpath, "acme cannot obtain a certificate for a wildcard: it needs the dns-01 challenge, which edge does not do; serve it from tls.certificates, got %q", raw)
		case ipErr == nil || h[0] == '[':
			p.add(hpath, "acme obtains certificates for host names, not IP addresses; serve it from tls.certificates, got %q", raw)
		default:
			t.TLS.ACME.Names = append(t.TLS.ACME.Names, h)
		}
	}
}
