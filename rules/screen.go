package rules

import (
	"errors"
	"net/url"
	"strings"
)

// The proxy's screen (proxy/screen.go says why) refuses, before any rule
// sees it, a request whose path edge and an origin could read
// differently. The checks on the path itself are here, without net/http
// types, so that the replay lab drops the same log lines the proxy
// refuses and matches the rest by the same path.

// ScreenRawPath returns why a path as the client sent it (percent-encoded,
// without its query) is refused, or "": a fragment, a backslash, or an
// encoded '/' or '\' (%2F, %5C in either case).
func ScreenRawPath(raw string) string {
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '#':
			return "fragment in target"
		case '\\':
			return "backslash in path"
		case '%':
			if i+2 < len(raw) {
				if h := raw[i+1 : i+3]; strings.EqualFold(h, "2f") || strings.EqualFold(h, "5c") {
					return "encoded '/' or '\\' in path"
				}
			}
		}
	}
	return ""
}

// ScreenPath returns why a percent-decoded path is refused, or "": a
// control byte, or a dot segment ("." or "..", also before ";params").
func ScreenPath(p string) string {
	if reason := pathControl(p); reason != "" {
		return reason
	}
	if strings.IndexByte(p, '.') < 0 {
		return "" // no dot, no dot segment: most paths, without splitting
	}
	return pathDotSegment(p)
}

// pathControl and pathDotSegment are ScreenPath's two checks.
func pathControl(p string) string {
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < ' ' || c == 0x7f {
			return "control character in path"
		}
	}
	return ""
}

func pathDotSegment(p string) string {
	for seg := range strings.SplitSeq(p, "/") {
		name, _, _ := strings.Cut(seg, ";")
		if name == "." || name == ".." {
			return "dot segment in path"
		}
	}
	return ""
}

// DecodePath returns the path rules match for a path as the client sent
// it (percent-encoded, without its query): decoded once, as net/http
// decodes URL.Path, and cleaned with CleanPath. Its error, a refusal
// reason, is for a path net/http refuses (an invalid escape) or the
// screen does (ScreenRawPath, ScreenPath). A double-encoded "%252F"
// decodes to the text "%2F", as in the proxy, not to a separator. "" is
// "/": a log that does not record the path.
func DecodePath(raw string) (string, error) {
	if raw == "" {
		return "/", nil
	}
	p, err := url.PathUnescape(raw)
	if err != nil {
		return "", errors.New("invalid percent-encoding in path")
	}
	if reason := ScreenRawPath(raw); reason != "" {
		return "", errors.New(reason)
	}
	if reason := ScreenPath(p); reason != "" {
		return "", errors.New(reason)
	}
	return CleanPath(p), nil
}
