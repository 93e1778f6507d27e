package proxy

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// TestGRPCContentType: what makes a request gRPC's, as grpc-go's server
// reads Content-Type.
func TestGRPCContentType(t *testing.T) {
	tests := []struct {
		value string
		want  bool
	}{
		{"application/grpc", true},
		{"application/grpc+proto", true},
		{"Application/GRPC;charset=utf-8", true},
		{"application/grpc-web", false},
		{"application/grpc-web+proto", false},
		{"application/grpcx", false},
		{"application/json", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := grpcContentType(tt.value); got != tt.want {
			t.Errorf("grpcContentType(%q) = %v, want %v", tt.value, got, tt.want)
		}
	}
}

// TestGRPCRefusal: a gRPC request a rule refuses gets gRPC's trailers-only
// answer, status 200 with Grpc-Status 8 and the wait in Grpc-Message, with
// Retry-After and the rate-limit fields, and no body, whatever the rule's
// block_response says, over HTTP/2 and over HTTP/1.1 alike; a request of
// the same client that is not gRPC still gets the rule's own answer.
func TestGRPCRefusal(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	r := rule("one", 1, time.Minute)
	r.Headers = "always"
	r.BlockResponse = &rules.ResponseConfig{Status: 420, Body: `{"slow":"down"}`, ContentType: "application/json"}
	table, err := rules.Compile(oneDomain(origin.URL, r))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Table: table, Now: newClock().Now, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(p)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	h2 := srv.Client()
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
	defer h1.CloseIdleConnections()
	send := func(c *http.Client, ct string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/pkg.Svc/Call", strings.NewReader("\x00\x00\x00\x00\x00"))
		req.Host = "api.example.com"
		req.Header.Set("Content-Type", ct)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, body := send(h2, "application/grpc-web"); resp.StatusCode != 200 || body != "origin:a" {
		t.Fatalf("first request: %d %q, want the origin's 200", resp.StatusCode, body)
	}
	tests := []struct {
		name   string
		client *http.Client
		proto  int
	}{
		{"http2", h2, 2},
		{"http1", h1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := send(tt.client, "application/grpc+proto")
			if resp.ProtoMajor != tt.proto {
				t.Fatalf("answered over HTTP/%d, want %d", resp.ProtoMajor, tt.proto)
			}
			want := map[string]string{
				"Content-Type":          "application/grpc",
				"Grpc-Status":           "8",
				"Grpc-Message":          "rate limited: retry in " + resp.Header.Get("Retry-After") + "s",
				"X-Ratelimit-Limit":     "1",
				"X-Ratelimit-Remaining": "0",
			}
			if resp.Header.Get("Retry-After") == "" {
				t.Errorf("no Retry-After: %v", resp.Header)
			}
			if resp.Header.Get("Retry-After") == "" {
				t.Errorf("no Retry-After: %v", resp.Header)
			}
			if resp.StatusCode != 200 {
				t.Errorf("status %d, want 200", resp.StatusCode)
			}
			for k, v := range want {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s %q, want %q", k, got, v)
				}
			}
			if resp.Header.Get("RateLimit") == "" {
				t.Errorf("no RateLimit field: %v", resp.Header)
			}
			if body != "" || len(resp.Trailer) != 0 {
				t.Errorf("body %q, trailers %v: want neither (trailers-only)", body, resp.Trailer)
			}
		})
	}
	if resp, body := send(h2, "application/grpc-web"); resp.StatusCode != 420 || body != `{"slow":"down"}` {
		t.Errorf("gRPC-Web request: %d %q, want the block_response's 420", resp.StatusCode, body)
	}
}

// TestGRPCAnswers: the answers a gRPC request gets from shedding and from
// a store that cannot decide, UNAVAILABLE, are the same bytes through
// net/http and appended, as every answer is.
func TestGRPCAnswers(t *testing.T) {
	tests := []struct {
		name    string
		make    func(a *answer)
		status  string
		message string
	}{
		{"shed", func(a *answer) { a.shedAnswer("sheddable", formGRPC) }, "14", "overloaded: requests are shed; retry in 1s"},
		{"unavailable", func(a *answer) { a.unavailableAnswer(2500*time.Millisecond, formGRPC) }, "14", "rate limit store unavailable: retry in 3s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a answer
			tt.make(&a)
			rec := httptest.NewRecorder()
			a.write(rec)
			if rec.Code != 200 || rec.Header().Get("Grpc-Status") != tt.status || rec.Header().Get("Grpc-Message") != tt.message ||
				rec.Header().Get("Content-Type") != "application/grpc" || rec.Body.Len() != 0 {
				t.Errorf("got %d %v %q, want 200, grpc-status %s, grpc-message %q, no body", rec.Code, rec.Header(), rec.Body, tt.status, tt.message)
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.write(w) }))
			defer srv.Close()
			got := rawExchange(t, srv.Listener.Addr().String(), "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
			want := string(a.appendTo(nil, time.Now(), false))
			want = strings.Replace(want, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)
			if stripDate(got) != stripDate(want) {
				t.Errorf("net/http wrote\n%q\nappendTo\n%q", got, want)
			}
		})
	}
}

// TestFastDeclinesGRPC: the fast path leaves a gRPC request over HTTP/1.1
// to ServeHTTP, which answers it gRPC's way, and refuses as before one
// that is not gRPC.
func TestFastDeclinesGRPC(t *testing.T) {
	tests := []struct {
		name     string
		ct       string
		answered bool
	}{
		{"grpc", "application/grpc", false},
		{"grpc proto", "application/grpc+proto", false},
		{"grpc-web", "application/grpc-web", true},
		{"json", "application/json", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := benchProxy(t, rules.RuleConfig{Name: "per-ip", Limit: 1, Period: time.Minute}, 0)
			h := fastHead("POST /pkg.Svc/Call HTTP/1.1\r\nHost: api.example.com\r\nContent-Type: " + tt.ct + "\r\nContent-Length: 0\r\n\r\n")
			p.Answer(h, nil) // counted, allowed, declined and given back (no forward here)
			req := httptest.NewRequest("POST", "/pkg.Svc/Call", nil)
			req.Host, req.RemoteAddr = "api.example.com", "203.0.113.9:4000"
			req.Header.Set("Content-Type", tt.ct)
			p.ServeHTTP(&nopWriter{h: make(http.Header)}, req)
			out, ok := p.Answer(h, nil)
			if ok != tt.answered {
				t.Fatalf("fast path answered %v (%q), want %v", ok, out, tt.answered)
			}
		})
	}
}
