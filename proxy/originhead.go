package proxy

import (
	"bytes"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/edgerate/edge/internal/wire"
)

// The request head the fast forward writes to an origin: what the slow
// path's Rewrite and the transport make of the client's (fastforward.go).

// fastForwardable reports whether the target of h can be forwarded as it
// is: the slow path would send the same request-target (url.URL's
// EscapedPath gives the path back unchanged, cleanQueryParams leaves the
// query alone).
func fastForwardable(h *Head) bool {
	t := h.Target
	if len(t) > 1 && t[1] == '/' {
		return false
	}
	if h.Peer.Is6() && h.Peer.IsLinkLocalUnicast() {
		return false // its zone, which the head's peer does not carry, would be in X-Forwarded-For
	}
	path := true
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c == '?':
			path = false
		case c == '%':
			if i+2 >= len(t) || !wire.IsHexDigit(t[i+1]) || !wire.IsHexDigit(t[i+2]) {
				return false
			}
			i += 2
		case !path:
			if c == ';' {
				return false
			}
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9':
		default:
			if !strings.ContainsRune("-_.~/!$&'()*+,;=:@[]", rune(c)) {
				return false
			}
		}
	}
	return true
}

// reqField is a field of the request head sent to the origin.
type reqField struct{ key, value []byte }

var viaName = []byte("Via") // read only

// forwardScratch is what one fast forward needs, pooled.
type forwardScratch struct {
	head   []byte
	frame  []byte // the body's framing fields (fastbody.go)
	keys   []byte
	fields []reqField
	buf    [32 << 10]byte
}

var forwardScratches = sync.Pool{New: func() any { return new(forwardScratch) }}

// appendOriginHead appends the request head the slow path sends to the
// origin for h (see the top of this file), with via, this node's Via
// entry, on a line after the client's.
//
// fingerprint is tls.fingerprint_header in canonical form ("" for none):
// a client's field of that name is dropped, and a request over TLS sends
// the client's JA4 in it.
func (s *forwardScratch) appendOriginHead(b []byte, h *Head, trusted bool, framing, via []byte, fingerprint string) []byte {
	s.keys, s.fields = s.keys[:0], s.fields[:0]
	var ua []byte
	haveUA, teTrailers := false, false
	var xff, xfh, xfp []reqField
	for _, hf := range h.Fields {
		name, value := hf.Name, hf.Value
		start := len(s.keys)
		s.keys = appendCanonical(s.keys, name)
		key := s.keys[start:len(s.keys):len(s.keys)]
		f := reqField{key, value}
		switch string(key) {
		case "User-Agent":
			if !haveUA {
				ua, haveUA = value, true
			}
			continue
		case "Te":
			teTrailers = teTrailers || containsToken(value, "trailers")
			continue
		case "X-Forwarded-For":
			xff = append(xff, f)
			continue
		case "X-Forwarded-Host":
			xfh = append(xfh, f)
			continue
		case "X-Forwarded-Proto":
			xfp = append(xfp, f)
			continue
		case "Host", "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
			"Proxy-Authorization", "Trailer", "Transfer-Encoding", "Upgrade", "Forwarded",
			"Expect", "Content-Length":
			continue
		case "X-Real-Ip":
			if !trusted {
				continue
			}
		}
		if fingerprint != "" && string(key) == fingerprint {
			continue
		}
		s.fields = append(s.fields, f)
	}
	if teTrailers {
		s.fields = append(s.fields, reqField{[]byte("Te"), []byte("trailers")})
	}
	s.fields = append(s.fields, reqField{viaName, via}) // after the client's: the sort is stable
	// X-Forwarded-For: the trusted proxy's lines joined, then the peer.
	start := len(s.keys)
	if trusted {
		for _, f := range xff {
			s.keys = append(s.keys, f.value...)
			s.keys = append(s.keys, ", "...)
		}
	}
	s.keys = h.Peer.AppendTo(s.keys)
	s.fields = append(s.fields, reqField{[]byte("X-Forwarded-For"), s.keys[start:len(s.keys):len(s.keys)]})
	if trusted && len(xfh) > 0 {
		s.fields = append(s.fields, xfh...)
	} else {
		s.fields = append(s.fields, reqField{[]byte("X-Forwarded-Host"), h.Host})
	}
	switch {
	case trusted && len(xfp) > 0:
		s.fields = append(s.fields, xfp...)
	case isHTTPS(h.TLS, h.Front): // edge's TLS, or the balancer's (front.go)
		s.fields = append(s.fields, reqField{[]byte("X-Forwarded-Proto"), []byte("https")})
	default:
		s.fields = append(s.fields, reqField{[]byte("X-Forwarded-Proto"), []byte("http")})
	}
	if fingerprint != "" && h.TLS != nil && h.TLS.JA4 != "" {
		s.fields = append(s.fields, reqField{stringBytes(fingerprint), stringBytes(h.TLS.JA4)})
	}
	slices.SortStableFunc(s.fields, func(a, b reqField) int { return strings.Compare(bytesString(a.key), bytesString(b.key)) })

	b = append(b, h.Method...)
	b = append(b, ' ')
	b = append(b, h.Target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = appendCleanHost(b, h.Host)
	b = append(b, "\r\n"...)
	if len(ua) > 0 {
		b = append(b, "User-Agent: "...)
		b = append(b, ua...)
		b = append(b, "\r\n"...)
	}
	b = append(b, framing...) // the body's length or chunking (fastbody.go)
	for _, f := range s.fields {
		b = append(b, f.key...)
		b = append(b, ": "...)
		b = append(b, f.value...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// appendCanonical appends name in canonical form, as textproto gives it
// (the guard passes only token names).
func appendCanonical(b, name []byte) []byte {
	upper := true
	for _, c := range name {
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
		upper = c == '-'
	}
	return b
}

// appendCleanHost appends the Host the transport writes for host: what
// net/http's cleanHost makes of an ASCII host (split at the port and
// joined again).
func appendCleanHost(b, host []byte) []byte {
	if bytes.IndexByte(host, '[') < 0 {
		return append(b, host...) // split and joined, it is the same
	}
	h, port, err := net.SplitHostPort(bytesString(host))
	if err != nil {
		return append(b, host...)
	}
	return append(b, net.JoinHostPort(h, port)...)
}

// containsToken reports whether a comma-separated field value holds token,
// case-insensitively, as httpguts.HeaderValuesContainsToken does.
func containsToken(v []byte, token string) bool {
	for len(v) > 0 {
		var elem []byte
		if i := strings.IndexByte(bytesString(v), ','); i >= 0 {
			elem, v = v[:i], v[i+1:]
		} else {
			elem, v = v, nil
		}
		if strings.EqualFold(strings.Trim(bytesString(elem), " \t"), token) {
			return true
		}
	}
	return false
}
