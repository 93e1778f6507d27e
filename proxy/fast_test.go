package proxy

import (
	"bufio"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wire"

	"github.com/edgerate/edge/rules"
)

// fastHead makes the Head the framing guard would offer for raw.
func fastHead(raw string) *Head {
	line, _, _ := strings.Cut(raw, "\r\n")
	parts := strings.SplitN(line, " ", 3)
	host := ""
	var fields []wire.Field
	for _, l := range strings.Split(raw, "\r\n")[1:] {
		if name, v, ok := strings.Cut(l, ":"); ok {
			fields = append(fields, wire.Field{Name: []byte(name), Value: []byte(wire.TrimOWS(v))})
			if strings.EqualFold(name, "host") {
				host = wire.TrimOWS(v)
			}
		}
	}
	return &Head{Method: []byte(parts[0]), Target: []byte(parts[1]), Host: []byte(host), Fields: fields,
		Peer: netip.MustParseAddr("203.0.113.9"), Now: time.Unix(1_800_000_000, 0)}
}

// TestFastAnswerAllocs: with local counting, deciding and writing a
// refusal on the fast path allocates nothing, with fields, JSON, a header
// key, a path rule and a cost header.
func TestFastAnswerAllocs(t *testing.T) {
	tests := []struct {
		name string
		rule rules.RuleConfig
		raw  string
	}{
		{"ip", rules.RuleConfig{Name: "per-ip", Limit: 1, Period: time.Minute},
			"GET /v1/items HTTP/1.1\r\nHost: api.example.com\r\nUser-Agent: x\r\n\r\n"},
		{"json, header key", rules.RuleConfig{Name: "per-key", Limit: 1, Period: time.Minute, Key: []string{"header:X-Api-Key"}},
			"GET /v1/items?a=1 HTTP/1.1\r\nHost: API.example.com\r\nAccept: application/json\r\nX-Api-Key: k\r\n\r\n"},
		{"path, token bucket", rules.RuleConfig{Name: "per-path", Limit: 1, Period: time.Minute, Key: []string{"ip", "path"}, Algorithm: "token_bucket"},
			"POST /v1/%69tems HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 0\r\n\r\n"},
		{"cost header", rules.RuleConfig{Name: "per-unit", Limit: 3, Period: time.Minute, CostHeader: "X-Units", MaxCost: 3},
			"GET /v1/items HTTP/1.1\r\nHost: api.example.com\r\nx-units: 2\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := benchProxy(t, tt.rule, 0)
			h := fastHead(tt.raw)
			out := make([]byte, 0, 4096)
			if _, ok := p.Answer(h, out); ok {
				t.Fatal("the first request was refused")
			}
			out, ok := p.Answer(h, out) // declined: counted, given back, so allowed again
			if ok {
				t.Fatal("a declined request was not given back")
			}
			req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(tt.raw)))
			if err != nil {
				t.Fatal(err)
			}
			req.RemoteAddr = "203.0.113.9:4000"
			w := &nopWriter{h: make(http.Header)}
			p.ServeHTTP(w, req)
			if w.status != http.StatusOK {
				t.Fatalf("ServeHTTP: status %d, want 200", w.status)
			}
			if _, ok := p.Answer(h, out[:0]); !ok {
				t.Fatal("the request over the limit was not refused")
			}
			if n := testing.AllocsPerRun(100, func() {
				c := *h // a Head made for each call, as the guard's hook makes it
				out, ok = p.Answer(&c, out[:0])
			}); (n != 0 && !raceEnabled) || !ok {
				t.Errorf("%v allocations per refusal (answered %v), want 0", n, ok)
			}
			if !strings.HasPrefix(string(out), "HTTP/1.1 429 Too Many Requests\r\n") {
				t.Errorf("answer %q", out)
			}
		})
	}
}

// FuzzFastTarget checks the fast path's reading of a request target
// against the slow path's: a target it accepts is one net/http parses and
// the screen lets through, with the same cleaned path.
func FuzzFastTarget(f *testing.F) {
	for _, s := range []string{"/", "/a/b?c=d", "/a%2fb", "/%41%zz", "/a/../b", "/a;x=1/b", "//a", "/a\\b", "/a#b", "/%00", "/a%2e%2e/b", "/caf%C3%A9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		if target == "" || target[0] != '/' || strings.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
			return // the framing guard offers only such targets
		}
		var s fastScratch
		path, ok := s.screenTarget([]byte(target))
		if !ok {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: a\r\n\r\n")))
		if err != nil {
			t.Fatalf("%q: fast path accepts, net/http refuses: %v", target, err)
		}
		if no := screenRequest(r); no.status != 0 {
			t.Fatalf("%q: fast path accepts, the screen refuses: %s", target, no.reason)
		}
		if want := rules.CleanPath(r.URL.Path); path != want {
			t.Fatalf("%q: fast path reads path %q, the slow path %q", target, path, want)
		}
	})
}

// TestFastCostRefusal: a request whose cost a block rule cannot take is
// answered 400 by the fast path itself, as checkCosts answers it, and
// what the rules decided before that rule is given back.
func TestFastCostRefusal(t *testing.T) {
	p := benchProxy(t, rules.RuleConfig{Name: "units", Limit: 3, Period: time.Minute, CostHeader: "X-Units", MaxCost: 3}, 0)
	tests := []struct {
		name     string
		raw      string
		answered bool
		want     string // the answer's start
	}{
		{"bad", "GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Units: x\r\n\r\n", true,
			"HTTP/1.1 400 Bad Request\r\nCache-Control: no-store\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n"},
		{"too high, JSON", "GET / HTTP/1.1\r\nHost: api.example.com\r\nAccept: application/json\r\nx-units: 4\r\n\r\n", true,
			"HTTP/1.1 400 Bad Request\r\nCache-Control: no-store\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\n"},
		{"twice", "GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Units: 1\r\nX-UNITS: 1\r\n\r\n", true, "HTTP/1.1 400 Bad Request\r\n"},
		{"HEAD: net/http's", "HEAD / HTTP/1.1\r\nHost: api.example.com\r\nX-Units: x\r\n\r\n", false, ""},
		{"valid: allowed, declined", "GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Units: 3\r\n\r\n", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, ok := p.Answer(fastHead(tt.raw), nil)
			if ok != tt.answered || !strings.HasPrefix(string(out), tt.want) {
				t.Errorf("Answer: %v, %q; want %v, %q...", ok, out, tt.answered, tt.want)
			}
		})
	}
	// Nothing was counted: a request of cost 3 is refused only after one.
	h := fastHead("GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Units: 3\r\n\r\n")
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Units: 3\r\n\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	req.RemoteAddr = "203.0.113.9:4000"
	w := &nopWriter{h: make(http.Header)}
	p.ServeHTTP(w, req)
	if w.status != http.StatusOK {
		t.Fatalf("ServeHTTP: status %d, want 200", w.status)
	}
	if out, ok := p.Answer(h, nil); !ok || !strings.HasPrefix(string(out), "HTTP/1.1 429 ") {
		t.Errorf("after one request of cost 3: %v, %q; want a 429", ok, out)
	}
}
