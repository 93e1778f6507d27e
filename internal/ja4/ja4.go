// Package ja4 computes the JA4 fingerprint of a TLS ClientHello, as FoxIO's
// specification defines it
// (https://github.com/FoxIO-LLC/ja4/blob/main/technical_details/JA4.md),
// from what crypto/tls reports of the hello. docs/tls.md says what a
// fingerprint is good for as a client key, and what it is not.
//
// A fingerprint has three parts joined by '_':
//
//	t13d1516h2_8daaf6152771_e5627efa2ab1
//
// a, ten characters: the protocol (t, q or d), the TLS version, d or i for
// an SNI extension present or not, the counts of cipher suites and of
// extensions, and the first and last characters of the first ALPN value;
// b, the first 12 hex digits of the SHA-256 of the sorted cipher suites; c,
// the same of the sorted extensions (without SNI and ALPN, already in a)
// and the signature algorithms in the order sent. GREASE values (RFC 8701)
// are left out everywhere. The raw form, ja4_r, spells b and c out instead
// of hashing them.
package ja4

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"slices"
)

// Protocol is the transport a ClientHello came over, the fingerprint's first
// character. The zero Protocol is TCP.
type Protocol byte

// The protocols JA4 tells apart.
const (
	TCP  Protocol = 't' // TLS over TCP
	QUIC Protocol = 'q' // QUIC's TLS handshake (RFC 9001)
	DTLS Protocol = 'd' // DTLS over UDP or SCTP
)

// Extension IDs that the fingerprint treats apart (IANA's TLS
// ExtensionType Values registry).
const (
	extServerName        = 0x0000
	extALPN              = 0x0010
	extSupportedVersions = 0x002b
)

// Hello holds the parts of a ClientHello that JA4 reads, as the client sent
// them, GREASE values included. [FromClientHello] fills one from
// crypto/tls; a test or another transport can fill one directly. The zero
// Hello is a TCP hello with nothing in it (t00i000000_000000000000_000000000000).
// Its methods only read it; a Hello whose slices nobody changes may be used
// by any number of goroutines at once.
type Hello struct {
	// Protocol is the transport; zero means TCP.
	Protocol Protocol
	// Version is the hello's legacy_version (client_version), the version
	// when SupportedVersions is nil.
	Version uint16
	// SupportedVersions is the supported_versions extension's list; nil
	// when the hello has no such extension.
	SupportedVersions []uint16
	// CipherSuites are the cipher suite values in the order sent.
	CipherSuites []uint16
	// Extensions are the extension IDs in the order sent.
	Extensions []uint16
	// ALPN is the application_layer_protocol_negotiation list; nil when
	// the hello has none.
	ALPN []string
	// SignatureSchemes is the signature_algorithms extension's list in the
	// order sent (not signature_algorithms_cert's).
	SignatureSchemes []tls.SignatureScheme
}

// FromClientHello returns the Hello that crypto/tls reports in h (as
// Config.GetConfigForClient receives it), a hello that came over p. The
// Hello shares h's slices; it does not allocate.
//
// crypto/tls keeps GREASE values and the order sent in every list JA4
// reads, and refuses a hello that repeats an extension. It does not report
// the legacy_version: without a supported_versions extension it reports the
// versions it knows (TLS 1.0 to 1.3) up to that one, so a legacy_version
// above TLS 1.3 reads as TLS 1.3, and one below TLS 1.0 (SSL 3.0, which
// Go then refuses) as unknown, "00".
//
// Two hellos are not the one a fingerprinting tool on the network sees:
// after a HelloRetryRequest, GetConfigForClient is not called again, so
// the fingerprint is the first hello's (FoxIO's tools print both); and a
// server holding EncryptedClientHelloKeys reports the inner hello of an
// accepted ECH, not the outer one sent in the clear.
func FromClientHello(h *tls.ClientHelloInfo, p Protocol) Hello {
	out := Hello{
		Protocol:         p,
		CipherSuites:     h.CipherSuites,
		Extensions:       h.Extensions,
		ALPN:             h.SupportedProtos,
		SignatureSchemes: h.SignatureSchemes,
	}
	if slices.Contains(h.Extensions, extSupportedVersions) {
		out.SupportedVersions = h.SupportedVersions
	} else if len(h.SupportedVersions) > 0 {
		out.Version = slices.Max(h.SupportedVersions) // derived from legacy_version, see above
	}
	return out
}

// Fingerprint returns h's JA4 fingerprint, such as
// t13d1516h2_8daaf6152771_e5627efa2ab1. It allocates only the string.
func (h Hello) Fingerprint() string {
	var b [36]byte
	return string(h.AppendFingerprint(b[:0]))
}

// Raw returns h's raw fingerprint, ja4_r: parts b and c as the lists that
// Fingerprint hashes, such as t13d0305h2_1301,1302,1303_000a,000d,002b_0403.
func (h Hello) Raw() string {
	return string(h.AppendRaw(nil))
}

// AppendFingerprint appends h's JA4 fingerprint (36 bytes) to b. For a
// hello of up to 128 cipher suites, 128 extensions and 128 signature
// algorithms it does not allocate beyond growing b.
func (h Hello) AppendFingerprint(b []byte) []byte {
	var buf [256 * 5]byte // a list's text, 5 bytes a value
	b = h.appendA(b)
	list := h.appendCiphers(buf[:0])
	b = appendHash12(append(b, '_'), list)
	list = h.appendExtensions(list[:0])
	return appendHash12(append(b, '_'), list)
}

// AppendRaw appends h's raw fingerprint, ja4_r, to b.
func (h Hello) AppendRaw(b []byte) []byte {
	b = h.appendA(b)
	b = h.appendCiphers(append(b, '_'))
	return h.appendExtensions(append(b, '_'))
}

// appendA appends part a: protocol, version, SNI, counts and ALPN.
func (h Hello) appendA(b []byte) []byte {
	p := h.Protocol
	if p == 0 {
		p = TCP
	}
	b = append(b, byte(p))
	b = append(b, versionName(h.version())...)
	if slices.Contains(h.Extensions, extServerName) {
		b = append(b, 'd')
	} else {
		b = append(b, 'i')
	}
	b = appendCount(b, h.CipherSuites)
	b = appendCount(b, h.Extensions)
	return appendALPN(b, h.ALPN)
}

// version is the highest non-GREASE supported_versions value if the hello
// has the extension (0 if it holds none), else the legacy version. The
// specification says highest, and FoxIO's tools compare numerically even
// for DTLS, whose newer versions are numerically lower; so does this.
func (h Hello) version() uint16 {
	if h.SupportedVersions == nil {
		return h.Version
	}
	var v uint16
	for _, sv := range h.SupportedVersions {
		if !isGREASE(sv) && sv > v {
			v = sv
		}
	}
	return v
}

func versionName(v uint16) string {
	switch v {
	case 0x0304:
		return "13"
	case 0x0303:
		return "12"
	case 0x0302:
		return "11"
	case 0x0301:
		return "10"
	case 0x0300:
		return "s3"
	case 0x0002:
		return "s2"
	case 0xfeff:
		return "d1"
	case 0xfefd:
		return "d2"
	case 0xfefc:
		return "d3"
	}
	return "00"
}

// appendCount appends the number of non-GREASE values in vs as two
// digits, 99 for more than 99.
func appendCount(b []byte, vs []uint16) []byte {
	n := 0
	for _, v := range vs {
		if !isGREASE(v) {
			n++
		}
	}
	n = min(n, 99)
	return append(b, byte('0'+n/10), byte('0'+n%10))
}

// appendALPN appends the first and last characters of the first ALPN
// value: "00" when there is none (or it is empty); when either byte is not
// an ASCII letter or digit, the first and last hex digits of the value
// instead (0x30 0xab gives "3b"). A one-byte value is both first and last.
func appendALPN(b []byte, alpn []string) []byte {
	if len(alpn) == 0 || alpn[0] == "" {
		return append(b, "00"...)
	}
	first, last := alpn[0][0], alpn[0][len(alpn[0])-1]
	if isAlnum(first) && isAlnum(last) {
		return append(b, first, last)
	}
	return append(b, hexDigits[first>>4], hexDigits[last&0x0f])
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
}

// appendCiphers appends part b's list: the non-GREASE cipher suites,
// sorted, as 4 lower-case hex digits joined by ','.
func (h Hello) appendCiphers(b []byte) []byte {
	var buf [128]uint16
	return appendHexList(b, sortedWithout(buf[:0], h.CipherSuites, false))
}

// appendExtensions appends part c's list: the non-GREASE extensions but SNI
// and ALPN, sorted, then, if the hello has any non-GREASE signature
// algorithm, '_' and those in the order sent.
func (h Hello) appendExtensions(b []byte) []byte {
	var buf [128]uint16
	b = appendHexList(b, sortedWithout(buf[:0], h.Extensions, true))
	sep := byte('_')
	for _, s := range h.SignatureSchemes {
		if v := uint16(s); !isGREASE(v) {
			b = appendHex4(append(b, sep), v)
			sep = ','
		}
	}
	return b
}

// sortedWithout appends to buf the values of vs but GREASE (and, if
// extensions, SNI and ALPN), and sorts them.
func sortedWithout(buf, vs []uint16, extensions bool) []uint16 {
	for _, v := range vs {
		if isGREASE(v) || extensions && (v == extServerName || v == extALPN) {
			continue
		}
		buf = append(buf, v)
	}
	slices.Sort(buf)
	return buf
}

func appendHexList(b []byte, vs []uint16) []byte {
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendHex4(b, v)
	}
	return b
}

const hexDigits = "0123456789abcdef"

func appendHex4(b []byte, v uint16) []byte {
	return append(b, hexDigits[v>>12], hexDigits[v>>8&0xf], hexDigits[v>>4&0xf], hexDigits[v&0xf])
}

// appendHash12 appends the first 12 hex digits of list's SHA-256, or 12
// zeros for an empty list, as the specification says, to tell "none" apart.
func appendHash12(b, list []byte) []byte {
	if len(list) == 0 {
		return append(b, "000000000000"...)
	}
	sum := sha256.Sum256(list)
	return hex.AppendEncode(b, sum[:6])
}

// isGREASE reports whether v is one of the 16 GREASE values of RFC 8701
// §2: 0x0a0a, 0x1a1a, ... 0xfafa.
func isGREASE(v uint16) bool {
	return v&0x0f0f == 0x0a0a && v>>8 == v&0xff
}
