package rules

import (
	"bytes"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/edgerate/edge/internal/wire"
)

// TestKeyRoundTrip checks the three faces of a client key against each
// other: KeyText writes what ParseKey reads back into AppendKey's bytes.
func TestKeyRoundTrip(t *testing.T) {
	v4 := ClientPrefix(netip.MustParseAddr("203.0.113.9"), 64)
	v6 := ClientPrefix(netip.MustParseAddr("2001:db8:1:2:3:4:5:6"), 64)
	hdr := http.Header{"X-Api-Key": {"k1"}, "X-Two": {"a", "b"}, "X-Blank": {" "}}
	ip := KeyPart{Kind: KeyIP}
	tests := []struct {
		name string
		ks   []KeyPart
		src  KeySource
		want string // KeyText
	}{
		{"ipv4", []KeyPart{ip}, KeySource{Client: v4}, "203.0.113.9"},
		{"ipv6 by its prefix", []KeyPart{ip}, KeySource{Client: v6}, "2001:db8:1:2::/64"},
		{"client by name", []KeyPart{ip}, KeySource{ClientName: "lpr.example"}, "lpr.example"},
		{"header", []KeyPart{{Kind: KeyHeader, Header: "X-Api-Key"}}, KeySource{Client: v4, Header: hdr}, "k1"},
		{"header with two values", []KeyPart{{Kind: KeyHeader, Header: "X-Two"}}, KeySource{Client: v4, Header: hdr}, "a, b"},
		{"missing header", []KeyPart{{Kind: KeyHeader, Header: "X-None"}}, KeySource{Client: v4, Header: hdr}, "-203.0.113.9"},
		{"blank header", []KeyPart{{Kind: KeyHeader, Header: "X-Blank"}}, KeySource{Client: v6, Header: hdr}, "-2001:db8:1:2::/64"},
		{"no headers at all", []KeyPart{{Kind: KeyHeader, Header: "X-Api-Key"}}, KeySource{Client: v4}, "-203.0.113.9"},
		{"path and host", []KeyPart{ip, {Kind: KeyPath}, {Kind: KeyHost}}, KeySource{Client: v4, Path: "/v1/x", Host: "api.example"},
			"203.0.113.9|/v1/x|api.example"},
		// Bytes that would read as structure are written %XX.
		{"header value with |", []KeyPart{{Kind: KeyHeader, Header: "X-K"}, ip},
			KeySource{Client: v4, Header: http.Header{"X-K": {"a|b"}}}, "a%7Cb|203.0.113.9"},
		{"one header value with a comma", []KeyPart{{Kind: KeyHeader, Header: "X-K"}},
			KeySource{Client: v4, Header: http.Header{"X-K": {"a, b"}}}, "a%2C b"},
		{"header value spelling a missing header", []KeyPart{{Kind: KeyHeader, Header: "X-K"}},
			KeySource{Client: v4, Header: http.Header{"X-K": {"-1.2.3.4"}}}, "%2D1.2.3.4"},
		{"only the first value's - is escaped", []KeyPart{{Kind: KeyHeader, Header: "X-K"}},
			KeySource{Client: v4, Header: http.Header{"X-K": {"-a", "-b"}}}, "%2Da, -b"},
		{"percent, control and non-UTF-8 bytes", []KeyPart{{Kind: KeyHeader, Header: "X-K"}},
			KeySource{Client: v4, Header: http.Header{"X-K": {"100%\t\xff\u202e"}}}, "100%25%09%FF\u202e"},
		{"path with | and %", []KeyPart{{Kind: KeyPath}}, KeySource{Client: v4, Path: "/a|b%7C"}, "/a%7Cb%257C"},
		{"no host", []KeyPart{{Kind: KeyHost}}, KeySource{Client: v4}, ""},
		{"ja4", []KeyPart{{Kind: KeyJA4}, ip}, KeySource{Client: v4, JA4: "t13d1516h2_8daaf6152771_e5627efa2ab1"},
			"t13d1516h2_8daaf6152771_e5627efa2ab1|203.0.113.9"},
		{"no TLS keyed by ja4", []KeyPart{{Kind: KeyJA4}}, KeySource{Client: v6}, "-2001:db8:1:2::/64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkKeyFaces(t, tt.ks, &tt.src, tt.want) })
	}
}

// checkKeyFaces checks that KeyText writes want for src under ks, and
// ParseKey reads it back into AppendKey's bytes.
func checkKeyFaces(t *testing.T, ks []KeyPart, src *KeySource, want string) {
	t.Helper()
	if got := KeyText(ks, src); got != want {
		t.Fatalf("KeyText: got %q, want %q", got, want)
	}
	if !src.Client.IsValid() {
		return // a named client has no admin URL
	}
	got, err := ParseKey(ks, want, 64)
	if key := AppendKey(nil, ks, src); err != nil || !bytes.Equal(got, key) {
		t.Errorf("ParseKey(%q): got %x, %v, want %x", want, got, err, key)
	}
}

// TestKeyDistinct checks that keys of different sources never share bytes.
func TestKeyDistinct(t *testing.T) {
	a := ClientPrefix(netip.MustParseAddr("192.0.2.1"), 64)
	h := KeyPart{Kind: KeyHeader, Header: "X-K"}
	tests := []struct {
		name string
		ks   []KeyPart
		x, y KeySource
	}{
		{"missing header vs its address as a value", []KeyPart{h},
			KeySource{Client: a}, KeySource{Client: a, Header: http.Header{"X-K": {"192.0.2.1"}}}},
		{"one value vs two", []KeyPart{h},
			KeySource{Header: http.Header{"X-K": {"a, b"}}}, KeySource{Header: http.Header{"X-K": {"a", "b"}}}},
		{"path vs host", []KeyPart{{Kind: KeyPath}, {Kind: KeyHost}},
			KeySource{Path: "/ab", Host: "c"}, KeySource{Path: "/a", Host: "bc"}},
		{"address vs name", []KeyPart{{Kind: KeyIP}},
			KeySource{Client: a}, KeySource{ClientName: "192.0.2.1"}},
		{"no TLS vs a fingerprint", []KeyPart{{Kind: KeyJA4}},
			KeySource{Client: a}, KeySource{Client: a, JA4: "t13d1516h2_8daaf6152771_e5627efa2ab1"}},
		{"ja4 vs the same text in a header", []KeyPart{{Kind: KeyJA4}},
			KeySource{Client: a, JA4: "x"}, KeySource{Client: a, Header: http.Header{"X-K": {"x"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if x, y := AppendKey(nil, tt.ks, &tt.x), AppendKey(nil, tt.ks, &tt.y); bytes.Equal(x, y) {
				t.Errorf("got the same key %x for both, want two", x)
			}
		})
	}
}

func TestParseKeyErrors(t *testing.T) {
	ip := KeyPart{Kind: KeyIP}
	tests := []struct {
		name string
		ks   []KeyPart
		text string
		want string
	}{
		{"too many parts", []KeyPart{ip}, "1.2.3.4|x", "keyed by 1 parts ([ip]), got 2"},
		{"not an address", []KeyPart{ip}, "nobody", `invalid address "nobody"`},
		{"bad host", []KeyPart{{Kind: KeyHost}}, "a b", `invalid host "a b"`},
		{"bad escape", []KeyPart{{Kind: KeyHeader, Header: "X-K"}}, "a%zz", `part "a%zz": invalid URL escape "%zz"`},
		{"- and no client", []KeyPart{{Kind: KeyHeader, Header: "X-K"}}, "-nobody",
			`a part starting with - names the client of a request without the header: invalid address "nobody"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseKey(tt.ks, tt.text, 64); err == nil || err.Error() != tt.want {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}

// TestParseKeyAnyAddressInPrefix: an IPv6 client may be named by any
// address of its prefix, or an IPv4-mapped address.
func TestParseKeyAnyAddressInPrefix(t *testing.T) {
	ks := []KeyPart{{Kind: KeyIP}}
	for _, text := range []string{"2001:db8:1:2::/64", "2001:db8:1:2::9", "2001:db8:1:2:ffff::1/64"} {
		got, _ := ParseKey(ks, text, 64)
		want, _ := ParseKey(ks, "2001:db8:1:2::", 64)
		if !bytes.Equal(got, want) {
			t.Errorf("ParseKey(%q): got %x, want %x", text, got, want)
		}
	}
	got, _ := ParseKey(ks, "::ffff:192.0.2.1", 64)
	if want, _ := ParseKey(ks, "192.0.2.1", 64); !bytes.Equal(got, want) {
		t.Errorf("an IPv4-mapped address: got %x, want %x", got, want)
	}
}

// FuzzKeyText checks that a key's text names it and no other: ParseKey
// reads KeyText's text back into AppendKey's bytes, for any client
// address, header values, path and host and any key parts (up to four,
// two bits each of kinds), and the text is UTF-8, as JSON carries it.
func FuzzKeyText(f *testing.F) {
	f.Add(byte(0b01_00), "\xcb\x00q\t", false, byte(64), "k|1", "", byte(1), "/v1/x", "api.example")
	f.Add(byte(0b01_01), "", true, byte(48), "a, b", "-1.2.3.4", byte(2), "/%7C", "[2001:DB8::1]:80")
	f.Add(byte(0b11_10_01_00), "\x20\x01\x0d\xb8", false, byte(128), "-", "\xff\u202e%", byte(2), "/a|b", "")
	kinds := []KeyKind{KeyIP, KeyHeader, KeyPath, KeyHost}
	f.Fuzz(func(t *testing.T, parts byte, addr string, v4 bool, bits byte, h1, h2 string, nvals byte, path, host string) {
		var ks []KeyPart
		for i := range 1 + int(parts>>6)%4 {
			kind := kinds[parts>>(2*i)&3]
			if kind == KeyHost && nvals&4 != 0 {
				kind = KeyJA4 // keyed by h1 as the fingerprint
			}
			ks = append(ks, KeyPart{Kind: kind, Header: "X-K"})
		}
		var a16 [16]byte
		copy(a16[:], addr)
		a := netip.AddrFrom16(a16)
		if v4 {
			a = netip.AddrFrom4([4]byte(a16[:4]))
		}
		ipv6Bits := 32 + int(bits)%97
		hdr := http.Header{"X-K": []string{h1, h2}[:int(nvals)%3]}
		src := KeySource{Client: ClientPrefix(a, ipv6Bits), Path: CleanPath(path), Header: hdr, JA4: h1}
		src.Host, _ = wire.NormalizeHost(host)
		text := KeyText(ks, &src)
		if !utf8.ValidString(text) {
			t.Fatalf("KeyText = %q: not UTF-8", text)
		}
		got, err := ParseKey(ks, text, ipv6Bits)
		if want := AppendKey(nil, ks, &src); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("ParseKey(KeyText = %q): got %x, %v, want %x", text, got, err, want)
		}
	})
}

func TestKeyAllocs(t *testing.T) {
	src := KeySource{Client: ClientPrefix(netip.MustParseAddr("2001:db8::1"), 64), Path: "/v1/x", Host: "api.example",
		Header: http.Header{"X-Api-Key": {"k"}}}
	ks := []KeyPart{{Kind: KeyIP}, {Kind: KeyHeader, Header: "X-Api-Key"}, {Kind: KeyPath}, {Kind: KeyHost}}
	buf := make([]byte, 0, 128)
	if n := testing.AllocsPerRun(100, func() { AppendKey(buf[:0], ks, &src) }); n != 0 {
		t.Errorf("AppendKey allocates %v times, want 0", n)
	}
}

func TestParseKeyPart(t *testing.T) {
	tests := []struct {
		in      string
		want    KeyPart
		wantErr string
	}{
		{"ip", KeyPart{Kind: KeyIP}, ""},
		{"ja4", KeyPart{Kind: KeyJA4}, ""},
		{"header:x-api-key", KeyPart{Kind: KeyHeader, Header: "X-Api-Key"}, ""},
		{"header:host", KeyPart{}, `must be host rather than a header, got "header:host"`},
		{"header:a b", KeyPart{}, `header name must be an HTTP token, got "header:a b"`},
		{"cookie", KeyPart{}, `must be ip, path, host, ja4, header:NAME, cookie:NAME, query:NAME or jwt:CLAIM, got "cookie"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseKeyPart(tt.in)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tt.want || gotErr != tt.wantErr {
				t.Errorf("got %v, %q, want %v, %q", got, gotErr, tt.want, tt.wantErr)
			}
		})
	}
}

func TestMatchPath(t *testing.T) {
	tests := map[string]string{
		"":               "/",
		"/":              "/",
		"/a/b":           "/a/b",
		"//a//b/":        "/a/b/",
		"/a/./b/../c":    "/a/c",
		"a/b":            "/a/b",
		"/a;x=1/b;y":     "/a/b",
		"/a/;x":          "/a/",
		"/a;x/":          "/a/",
		"/;x/a":          "/a",
		"/../../a":       "/a",
		"/a/b/..":        "/a",
		"/admin;/x/..;/": "/admin/",
	}
	for in, want := range tests {
		if got := CleanPath(in); got != want {
			t.Errorf("CleanPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMatchPathAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { CleanPath("/api/v1/items/42") }); n != 0 {
		t.Errorf("CleanPath of a clean path allocates %v times, want 0", n)
	}
}

// FuzzMatchPath checks the form rules match on: absolute, without empty,
// dot or parameter parts, stable when applied again, and keeping a
// trailing slash.
func FuzzMatchPath(f *testing.F) {
	for _, s := range []string{"", "/", "/a/b", "//a//b/", "/a/./b/../c", "a/b", "/a;x/b", "/a/;x", "/..;/a", "/./", ";", "/a;/;b/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got := CleanPath(p)
		if got == "" || got[0] != '/' {
			t.Fatalf("CleanPath(%q) = %q: not absolute", p, got)
		}
		if strings.Contains(got, "//") || strings.IndexByte(got, ';') >= 0 {
			t.Fatalf("CleanPath(%q) = %q: has an empty segment or params", p, got)
		}
		for seg := range strings.SplitSeq(got, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("CleanPath(%q) = %q: has a dot segment", p, got)
			}
		}
		if again := CleanPath(got); again != got {
			t.Fatalf("CleanPath(%q) = %q, but CleanPath(%q) = %q", p, got, got, again)
		}
		if s := stripParams(p); strings.HasSuffix(s, "/") && !strings.HasSuffix(got, "/") {
			t.Fatalf("CleanPath(%q) = %q: lost the trailing slash", p, got)
		}
	})
}

// TestClientPrefixIPv4 checks ClientPrefix's shortcut for IPv4 against the
// masking it skips, mapped addresses included.
func TestClientPrefixIPv4(t *testing.T) {
	for _, s := range []string{"0.0.0.0", "203.0.113.9", "255.255.255.255", "::ffff:192.0.2.1", "10.1.2.3"} {
		a := netip.MustParseAddr(s)
		want, _ := a.Unmap().Prefix(32)
		for _, bits := range []int{0, 32, 64, 128} {
			if got := ClientPrefix(a, bits); got != want {
				t.Errorf("ClientPrefix(%s, %d) = %v, want %v", s, bits, got, want)
			}
		}
	}
}
