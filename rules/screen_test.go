package rules

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzScreenPath checks ScreenPath, which skips splitting a path without
// a dot, against both checks in full.
func FuzzScreenPath(f *testing.F) {
	for _, s := range []string{"/", "/a/./b", "/..", "/a/..;x/b", "/.;p", "/a;./b", "/\x01/..", "/../\x7f", "//", "", ";", "/a/b."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := pathControl(s)
		if want == "" {
			want = pathDotSegment(s)
		}
		if got := ScreenPath(s); got != want {
			t.Fatalf("ScreenPath(%q) = %q, want %q", s, got, want)
		}
	})
}

// TestDecodePath checks the path rules match for a path as sent, and
// what is refused before any rule.
func TestDecodePath(t *testing.T) {
	tests := []struct {
		raw     string
		want    string
		refused string // the error; "" if none
	}{
		{"", "/", ""},
		{"/v1/a", "/v1/a", ""},
		{"/v1/%79", "/v1/y", ""},
		{"/v1/%252F", "/v1/%2F", ""},
		{"//v1;x//a/", "/v1/a/", ""},
		{"/v1/%2Fa", "", "encoded '/' or '\\' in path"},
		{"/v1/%2fa", "", "encoded '/' or '\\' in path"},
		{"/v1/%5Ca", "", "encoded '/' or '\\' in path"},
		{"/v1\\a", "", "backslash in path"},
		{"/v1#a", "", "fragment in target"},
		{"/v1/%zz", "", "invalid percent-encoding in path"},
		{"/v1/%7", "", "invalid percent-encoding in path"},
		{"/v1/../a", "", "dot segment in path"},
		{"/v1/%2E%2e/a", "", "dot segment in path"},
		{"/v1/.;x/a", "", "dot segment in path"},
		{"/v1/%00", "", "control character in path"},
		{"/v1/\x7f", "", "control character in path"},
	}
	for _, tt := range tests {
		got, err := DecodePath(tt.raw)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if got != tt.want || gotErr != tt.refused {
			t.Errorf("DecodePath(%q): got %q, %q, want %q, %q", tt.raw, got, gotErr, tt.want, tt.refused)
		}
	}
}

// FuzzDecodePath checks that DecodePath decodes what it accepts as
// net/http does (url.ParseRequestURI's Path) and accepts what net/http
// decodes and the screen lets through.
func FuzzDecodePath(f *testing.F) {
	for _, s := range []string{"/v1/%79", "/v1/%252F", "/v1/%zz", "/%2e%2E/", "//a;b/c/", "/a%7", "/\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if raw == "" || raw[0] != '/' || strings.ContainsAny(raw, "?#") {
			return // a log record's path: no query, a fragment refused
		}
		got, err := DecodePath(raw)
		u, uerr := url.ParseRequestURI(raw)
		switch {
		case uerr != nil:
			if err == nil {
				t.Fatalf("DecodePath(%q) = %q, nil; net/http refuses it: %v", raw, got, uerr)
			}
		case ScreenRawPath(raw) != "" || ScreenPath(u.Path) != "":
			if err == nil {
				t.Fatalf("DecodePath(%q) = %q, nil; the screen refuses it", raw, got)
			}
		case err != nil || got != CleanPath(u.Path):
			t.Fatalf("DecodePath(%q) = %q, %v; want %q, nil", raw, got, err, CleanPath(u.Path))
		}
	})
}
