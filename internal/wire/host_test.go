package wire

import (
	"strings"
	"testing"
)

func TestNormalizeHost(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	tests := []struct {
		name   string
		raw    string
		want   string
		wantOK bool
	}{
		{"lower-case name", "example.com", "example.com", true},
		{"mixed case", "ExAmple.COM", "example.com", true},
		{"port", "example.com:8080", "example.com", true},
		{"empty port", "example.com:", "example.com", true},
		{"port 0", "example.com:0", "example.com", true},
		{"port 65535", "example.com:65535", "example.com", true},
		{"trailing dot", "example.com.", "example.com", true},
		{"trailing dot and port", "Example.COM.:443", "example.com", true},
		{"single label", "localhost", "localhost", true},
		{"ipv4", "192.0.2.1", "192.0.2.1", true},
		{"ipv4 with port", "192.0.2.1:80", "192.0.2.1", true},
		{"ipv6", "[::1]", "[::1]", true},
		{"ipv6 with port", "[::1]:8080", "[::1]", true},
		{"ipv6 upper-case", "[2001:DB8::1]", "[2001:db8::1]", true},
		{"ipv6 not canonical", "[2001:db8:0:0::1]:443", "[2001:db8::1]", true},
		{"ipv4-mapped ipv6", "[::ffff:192.0.2.1]", "[::ffff:192.0.2.1]", true},
		{"label of 63 bytes", long63 + ".com", long63 + ".com", true},
		{"name of 253 bytes", strings.Repeat("a.", 126) + "a", strings.Repeat("a.", 126) + "a", true},
		{"catch-all star passes through", "*", "*", true},

		{"empty", "", "", false},
		{"only a dot", ".", "", false},
		{"only a port", ":80", "", false},
		{"two trailing dots", "example.com..", "", false},
		{"double dot", "a..example.com", "", false},
		{"leading dot", ".example.com", "", false},
		{"space", "exa mple.com", "", false},
		{"leading space", " example.com", "", false},
		{"tab", "example.com\t", "", false},
		{"newline", "example.com\n", "", false},
		{"NUL", "exa\x00mple.com", "", false},
		{"DEL", "exa\x7fmple.com", "", false},
		{"non-ASCII", "bücher.de", "", false},
		{"slash", "example.com/x", "", false},
		{"backslash", "example.com\\x", "", false},
		{"user info", "user@example.com", "", false},
		{"percent encoding", "a%2eexample", "", false},
		{"double port", "1.2.3.4:9000:80", "", false},
		{"non-numeric port", "example.com:http", "", false},
		{"signed port", "example.com:+80", "", false},
		{"port out of range", "example.com:65536", "", false},
		{"port too long", "example.com:000080", "", false},
		{"label of 64 bytes", long63 + "a.com", "", false},
		{"name of 254 bytes", strings.Repeat("a.", 126) + "ab", "", false},
		{"bare ipv6", "::1", "", false},
		{"unclosed bracket", "[::1", "", false},
		{"empty brackets", "[]", "", false},
		{"bracketed ipv4", "[192.0.2.1]", "", false},
		{"ipv6 zone", "[fe80::1%25eth0]", "", false},
		{"ipv6 future form", "[v1.x]", "", false},
		{"junk after bracket", "[::1]x", "", false},
		{"ipv6 bad port", "[::1]:x", "", false},
		{"ipv6 double port", "[::1]:80:80", "", false},
		{"bracket inside name", "a[b].com", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := NormalizeHost(tt.raw)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("NormalizeHost(%q) = %q, %v; want %q, %v", tt.raw, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestNormalizeHostAllocs(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want float64
	}{
		{"normalised name", "www.example.com", 0},
		{"name with port and dot", "www.example.com.:443", 0},
		{"canonical ipv6", "[2001:db8::1]:443", 0},
		{"upper-case name", "WWW.example.com", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := testing.AllocsPerRun(100, func() { NormalizeHost(tt.raw) })
			if got != tt.want {
				t.Errorf("NormalizeHost(%q) allocations = %v, want %v", tt.raw, got, tt.want)
			}
		})
	}
}

func FuzzNormalizeHost(f *testing.F) {
	for _, s := range []string{
		"example.com", "Example.COM.:443", "[::1]:80", "[2001:DB8:0::1]", "1.2.3.4:9000:80",
		"a..b", "", ".", "*", "a%2eb", "user@host", "[fe80::1%eth0]", "[::ffff:1.2.3.4]",
		strings.Repeat("a", 64) + ".com", "x:", "\x00", "bücher.de",
	} {
		f.Add(s)
	}
	buf := make([]byte, 0, 8)
	f.Fuzz(func(t *testing.T, raw string) {
		out, ok := NormalizeHost(raw)
		var into string
		var ok2 bool
		into, buf, ok2 = NormalizeHostInto(raw, buf)
		if into != out || ok2 != ok {
			t.Fatalf("NormalizeHostInto(%q) = %q, %v; NormalizeHost gives %q, %v", raw, into, ok2, out, ok)
		}
		if !ok {
			if out != "" {
				t.Fatalf("NormalizeHost(%q) = %q, false; want \"\" with false", raw, out)
			}
			return
		}
		if out == "" {
			t.Fatalf("NormalizeHost(%q) = \"\", true", raw)
		}
		again, ok := NormalizeHost(out)
		if !ok || again != out {
			t.Fatalf("NormalizeHost(%q) = %q, %v; want %q, true (input came from NormalizeHost(%q))",
				out, again, ok, out, raw)
		}
		if strings.ToLower(out) != out {
			t.Fatalf("NormalizeHost(%q) = %q, which is not lower-case", raw, out)
		}
	})
}
