package wire

import (
	"net/netip"
	"strings"
	"unsafe"
)

// Limits on a DNS name (RFC 1035 §2.3.4).
const (
	MaxHostLen  = 253
	MaxLabelLen = 63
)

// NormalizeHost turns a Host header value into the form domains are matched
// on: ASCII lower-case, without a port, without one trailing dot; an IPv6
// literal keeps its brackets and is written in canonical form (RFC 5952).
//
// It reports false for an empty host, whitespace, control or non-ASCII bytes,
// '/', '\\', '@', '%', an empty label ("..", a leading dot), a label longer
// than 63 bytes or a name longer than 253, a second port
// ("1.2.3.4:9000:80"), a non-numeric or out-of-range port, and a malformed
// or zoned IPv6 literal. An empty port ("example.com:") is allowed, as in
// RFC 3986 §3.2.3.
//
// NormalizeHost allocates only when the result differs from a substring of
// raw: when lower-casing is needed or an IPv6 literal is not canonical.
func NormalizeHost(raw string) (string, bool) {
	host, _, ok := NormalizeHostInto(raw, nil)
	return host, ok
}

// NormalizeHostInto is NormalizeHost for a caller that must not allocate:
// a host that needs lower-casing is written into buf's storage, grown if
// it is too small, and the string returned shares it, valid while buf is
// not changed. It returns buf, possibly grown, for reuse.
func NormalizeHostInto(raw string, buf []byte) (string, []byte, bool) {
	if raw == "" {
		return "", buf, false
	}
	if raw[0] == '[' {
		host, ok := normalizeIPv6Host(raw)
		return host, buf, ok
	}
	host := raw
	if i := strings.IndexByte(raw, ':'); i >= 0 {
		if !validPort(raw[i+1:]) {
			return "", buf, false
		}
		host = raw[:i]
	}
	if strings.HasSuffix(host, ".") {
		host = host[:len(host)-1]
	}
	if host == "" || len(host) > MaxHostLen {
		return "", buf, false
	}
	upper := false
	label := 0
	for i := 0; i < len(host); i++ {
		switch hostByteClass[host[i]] {
		case hostByteOK:
		case hostByteUpper:
			upper = true
		case hostByteDot:
			if label == 0 {
				return "", buf, false
			}
			label = 0
			continue
		default:
			return "", buf, false
		}
		label++
		if label > MaxLabelLen {
			return "", buf, false
		}
	}
	if label == 0 { // a second trailing dot
		return "", buf, false
	}
	if !upper {
		return host, buf, true
	}
	buf = append(buf[:0], host...) // NormalizeHost's nil: a new array, then no one else's
	lowerASCII(buf)
	return unsafe.String(unsafe.SliceData(buf), len(buf)), buf, true
}

// lowerASCII lower-cases the letters A to Z of b in place.
func lowerASCII(b []byte) {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
}

// Classes of the bytes of a host name, for NormalizeHost.
const (
	hostByteBad   = iota // a control byte, space, non-ASCII, or one of /\\@%[]
	hostByteOK           // any other byte but these:
	hostByteUpper        // A to Z
	hostByteDot          // '.'
)

// hostByteClass gives each byte's class: one lookup where a chain of
// comparisons would be several, for every byte of every Host.
var hostByteClass = func() (t [256]uint8) {
	for i := range t {
		c := byte(i)
		switch {
		case c <= ' ' || c >= 0x7f, c == '/', c == '\\', c == '@', c == '%', c == '[', c == ']':
			t[i] = hostByteBad
		case c == '.':
			t[i] = hostByteDot
		case 'A' <= c && c <= 'Z':
			t[i] = hostByteUpper
		default:
			t[i] = hostByteOK
		}
	}
	return t
}()

// normalizeIPv6Host handles a Host value that starts with '['.
func normalizeIPv6Host(raw string) (string, bool) {
	end := strings.IndexByte(raw, ']')
	if end < 0 {
		return "", false
	}
	if rest := raw[end+1:]; rest != "" {
		if rest[0] != ':' || !validPort(rest[1:]) {
			return "", false
		}
	}
	inner := raw[1:end]
	// ParseAddr accepts zones ("%eth0") and IPv4; neither belongs in a
	// bracketed Host, and a zone names an interface of the client's machine.
	if inner == "" || strings.IndexByte(inner, '%') >= 0 {
		return "", false
	}
	addr, err := netip.ParseAddr(inner)
	if err != nil || !addr.Is6() {
		return "", false
	}
	var buf [64]byte
	canon := addr.AppendTo(buf[:0])
	if string(canon) == inner {
		return raw[:end+1], true
	}
	return "[" + string(canon) + "]", true
}

// validPort reports whether p is a port as it may follow a host: empty or
// decimal digits with a value of at most 65535.
func validPort(p string) bool {
	if len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}
