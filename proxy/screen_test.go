package proxy

import (
	"bufio"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/edgerate/edge/rules"

	"github.com/edgerate/edge/internal/hostile"
)

func TestScreenRequest(t *testing.T) {
	tests := []struct {
		line   string // request line
		fields []string
		want   int // 0: accepted
	}{
		{"GET /a/b?c=d HTTP/1.1", nil, 0},
		{"GET //a//b HTTP/1.1", nil, 0},
		{"GET /a;p=1/b HTTP/1.1", nil, 0},
		{"GET /%7Euser/%41 HTTP/1.1", nil, 0},
		{"GET /tags/%23go HTTP/1.1", nil, 0},
		{"GET http://a.example/x HTTP/1.1", nil, 0},
		{"GET HTTPS://a.example HTTP/1.1", nil, 0},
		{"GET /..a/b.. HTTP/1.1", nil, 0},
		{"GET /a/...;/b HTTP/1.1", nil, 0},
		{"PUT /x HTTP/1.1", []string{"X_Custom: 1"}, 0},
		{"GET / HTTP/1.1", []string{"Upgrade: websocket", "Connection: Upgrade"}, 0},

		{"CONNECT a.example:443 HTTP/1.1", nil, 501},
		{"PRI * HTTP/2.0", nil, 400},
		{"get / HTTP/1.1", nil, 400},
		{"GET * HTTP/1.1", nil, 400},
		{"GET ftp://a.example/ HTTP/1.1", nil, 400},
		{"GET http://u@a.example/ HTTP/1.1", nil, 400},
		{"GET /a/./b HTTP/1.1", nil, 400},
		{"GET /a/../b HTTP/1.1", nil, 400},
		{"GET /a/%2E%2e/b HTTP/1.1", nil, 400},
		{"GET /a/..;x/b HTTP/1.1", nil, 400},
		{"GET /a/. HTTP/1.1", nil, 400},
		{"GET /a%2Fb HTTP/1.1", nil, 400},
		{"GET /a%5cb HTTP/1.1", nil, 400},
		{"GET /a\\b HTTP/1.1", nil, 400},
		{"GET /a%00 HTTP/1.1", nil, 400},
		{"GET /a%7f HTTP/1.1", nil, 400},
		{"GET /a#b HTTP/1.1", nil, 400},
		{"GET / HTTP/1.1", []string{"Upgrade: h2c"}, 0},
		{"GET / HTTP/1.1", []string{"Upgrade: websocket, H2C/1"}, 0},
		{"GET / HTTP/1.1", []string{"HTTP2-Settings: x"}, 0},
		{"GET / HTTP/1.1", []string{"X_Forwarded_For: 1.2.3.4"}, 400},
		{"GET / HTTP/1.1", []string{"x_real_ip: 1.2.3.4"}, 400},
	}
	for _, tt := range tests {
		raw := hostile.Req(append([]string{tt.line, "Host: a.example"}, tt.fields...)...)
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			t.Fatalf("%q: %v", tt.line, err)
		}
		if got := screenRequest(r); got.status != tt.want {
			t.Errorf("%q %q: got %d (%s), want %d", tt.line, tt.fields, got.status, got.reason, tt.want)
		}
	}
}

// TestDropH2C: an h2c upgrade is taken out of a request's fields, the h2c
// token (any case, any version) and HTTP2-Settings; any other upgrade
// offered stays.
func TestDropH2C(t *testing.T) {
	tests := []struct {
		name          string
		upgrade       []string
		wantUpgrade   []string
		settingsGiven bool
	}{
		{"h2c", []string{"h2c"}, nil, true},
		{"upper case, a version", []string{"H2C/1"}, nil, false},
		{"in a list", []string{"websocket, h2c"}, []string{"websocket"}, true},
		{"on lines of its own", []string{"h2c", "websocket", " ,h2c/2 "}, []string{"websocket"}, false},
		{"no h2c", []string{"websocket"}, []string{"websocket"}, false},
		{"no upgrade", nil, nil, true},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.upgrade != nil {
			h["Upgrade"] = tt.upgrade
		}
		if tt.settingsGiven {
			h["Http2-Settings"] = []string{"AAMAAABkAARAAAAAAAIAAAAA"}
		}
		dropH2C(h)
		if !slices.Equal(h["Upgrade"], tt.wantUpgrade) || h["Http2-Settings"] != nil {
			t.Errorf("%s: Upgrade %q, HTTP2-Settings %q; want Upgrade %q and no HTTP2-Settings", tt.name, h["Upgrade"], h["Http2-Settings"], tt.wantUpgrade)
		}
	}
}

// FuzzScreenTarget checks that no request target the screen accepts can
// mean, to an origin, a path other than the one rules match on. For each
// accepted target it resolves the path as several kinds of origin do
// (RFC 3986 dot removal before or after percent-decoding, servlet-style
// ";params" removal, nginx-style slash merging), and requires each result
// to equal, once slashes are merged and params cut, the path edge matched.
// Merging and cutting only ever make more rules match (see rules.CleanPath),
// so any origin's reading of the target is a path edge's rules saw.
func FuzzScreenTarget(f *testing.F) {
	for _, c := range hostile.Corpus() {
		if line, _, ok := strings.Cut(c.Raw, "\r\n"); ok {
			if parts := strings.Split(line, " "); len(parts) == 3 {
				f.Add(parts[1])
			}
		}
	}
	f.Fuzz(func(t *testing.T, target string) {
		if strings.ContainsAny(target, " \r\n") {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: a.example\r\n\r\n")))
		if err != nil {
			return // net/http refuses it before edge sees it
		}
		if screenRequest(r).status != 0 {
			return
		}
		edge := rules.CleanPath(r.URL.Path)
		raw := r.URL.EscapedPath()
		if r.URL.Opaque != "" {
			t.Fatalf("accepted an opaque target %q", target)
		}
		decoded, err := url.PathUnescape(raw)
		if err != nil {
			t.Fatalf("accepted %q whose path %q does not decode: %v", target, raw, err)
		}
		readings := map[string]string{
			"decode then resolve dots":    removeDotSegments(decoded),
			"resolve dots then decode":    mustUnescape(t, removeDotSegments(raw)),
			"cut params, then resolve":    removeDotSegments(cutParams(decoded)),
			"merge slashes, then resolve": removeDotSegments(mergeSlashes(decoded)),
			"as received":                 decoded,
		}
		for how, origin := range readings {
			if got := mergeSlashes(cutParams(origin)); got != edge && !(got == "" && edge == "/") {
				t.Fatalf("target %q: an origin that would %s reads %q (%q); edge matched %q", target, how, origin, got, edge)
			}
		}
	})
}

func mustUnescape(t *testing.T, s string) string {
	u, err := url.PathUnescape(s)
	if err != nil {
		t.Fatalf("unescape %q: %v", s, err)
	}
	return u
}

// removeDotSegments is RFC 3986 §5.2.4, literally.
func removeDotSegments(in string) string {
	var out []string
	for in != "" {
		switch {
		case strings.HasPrefix(in, "../"):
			in = in[3:]
		case strings.HasPrefix(in, "./"):
			in = in[2:]
		case strings.HasPrefix(in, "/./"):
			in = in[2:]
		case in == "/.":
			in = "/"
		case strings.HasPrefix(in, "/../"):
			in = in[3:]
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case in == "/..":
			in = "/"
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case in == "." || in == "..":
			in = ""
		default:
			i := strings.IndexByte(in[1:], '/')
			if i < 0 {
				out, in = append(out, in), ""
			} else {
				out, in = append(out, in[:i+1]), in[i+1:]
			}
		}
	}
	return strings.Join(out, "")
}

func mergeSlashes(s string) string {
	for strings.Contains(s, "//") {
		s = strings.ReplaceAll(s, "//", "/")
	}
	return s
}

// cutParams cuts ";params" off every segment, as a servlet container reads
// a path.
func cutParams(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i], _, _ = strings.Cut(s, ";")
	}
	return strings.Join(segs, "/")
}

// FuzzScreenShortcuts checks acceptsJSON, which skips its full reading
// when a byte it needs is missing, against that reading (rules'
// FuzzScreenPath does the same for the path's checks).
func FuzzScreenShortcuts(f *testing.F) {
	f.Add("application/JSON; q=0.5")
	f.Add("text/html, application/problem+json;q=0")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := acceptsJSON(s), acceptsJSONType(s); got != want {
			t.Fatalf("acceptsJSON(%q) = %v, want %v", s, got, want)
		}
	})
}
