package rules

import (
	"crypto/tls"
	"reflect"
	"slices"
	"testing"
	"time"
)

// tlsConfig returns validConfig with a TLS listener of two certificates.
func tlsConfig() Config {
	c := validConfig()
	c.TLS = TLSConfig{Listen: ":8443", Certificates: []CertificateConfig{
		{CertFile: "a.pem", KeyFile: "a.key"}, {CertFile: "b.pem", KeyFile: "b.key"}}}
	return c
}

func TestCompileTLS(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   TLS
	}{
		{"defaults", func(c *Config) {}, TLS{Listen: ":8443", Default: 0, MinVersion: tls.VersionTLS12, HTTP2: true}},
		{"default certificate named", func(c *Config) { c.TLS.DefaultCertificate = "b.pem" },
			TLS{Listen: ":8443", Default: 1, DefaultGiven: true, MinVersion: tls.VersionTLS12, HTTP2: true}},
		{"reject and 1.3", func(c *Config) { c.TLS.UnknownSNI, c.TLS.MinVersion = "reject", "1.3" },
			TLS{Listen: ":8443", RejectUnknown: true, MinVersion: tls.VersionTLS13, HTTP2: true}},
		{"fingerprint header canonical", func(c *Config) { c.TLS.FingerprintHeader = "x-ja4" },
			TLS{Listen: ":8443", MinVersion: tls.VersionTLS12, FingerprintHeader: "X-Ja4", HTTP2: true}},
		{"http2 off", func(c *Config) { off := false; c.TLS.HTTP2 = &off },
			TLS{Listen: ":8443", MinVersion: tls.VersionTLS12}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tlsConfig()
			tt.mutate(&c)
			tab, err := Compile(c)
			if err != nil {
				t.Fatal(err)
			}
			got := tab.TLS
			got.Certificates = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCompileTLSErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string
	}{
		{"no listener", func(c *Config) { c.TLS.Listen = "" }, []string{
			"tls.certificates: needs tls.listen: edge serves no TLS without it"}},
		{"http2 without a listener", func(c *Config) { on := true; c.TLS = TLSConfig{HTTP2: &on} }, []string{
			"tls.http2: needs tls.listen: edge serves no TLS without it"}},
		{"no certificates", func(c *Config) { c.TLS.Certificates = nil }, []string{
			"tls.certificates: required with tls.listen"}},
		{"file missing", func(c *Config) { c.TLS.Certificates[1].KeyFile = "" }, []string{
			"tls.certificates[1].key_file: required"}},
		{"same cert twice", func(c *Config) { c.TLS.Certificates[1].CertFile = "a.pem" }, []string{
			`tls.certificates[1].cert_file: is also tls.certificates[0]'s, got "a.pem"`}},
		{"default not a certificate", func(c *Config) { c.TLS.DefaultCertificate = "c.pem" }, []string{
			`tls.default_certificate: must be the cert_file of one of tls.certificates, got "c.pem"`}},
		{"unknown_sni", func(c *Config) { c.TLS.UnknownSNI = "drop" }, []string{
			`tls.unknown_sni: must be default or reject, got "drop"`}},
		{"old version", func(c *Config) { c.TLS.MinVersion = "1.1" }, []string{
			`tls.min_version: must be "1.2" or "1.3" (older versions are broken), got "1.1"`}},
		{"fingerprint header not a token", func(c *Config) { c.TLS.FingerprintHeader = "x ja4" }, []string{
			`tls.fingerprint_header: must be an HTTP field name, got "x ja4"`}},
		{"fingerprint header edge sets", func(c *Config) { c.TLS.FingerprintHeader = "x-forwarded-proto" }, []string{
			`tls.fingerprint_header: must not be a field edge or HTTP itself sets, got "x-forwarded-proto"`}},
		{"collides with listen", func(c *Config) { c.TLS.Listen = "127.0.0.1:8080" }, []string{
			`tls.listen: must differ from listen (":8080"), got "127.0.0.1:8080"`}},
		{"collides with rls", func(c *Config) {
			c.RLS = RLSConfig{Listen: "127.0.0.1:8081", Config: []string{"x.yaml"}}
			c.TLS.Listen = ":8081"
		}, []string{`tls.listen: must differ from rls.listen ("127.0.0.1:8081"), got ":8081"`}},
		{"origin is the TLS listener", func(c *Config) { c.Origin = "https://localhost:8443" }, []string{
			`origin: is edge's own tls.listen (":8443"): every request would come back to edge, got "https://localhost:8443"`}},
		{"redirect without TLS", func(c *Config) { c.TLS = TLSConfig{}; c.Domains[0].HTTPSRedirect = true }, []string{
			"domains[0] (api).https_redirect: needs tls.listen: there is no HTTPS listener to redirect to"}},
		{"hsts without TLS", func(c *Config) { c.TLS = TLSConfig{}; c.Domains[1].HSTSMaxAge = time.Hour }, []string{
			"domains[1] (www).hsts_max_age: needs tls.listen: HSTS is sent on HTTPS responses only"}},
		{"hsts fraction", func(c *Config) { c.Domains[0].HSTSMaxAge = 1500 * time.Millisecond }, []string{
			"domains[0] (api).hsts_max_age: must be whole seconds (max-age counts seconds), got 1.5s"}},
		{"hsts negative", func(c *Config) { c.Domains[0].HSTSMaxAge = -time.Second }, []string{
			"domains[0] (api).hsts_max_age: must be between 0 (none) and 87600h0m0s, got -1s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tlsConfig()
			tt.mutate(&c)
			_, err := Compile(c)
			if err == nil {
				t.Fatal("Compile accepted it")
			}
			if got := errorLines(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCompileDomainTLS(t *testing.T) {
	c := tlsConfig()
	c.Domains[0].HTTPSRedirect = true
	c.Domains[0].HSTSMaxAge = 365 * 24 * time.Hour
	tab, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	d := tab.Domains[0]
	if !d.HTTPSRedirect || d.HSTSMaxAge != 365*24*time.Hour || tab.Domains[1].HTTPSRedirect {
		t.Errorf("got redirect %v, hsts %v (www redirect %v), want true, 8760h, false",
			d.HTTPSRedirect, d.HSTSMaxAge, tab.Domains[1].HTTPSRedirect)
	}
}

// acmeConfig returns tlsConfig with tls.acme and acme: true on api.
func acmeConfig() Config {
	c := tlsConfig()
	c.TLS.ACME = &ACMEConfig{}
	c.Domains[0].ACME = true
	c.Domains[0].Hosts = []string{"api.example.com", "API.example.org."}
	return c
}

func TestCompileACME(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   ACME
	}{
		{"defaults", func(c *Config) {}, ACME{CA: DefaultACMECA, Storage: DefaultACMEStorage, HTTP01: true, TLSALPN01: true,
			Names: []string{"api.example.com", "api.example.org"}}},
		{"everything given", func(c *Config) {
			c.TLS.ACME = &ACMEConfig{Email: "ops@example.com", CA: "https://ca.internal:14000/dir", CARoot: "ca.pem",
				Storage: "/var/lib/edge/acme", Challenges: []string{"tls-alpn-01"}}
			c.Domains[1].ACME = true
		}, ACME{Email: "ops@example.com", CA: "https://ca.internal:14000/dir", CARoot: "ca.pem", Storage: "/var/lib/edge/acme",
			TLSALPN01: true, Names: []string{"api.example.com", "api.example.org", "www.example.com"}}},
		{"without file certificates", func(c *Config) { c.TLS.Certificates = nil }, ACME{CA: DefaultACMECA,
			Storage: DefaultACMEStorage, HTTP01: true, TLSALPN01: true, Names: []string{"api.example.com", "api.example.org"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := acmeConfig()
			tt.mutate(&c)
			tab, err := Compile(c)
			if err != nil {
				t.Fatal(err)
			}
			if got := tab.TLS.ACME; got == nil || !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if !tab.Domains[0].ACME {
				t.Error("domains[0].ACME is false")
			}
		})
	}
}

func TestCompileACMEErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string
	}{
		{"without tls.listen", func(c *Config) { c.TLS = TLSConfig{ACME: &ACMEConfig{}} }, []string{
			"tls.acme: needs tls.listen: edge serves no TLS without it",
			"domains[0] (api).acme: needs tls.listen and tls.acme: edge obtains certificates for its HTTPS listener"}},
		{"domain without tls.acme", func(c *Config) { c.TLS.ACME = nil }, []string{
			"domains[0] (api).acme: needs tls.acme: it says which certificate authority to obtain certificates from"}},
		{"wildcard", func(c *Config) { c.Domains[0].Hosts = []string{"api.example.com", "*.example.net"} }, []string{
			`domains[0] (api).hosts[1]: acme cannot obtain a certificate for a wildcard: it needs the dns-01 challenge, which edge does not do; serve it from tls.certificates, got "*.example.net"`}},
		{"catch-all", func(c *Config) { c.Domains[0].Hosts = []string{"*"} }, []string{
			`domains[0] (api).hosts[0]: acme needs exact host names, and the catch-all names none to obtain a certificate for, got "*"`}},
		{"IP literals", func(c *Config) { c.Domains[0].Hosts = []string{"api.example.com", "192.0.2.1", "[2001:db8::1]"} }, []string{
			`domains[0] (api).hosts[1]: acme obtains certificates for host names, not IP addresses; serve it from tls.certificates, got "192.0.2.1"`,
			`domains[0] (api).hosts[2]: acme obtains certificates for host names, not IP addresses; serve it from tls.certificates, got "[2001:db8::1]"`}},
		{"ca not https", func(c *Config) { c.TLS.ACME.CA = "http://ca.internal/dir" }, []string{
			`tls.acme.ca: must be the https URL of an ACME directory (RFC 8555 asks for https), got "http://ca.internal/dir"`}},
		{"email", func(c *Config) { c.TLS.ACME.Email = "Ops <ops@example.com>" }, []string{
			`tls.acme.email: must be an email address such as ops@example.com, got "Ops <ops@example.com>"`}},
		{"dns-01", func(c *Config) { c.TLS.ACME.Challenges = []string{"http-01", "dns-01"} }, []string{
			`tls.acme.challenges[1]: must be http-01 or tls-alpn-01 (edge does not do dns-01), got "dns-01"`}},
		{"twice", func(c *Config) { c.TLS.ACME.Challenges = []string{"http-01", "http-01"} }, []string{
			`tls.acme.challenges[1]: is listed twice, got "http-01"`}},
		{"check-only domain", func(c *Config) {
			c.Check = &CheckConfig{Listen: "127.0.0.1:8082"}
			c.Domains[0].Serve = "check"
		}, []string{"domains[0] (api).acme: needs a domain the public listener serves (serve: proxy or both)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := acmeConfig()
			tt.mutate(&c)
			_, err := Compile(c)
			if err == nil {
				t.Fatal("Compile accepted it")
			}
			if got := errorLines(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
