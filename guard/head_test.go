package guard

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/internal/wire"
)

func TestParseHead(t *testing.T) {
	tests := []struct {
		name        string
		head        string
		wantLen     int64
		upgrade     bool
		passthrough bool
		reject      bool
	}{
		{"no body", hostile.Req("GET / HTTP/1.1", hostile.HostAPI), 0, false, false, false},
		{"content-length", hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Content-Length: 12"), 12, false, false, false},
		{"content-length with OWS", hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Content-Length: \t12 "), 12, false, false, false},
		{"chunked", hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "transfer-encoding: Chunked"), -1, false, false, false},
		{"HTTP/1.0 content-length", hostile.Req("POST / HTTP/1.0", "Content-Length: 1"), 1, false, false, false},
		{"upgrade", hostile.Req("GET / HTTP/1.1", hostile.HostAPI, "Upgrade: websocket", "Connection: Upgrade"), 0, true, false, false},
		{"bare LF", "GET / HTTP/1.1\nHost: a\n\n", 0, false, false, true},
		{"bare LF request line", "GET / HTTP/1.1\nHost: a\r\n\r\n", 0, false, false, true},
		{"bare LF field line", "GET / HTTP/1.1\r\nHost: a\n\r\n", 0, false, false, true},
		{"bare LF empty line", "GET / HTTP/1.1\r\nHost: a\r\n\n", 0, false, false, true},
		{"OPTIONS *", hostile.Req("OPTIONS * HTTP/1.1", hostile.HostAPI), 0, false, false, true},
		{"GET *", hostile.Req("GET * HTTP/1.1", hostile.HostAPI), 0, false, false, true},
		{"OPTIONS path", hostile.Req("OPTIONS /* HTTP/1.1", hostile.HostAPI), 0, false, false, false},
		{"unsupported coding", hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: gzip"), 0, false, true, false},
		{"two codings", hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"), 0, false, true, false},
		{"HTTP/2.0", hostile.Req("GET / HTTP/2.0", hostile.HostAPI), 0, false, true, false},
		{"TE and CL", hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Transfer-Encoding: chunked", "Content-Length: 1"), 0, false, false, true},
		{"two CL", hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Content-Length: 1", "Content-Length: 1"), 0, false, false, true},
		{"CL list", hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Content-Length: 1, 1"), 0, false, false, true},
		{"CL too long", hostile.Req("POST / HTTP/1.1", hostile.HostAPI, "Content-Length: 12345678901234567890"), 0, false, false, true},
		{"TE in 1.0", hostile.Req("POST / HTTP/1.0", "Transfer-Encoding: chunked"), 0, false, false, true},
		{"two Hosts", hostile.Req("GET / HTTP/1.1", hostile.HostAPI, hostile.HostWWW), 0, false, false, true},
		{"obs-fold", hostile.Req("GET / HTTP/1.1", hostile.HostAPI, "X: a", " b"), 0, false, false, true},
		{"CR in line", hostile.Req("GET / HTTP/1.1", hostile.HostAPI, "X: a\rb"), 0, false, false, true},
		{"PRI", "PRI * HTTP/2.0\r\n\r\n", 0, false, false, true},
		{"absolute, same host", hostile.Req("GET http://api.example.com:80/x HTTP/1.1", "Host: API.example.com."), 0, false, false, false},
		{"absolute, other host", hostile.Req("GET http://www.example.com/x HTTP/1.1", hostile.HostAPI), 0, false, false, true},
		{"absolute, userinfo", hostile.Req("GET http://a@api.example.com/x HTTP/1.1", hostile.HostAPI), 0, false, false, true},
		{"absolute, no Host", hostile.Req("GET http://api.example.com/x HTTP/1.0"), 0, false, false, false},
	}
	for _, tt := range tests {
		h, reason := parseHead([]byte(tt.head), nil)
		if got := reason != ""; got != tt.reject {
			t.Errorf("%s: rejected = %v (%q), want %v", tt.name, got, reason, tt.reject)
			continue
		}
		if tt.reject {
			continue
		}
		if h.bodyLen != tt.wantLen || h.upgrade != tt.upgrade || h.passthrough != tt.passthrough {
			t.Errorf("%s: got %+v, want bodyLen %d upgrade %v passthrough %v", tt.name, h, tt.wantLen, tt.upgrade, tt.passthrough)
		}
	}
}

// FuzzSimpleHeadOnePass checks that parseHead, reading a head once for
// the framing and the fast path alike, finds the same simple heads with
// the same parts as the fast path's own second pass did, and the same
// framing whether it is asked for them or not.
func FuzzSimpleHeadOnePass(f *testing.F) {
	for _, c := range hostile.Corpus() {
		f.Add([]byte(c.Raw))
	}
	f.Add([]byte(hostile.Get("/a", "Connection: keep-alive", "X: \tv ")))
	f.Add([]byte("GET / HTTP/1.2\r\nHost: a\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		end := bytes.Index(data, []byte("\r\n\r\n"))
		if end < 0 {
			return
		}
		h := data[:end+4]
		plain, reason := parseHead(h, nil)
		var s simple
		read, reason2 := parseHead(h, &s)
		if reason != reason2 {
			t.Fatalf("%q: reason %q without the fast path's reading, %q with", h, reason, reason2)
		}
		got := read.simple
		read.simple = false
		if plain != read {
			t.Fatalf("%q: framing %+v without the fast path's reading, %+v with", h, plain, read)
		}
		if reason != "" {
			return
		}
		var want Request
		var fields [maxFastFields]Field
		wantSimple := simpleHeadTwoPass(h, &want, &fields)
		if got != wantSimple {
			t.Fatalf("%q: simple %v, the second pass says %v", h, got, wantSimple)
		}
		if got && !reflect.DeepEqual(s.req, want) {
			t.Fatalf("%q: read %+v, the second pass %+v", h, s.req, want)
		}
	})
}

// simpleHeadTwoPass is the fast path's own reading of a head, in a second
// pass, that parseHead's one pass replaced.
func simpleHeadTwoPass(head []byte, r *Request, fields *[maxFastFields]Field) bool {
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	method, line, _ := bytes.Cut(line, []byte(" "))
	target, version, _ := bytes.Cut(line, []byte(" "))
	if string(version) != "HTTP/1.1" || len(target) == 0 || target[0] != '/' {
		return false
	}
	if !simpleTarget(target) { // the target's own rules, since changed
		return false
	}
	n, host, hosts, expect := 0, []byte(nil), 0, false
	for {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		if len(line) == 0 {
			break
		}
		if n == maxFastFields {
			return false
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = wire.TrimOWS(value)
		for _, c := range value {
			if c < ' ' && c != '\t' || c == 0x7f {
				return false // net/http answers 400
			}
		}
		switch {
		case wire.EqualFoldLower(name, "host"):
			host, hosts = value, hosts+1
		case wire.EqualFoldLower(name, "connection"):
			if !wire.EqualFoldLower(value, "keep-alive") {
				return false
			}
		case wire.EqualFoldLower(name, "expect"):
			if expect || !wire.EqualFoldLower(value, "100-continue") {
				return false // net/http answers 417, or reads the first only
			}
			expect = true
		case wire.EqualFoldLower(name, "upgrade"):
			return false
		}
		fields[n] = Field{Name: name, Value: value}
		n++
	}
	if hosts != 1 || !validHost(host) {
		return false
	}
	*r = Request{Head: wire.Head{Method: method, Target: target, Host: host, Fields: fields[:n]}, Raw: head, expect: expect}
	return true
}
