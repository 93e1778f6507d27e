package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTLSScannerFindsNothingWeak: sslscan, run against edge's TLS listener
// with min_version 1.2 and 1.3, finds no weakness: no protocol older than
// the minimum (SSLv2, SSLv3, TLS 1.0 and 1.1 never), no cipher that is not
// AEAD or not forward-secret, no group under 128 bits of security, no
// insecure renegotiation, no compression, no Heartbleed. A Go server
// configured weakly is scanned too, so that a scan that finds nothing is
// known to be one that can find something.
func TestTLSScannerFindsNothingWeak(t *testing.T) {
	scanner, err := exec.LookPath("sslscan")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("sslscan is not installed: .ci/run must install the Debian package sslscan")
		}
		t.Skip("sslscan is not installed (Debian package sslscan; .ci/run installs it): edge's TLS listener is not scanned")
	}
	origin := echoOrigin(t).URL
	edge := func(min string) func(*testing.T) string {
		return func(t *testing.T) string {
			return startTLSEdge(t, tlsOriginConfig(origin, "  min_version: \""+min+"\"")).tls
		}
	}
	tests := []struct {
		name      string
		start     func(*testing.T) string // the address to scan
		min       string                  // the lowest version that is not a weakness
		protocols []string                // enabled, as sslscan names them
		findings  []string                // each the start of one finding; none for edge
	}{
		{"edge, min_version 1.2", edge("1.2"), "TLSv1.2", []string{"TLSv1.2", "TLSv1.3"}, nil},
		{"edge, min_version 1.3", edge("1.3"), "TLSv1.3", []string{"TLSv1.3"}, nil},
		{"a weak Go server (the scan's control)", weakTLSServer, "TLSv1.2", []string{"TLSv1.0", "TLSv1.1", "TLSv1.2", "TLSv1.3"}, []string{
			"TLSv1.0 is enabled", "TLSv1.1 is enabled",
			"TLSv1.0 cipher ECDHE-RSA-AES128-SHA is not AEAD", "TLSv1.2 cipher AES128-GCM-SHA256 is not forward-secret",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := tt.start(t)
			r := sslscan(t, scanner, addr)
			if got := r.enabled(); !slices.Equal(got, tt.protocols) {
				t.Errorf("enabled protocols %q, want %q", got, tt.protocols)
			}
			got := r.weaknesses(tt.min)
			method, err := compressionOffered(addr)
			switch {
			case err != nil && slices.Contains(tt.protocols, "TLSv1.2"):
				t.Errorf("compression probe (a TLS 1.2 ClientHello offering DEFLATE): %v", err)
			case err != nil:
				t.Logf("compression probe: %v, as a server without TLS 1.2 answers", err)
			case method != 0:
				got = append(got, fmt.Sprintf("compression method %d chosen", method))
			}
			for _, want := range tt.findings {
				if !slices.ContainsFunc(got, func(f string) bool { return strings.HasPrefix(f, want) }) {
					t.Errorf("no finding %q among %q", want, got)
				}
			}
			if tt.findings != nil {
				t.Logf("findings (wanted):\n%s", strings.Join(got, "\n"))
			}
			if tt.findings == nil && len(got) > 0 {
				t.Errorf("sslscan found:\n%s", strings.Join(got, "\n"))
			}
		})
	}
}

// scanReport is what sslscan --xml reports of one server, the parts this
// test judges.
type scanReport struct {
	Protocols []struct {
		Type    string `xml:"type,attr"`
		Version string `xml:"version,attr"`
		Enabled int    `xml:"enabled,attr"`
	} `xml:"protocol"`
	Renegotiation []struct {
		Supported int `xml:"supported,attr"`
		Secure    int `xml:"secure,attr"`
	} `xml:"renegotiation"`
	Compression []struct {
		Supported int `xml:"supported,attr"`
	} `xml:"compression"`
	Heartbleed []struct {
		Version    string `xml:"sslversion,attr"`
		Vulnerable int    `xml:"vulnerable,attr"`
	} `xml:"heartbleed"`
	Ciphers []struct {
		Status   string `xml:"status,attr"`
		Version  string `xml:"sslversion,attr"`
		Name     string `xml:"cipher,attr"`
		Bits     int    `xml:"bits,attr"`
		Strength string `xml:"strength,attr"`
		DHEBits  int    `xml:"dhebits,attr"`
	} `xml:"cipher"`
	Groups []struct {
		Version string `xml:"sslversion,attr"`
		Name    string `xml:"name,attr"`
		Bits    int    `xml:"bits,attr"`
	} `xml:"group"`
}

// sslscan scans addr (SNI api.example.com, a name edge's test certificate
// covers) and returns its report; it fails the test when the scan reached
// no server. It is killed after a minute at most (a scan takes about a
// second on loopback).
func sslscan(t *testing.T, bin, addr string) scanReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--xml=-", "--no-colour", "--timeout=5", "--sni-name=api.example.com", addr)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sslscan %s: %v\n%s%s", addr, err, out, stderr.Bytes())
	}
	var doc struct {
		Tests []scanReport `xml:"ssltest"`
	}
	if err := xml.Unmarshal(out, &doc); err != nil || len(doc.Tests) != 1 || len(doc.Tests[0].Protocols) == 0 {
		t.Fatalf("sslscan %s: no report of a server (%v):\n%s%s", addr, err, out, stderr.Bytes())
	}
	return doc.Tests[0]
}

// enabled returns the protocols the server accepts, as sslscan names them
// in its ciphers ("TLSv1.2").
func (r scanReport) enabled() []string {
	var out []string
	for _, p := range r.Protocols {
		if p.Enabled == 1 {
			out = append(out, strings.ToUpper(p.Type[:1])+strings.ToUpper(p.Type[1:])+"v"+p.Version)
		}
	}
	return out
}

// weaknesses returns every finding of r that a server whose lowest version
// is min ("TLSv1.2") must not show, one sentence each.
func (r scanReport) weaknesses(min string) []string {
	var out []string
	order := []string{"SSLv2", "SSLv3", "TLSv1.0", "TLSv1.1", "TLSv1.2", "TLSv1.3"}
	for _, p := range r.enabled() {
		if slices.Index(order, p) < slices.Index(order, min) {
			out = append(out, p+" is enabled")
		}
	}
	for _, c := range r.Ciphers {
		if c.Status != "accepted" && c.Status != "preferred" {
			continue
		}
		// sslscan calls a TLS 1.2 suite with ECDHE or DHE and GCM or
		// ChaCha20 "strong"; it names TLS 1.3's suites without a key
		// exchange ("acceptable"): all of them are AEAD with (EC)DHE.
		tls13 := c.Version == "TLSv1.3"
		aead := strings.Contains(c.Name, "GCM") || strings.Contains(c.Name, "CHACHA20") || strings.Contains(c.Name, "CCM")
		pfs := tls13 || strings.HasPrefix(c.Name, "ECDHE-") || strings.HasPrefix(c.Name, "DHE-")
		switch {
		case !aead:
			out = append(out, fmt.Sprintf("%s cipher %s is not AEAD", c.Version, c.Name))
		case !pfs:
			out = append(out, fmt.Sprintf("%s cipher %s is not forward-secret", c.Version, c.Name))
		case c.Strength != "strong" && !tls13:
			out = append(out, fmt.Sprintf("%s cipher %s is %s", c.Version, c.Name, c.Strength))
		case c.Bits < 128:
			out = append(out, fmt.Sprintf("%s cipher %s has %d bits", c.Version, c.Name, c.Bits))
		case c.DHEBits != 0 && c.DHEBits < 2048:
			out = append(out, fmt.Sprintf("%s cipher %s uses a %d-bit DH group", c.Version, c.Name, c.DHEBits))
		}
	}
	for _, g := range r.Groups {
		if g.Bits < 128 {
			out = append(out, fmt.Sprintf("%s group %s has %d bits of security", g.Version, g.Name, g.Bits))
		}
	}
	for _, n := range r.Renegotiation {
		if n.Supported == 1 && n.Secure != 1 {
			out = append(out, "insecure renegotiation is supported")
		}
	}
	for _, c := range r.Compression {
		if c.Supported == 1 {
			out = append(out, "compression is supported")
		}
	}
	for _, h := range r.Heartbleed {
		if h.Vulnerable != 0 {
			out = append(out, h.Version+" is vulnerable to Heartbleed")
		}
	}
	return out
}

// compressionOffered sends addr a TLS 1.2 ClientHello that offers DEFLATE
// before no compression, and returns the compression method the
// ServerHello chose (0: none), or an error when the server answered with
// an alert. sslscan leaves compression untested when its OpenSSL was
// built without zlib (Debian's is), so this test asks itself.
func compressionOffered(addr string) (byte, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return 0, err
	}
	// vec prefixes b with its length in n bytes.
	vec := func(n int, b ...[]byte) []byte {
		body := bytes.Join(b, nil)
		l := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		return append(l[4-n:], body...)
	}
	u16 := func(v ...uint16) []byte {
		var out []byte
		for _, x := range v {
			out = binary.BigEndian.AppendUint16(out, x)
		}
		return out
	}
	ext := func(typ uint16, data []byte) []byte { return append(u16(typ), vec(2, data)...) }
	random := make([]byte, 32)
	_, _ = rand.Read(random)
	name := []byte("api.example.com")
	hello := bytes.Join([][]byte{
		u16(tls.VersionTLS12), random, {0}, // no session ID
		vec(2, u16(tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)),
		vec(1, []byte{1, 0}), // DEFLATE, null
		vec(2,
			ext(0, vec(2, []byte{0}, vec(2, name))),                         // server_name
			ext(10, vec(2, u16(uint16(tls.X25519), uint16(tls.CurveP256)))), // supported_groups
			ext(11, vec(1, []byte{0})),                                      // ec_point_formats: uncompressed
			ext(13, vec(2, u16(uint16(tls.ECDSAWithP256AndSHA256), uint16(tls.PSSWithSHA256), uint16(tls.PKCS1WithSHA256)))),
		),
	}, nil)
	record := append([]byte{22, 3, 1}, vec(2, append([]byte{1}, vec(3, hello)...))...)
	if _, err := c.Write(record); err != nil {
		return 0, err
	}
	var hdr [5]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return 0, err
	}
	body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
	if _, err := io.ReadFull(c, body); err != nil {
		return 0, err
	}
	if hdr[0] == 21 && len(body) == 2 {
		return 0, fmt.Errorf("the server answered with alert %d", body[1])
	}
	// ServerHello: type, length (3), version (2), random (32), session ID.
	if hdr[0] != 22 || len(body) < 39 || body[0] != 2 || len(body) < 39+int(body[38])+3 {
		return 0, errors.New("the server's first record is no ServerHello")
	}
	return body[39+int(body[38])+2], nil
}

// weakTLSServer starts a Go HTTPS server with what edge refuses (TLS 1.0
// and 1.1, a CBC suite, RSA key exchange) and returns its address.
func weakTLSServer(t *testing.T) string {
	s := httptest.NewUnstartedServer(http.NotFoundHandler())
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // every probe of the scan is a failed handshake
	s.TLS = &tls.Config{MinVersion: tls.VersionTLS10, CipherSuites: []uint16{
		tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_RSA_WITH_AES_128_GCM_SHA256,
	}}
	s.StartTLS() // with httptest's RSA certificate
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}
