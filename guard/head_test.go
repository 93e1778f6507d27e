package guard

import (
	"testing"

	"github.com/edgerate/edge/internal/hostile"
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
		h, reason := parseHead([]byte(tt.head))
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
