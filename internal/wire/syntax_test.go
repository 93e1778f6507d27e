package wire

import "testing"

func TestIsToken(t *testing.T) {
	tests := []struct {
		name string
		s    string
		want bool
	}{
		{"method", "GET", true},
		{"every tchar symbol", "!#$%&'*+-.^_`|~", true},
		{"letters and digits", "aZ09", true},
		{"empty", "", false},
		{"space", "a b", false},
		{"colon", "a:", false},
		{"separator", "a(b)", false},
		{"control", "a\x00", false},
		{"DEL", "a\x7f", false},
		{"non-ASCII", "caf\xc3\xa9", false},
	}
	for _, tt := range tests {
		if got := IsToken(tt.s); got != tt.want {
			t.Errorf("%s: IsToken(%q) = %v, want %v", tt.name, tt.s, got, tt.want)
		}
		if got := IsToken([]byte(tt.s)); got != tt.want {
			t.Errorf("%s: IsToken([]byte(%q)) = %v, want %v", tt.name, tt.s, got, tt.want)
		}
	}
}

func TestHexDigits(t *testing.T) {
	for c := range 256 {
		b := byte(c)
		want, decimal := -1, false
		switch {
		case '0' <= b && b <= '9':
			want, decimal = c-'0', true
		case 'a' <= b && b <= 'f':
			want = c - 'a' + 10
		case 'A' <= b && b <= 'F':
			want = c - 'A' + 10
		}
		if got := IsHexDigit(b); got != (want >= 0) {
			t.Errorf("IsHexDigit(%q) = %v, want %v", b, got, want >= 0)
		}
		if got := IsDigit(b); got != decimal {
			t.Errorf("IsDigit(%q) = %v, want %v", b, got, decimal)
		}
		if want >= 0 {
			if got := Unhex(b); int(got) != want {
				t.Errorf("Unhex(%q) = %d, want %d", b, got, want)
			}
		}
	}
}

func TestTrimOWS(t *testing.T) {
	tests := []struct {
		name, s, want string
	}{
		{"none", "a b", "a b"},
		{"spaces and tabs", " \t a b\t ", "a b"},
		{"only whitespace", " \t", ""},
		{"empty", "", ""},
		{"other whitespace kept", "\r\n\va\v", "\r\n\va\v"},
		{"non-ASCII space kept", "\u00a0a", "\u00a0a"},
	}
	for _, tt := range tests {
		if got := TrimOWS(tt.s); got != tt.want {
			t.Errorf("%s: TrimOWS(%q) = %q, want %q", tt.name, tt.s, got, tt.want)
		}
		if got := string(TrimOWS([]byte(tt.s))); got != tt.want {
			t.Errorf("%s: TrimOWS([]byte(%q)) = %q, want %q", tt.name, tt.s, got, tt.want)
		}
	}
}

func TestEqualFoldLower(t *testing.T) {
	tests := []struct {
		name, s, lower string
		want           bool
	}{
		{"equal", "host", "host", true},
		{"upper-case", "HOST", "host", true},
		{"mixed case", "Content-Length", "content-length", true},
		{"longer", "hosts", "host", false},
		{"shorter", "hos", "host", false},
		{"other letter", "hist", "host", false},
		{"Kelvin sign is not k", "\u212aey", "key", false},
		{"no folding beyond ASCII letters", "[", "{", false},
	}
	for _, tt := range tests {
		if got := EqualFoldLower(tt.s, tt.lower); got != tt.want {
			t.Errorf("%s: EqualFoldLower(%q, %q) = %v, want %v", tt.name, tt.s, tt.lower, got, tt.want)
		}
		if got := EqualFoldLower([]byte(tt.s), tt.lower); got != tt.want {
			t.Errorf("%s: EqualFoldLower([]byte(%q), %q) = %v, want %v", tt.name, tt.s, tt.lower, got, tt.want)
		}
	}
}
