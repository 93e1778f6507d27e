package guard

import (
	"bytes"

	"github.com/edgerate/edge/internal/wire"
)

// headFraming is what the framer needs to know about a request head.
type headFraming struct {
	bodyLen     int64 // -1 for chunked
	upgrade     bool  // the request carries Upgrade
	passthrough bool  // net/http will refuse it and close the connection
	simple      bool  // parseHead filled its simple (fast.go)
}

// simple is where parseHead puts the parts of a simple head (fast.go)
// for the fast path, in the same pass.
type simple struct {
	req    Request
	fields [maxFastFields]Field
}

// parseHead checks a complete request head (request line, field lines,
// empty line) and returns its framing, or the reason to reject it. If s is
// not nil and the head is simple (fast.go), it also fills s.req's Method,
// Target, Host, Fields and Head and sets the result's simple.
//
// A head is rejected for: a line that ends in a bare LF (RFC 9112 §2.2
// lets a recipient accept one; net/http does, and so might an origin that
// reads the head differently, so edge refuses it); a malformed request
// line, or the asterisk-form target; the HTTP/2 preface; a CR inside a
// line; an obs-fold line (RFC 9112 §5.2 lets a server reject it,
// and a proxy that unfolds it differently from its origin is a smuggling
// risk); a field line without a colon or with an invalid name; more than
// one Host; more than one Content-Length, even with equal values (RFC 9110
// §8.6 allows either rejecting or merging); Transfer-Encoding together
// with Content-Length, or in HTTP/1.0; an invalid Content-Length; and an
// absolute-form target with userinfo, or whose authority is not the Host
// field's host once both are normalised like a domain lookup.
//
// It is one function, longer than most, because it is one pass over the
// head's lines whose checks share what earlier lines said (Host seen,
// lengths, Transfer-Encoding); split up, that state would travel between
// the parts. The fast path's reading rides along in the same pass: a head
// is read once, whatever asks.
func parseHead(h []byte, s *simple) (headFraming, string) {
	var (
		out                 headFraming
		line                []byte
		rest                = h
		first               = true
		http10              bool
		method, target      []byte
		nCL, nTE, nHost     int
		clVal, teVal, hostV []byte
		nf                  int  // fields in s
		expect              bool // an Expect field seen
	)
	keep := s != nil // the head is simple so far
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		line, rest = rest[:i], rest[i+1:]
		n := len(line)
		if n == 0 || line[n-1] != '\r' {
			return out, "bare LF line end"
		}
		line = line[:n-1]
		if bytes.IndexByte(line, '\r') >= 0 {
			return out, "CR inside a line"
		}
		if first {
			first = false
			m, tgt, version, reason := parseRequestLine(line)
			if reason != "" {
				return out, reason
			}
			if version[5] != '1' {
				out.passthrough = true // net/http answers 505
				return out, ""
			}
			http10 = version[7] == '0'
			method, target = m, tgt
			keep = keep && string(version) == "HTTP/1.1" && simpleTarget(tgt)
			continue
		}
		if len(line) == 0 {
			break // the empty line that ends the head
		}
		if line[0] == ' ' || line[0] == '\t' {
			return out, "obs-fold line"
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 || !wire.IsToken(line[:colon]) {
			return out, "malformed field line"
		}
		name, value := line[:colon], wire.TrimOWS(line[colon+1:])
		// Names by length first: most fields are none of these.
		switch len(name) {
		case len("host"):
			if wire.EqualFoldLower(name, "host") {
				nHost++
				hostV = value
			}
		case len("expect"):
			if keep && wire.EqualFoldLower(name, "expect") {
				// net/http answers 417 for another expectation, and reads
				// only the first of two.
				keep = !expect && wire.EqualFoldLower(value, "100-continue")
				expect = true
			}
		case len("upgrade"):
			if wire.EqualFoldLower(name, "upgrade") {
				out.upgrade, keep = true, false
			}
		case len("connection"):
			if keep && wire.EqualFoldLower(name, "connection") {
				keep = wire.EqualFoldLower(value, "keep-alive")
			}
		case len("content-length"):
			if wire.EqualFoldLower(name, "content-length") {
				nCL++
				clVal = value
			}
		case len("transfer-encoding"):
			if wire.EqualFoldLower(name, "transfer-encoding") {
				nTE++
				teVal = value
			}
		}
		if keep {
			if nf == maxFastFields || !simpleValue(value) {
				keep = false
			} else {
				s.fields[nf] = Field{Name: name, Value: value}
				nf++
			}
		}
	}
	switch {
	case nHost > 1:
		return out, "more than one Host"
	case nCL > 1:
		return out, "more than one Content-Length"
	case nTE > 0 && nCL > 0:
		return out, "Transfer-Encoding with Content-Length"
	case nTE > 0 && http10:
		return out, "Transfer-Encoding in HTTP/1.0"
	case nTE > 1 || nTE == 1 && !wire.EqualFoldLower(teVal, "chunked"):
		out.passthrough = true // net/http answers 501
	case nTE == 1:
		out.bodyLen = -1
	case nCL == 1:
		n, ok := parseContentLength(clVal)
		if !ok {
			return out, "invalid Content-Length"
		}
		out.bodyLen = n
	}
	if reason := checkAbsoluteForm(target, hostV, nHost == 1); reason != "" {
		return out, reason
	}
	if keep && nHost == 1 && validHost(hostV) {
		// Field by field: the rest of s.req is the offer's to set.
		s.req.Method, s.req.Target, s.req.Host, s.req.Fields, s.req.Raw = method, target, hostV, s.fields[:nf], h
		s.req.expect = expect
		out.simple = true
	}
	return out, ""
}

// parseRequestLine splits a request line (without its line end) into
// target and version, or returns why it is malformed. The version is
// "HTTP/" DIGIT "." DIGIT; the HTTP/2 preface is refused, since this
// listener does not serve h2c.
//
// The asterisk-form target ("OPTIONS *") is refused too: it asks about
// the server as a whole, which edge cannot answer for an origin, and
// net/http would answer it itself (200, for any Host) unless its
// DisableGeneralOptionsHandler is set. Refusing it here counts it with
// the other framing refusals.
func parseRequestLine(line []byte) (method, target, version []byte, reason string) {
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, nil, nil, "CR inside a line"
	}
	method, r, ok1 := bytes.Cut(line, []byte(" "))
	target, version, ok2 := bytes.Cut(r, []byte(" "))
	if !ok1 || !ok2 || !wire.IsToken(method) || len(target) == 0 || !isHTTPVersion(version) {
		return nil, nil, nil, "malformed request line"
	}
	if version[5] == '2' && string(method) == "PRI" {
		return nil, nil, nil, "HTTP/2 preface (h2c is not served)"
	}
	if string(target) == "*" {
		return nil, nil, nil, "asterisk-form target"
	}
	return method, target, version, ""
}

// checkAbsoluteForm checks an absolute-form request target against the
// Host field. net/http serves such a request for the target's authority
// and drops the Host field, as RFC 9112 §3.2.2 asks of an origin server;
// a gateway in a chain of proxies that might route by the Host field
// instead must refuse the disagreement (HAProxy does the same).
func checkAbsoluteForm(target, host []byte, haveHost bool) string {
	if len(target) == 0 || target[0] == '/' {
		return "" // origin form: most targets, without a search
	}
	_, after, ok := bytes.Cut(target, []byte("://"))
	if !ok {
		return ""
	}
	authority := after
	if i := bytes.IndexAny(after, "/?#"); i >= 0 {
		authority = after[:i]
	}
	if bytes.IndexByte(authority, '@') >= 0 {
		return "userinfo in the request target"
	}
	if !haveHost {
		return ""
	}
	a, ok1 := wire.NormalizeHost(string(authority))
	b, ok2 := wire.NormalizeHost(string(host))
	if !ok1 || !ok2 || a != b {
		return "request target authority disagrees with Host"
	}
	return ""
}

// parseContentLength accepts 1 to 19 decimal digits (RFC 9110 §8.6).
func parseContentLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 19 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if !wire.IsDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, n >= 0
}

// isHTTPVersion reports whether v is "HTTP/" DIGIT "." DIGIT.
func isHTTPVersion(v []byte) bool {
	return len(v) == 8 && string(v[:5]) == "HTTP/" && wire.IsDigit(v[5]) && v[6] == '.' && wire.IsDigit(v[7])
}
