package wire

import (
	"strings"
	"testing"
)

func TestViaReceivedBy(t *testing.T) {
	const me = "edge-fra1-web3"
	tests := []struct {
		name, v string
		want    bool
	}{
		{"alone", "1.1 edge-fra1-web3", true},
		{"last of a list", "1.0 fred, 1.1 edge-fra1-web3", true},
		{"first of a list", "1.1 edge-fra1-web3, 1.1 p.example.net", true},
		{"with a comment", "1.1 edge-fra1-web3 (edge)", true},
		{"protocol name", "HTTP/1.1 edge-fra1-web3", true},
		{"tabs and extra spaces", " \t2  edge-fra1-web3\t,x", true},
		{"no space after the comma", "1.0 fred,1.1 edge-fra1-web3", true},
		{"after an unclosed comment", "1.0 fred (no end, 1.1 edge-fra1-web3", true},
		{"after a quote", `1.0 fred "x, 1.1 edge-fra1-web3`, true},
		{"in a comment with a comma", "1.0 fred (a, 1.1 edge-fra1-web3)", false}, // the piece ends with ')'
		{"another node", "1.1 edge-fra1-web4", false},
		{"a longer name", "1.1 edge-fra1-web3x", false},
		{"a shorter name", "1.1 edge-fra1-web", false},
		{"with a port", "1.1 edge-fra1-web3:8080", false},
		{"other case", "1.1 EDGE-FRA1-WEB3", false},
		{"as the protocol", "edge-fra1-web3", false},
		{"no protocol", " edge-fra1-web3", false},
		{"in a comment only", "1.1 p.example.net (edge-fra1-web3)", false},
		{"glued to the protocol", "1.1edge-fra1-web3", false},
		{"empty", "", false},
		{"commas only", ",,,", false},
	}
	for _, tt := range tests {
		if got := ViaReceivedBy(tt.v, me); got != tt.want {
			t.Errorf("%s: ViaReceivedBy(%q) = %v, want %v", tt.name, tt.v, got, tt.want)
		}
		if got := ViaReceivedBy([]byte(tt.v), me); got != tt.want {
			t.Errorf("%s: ViaReceivedBy([]byte(%q)) = %v, want %v", tt.name, tt.v, got, tt.want)
		}
	}
	if ViaReceivedBy("1.1 ", "") {
		t.Errorf(`ViaReceivedBy("1.1 ", "") = true, want false`)
	}
}

// TestViaReceivedByIsCheap: a Via as long as a head may be, of many
// entries, is read without allocating.
func TestViaReceivedByIsCheap(t *testing.T) {
	v := []byte(strings.Repeat("1.1 p.example.net (a, b), ", 40_000))
	got := testing.AllocsPerRun(10, func() {
		if ViaReceivedBy(v, "edge-local-x") {
			t.Fatal("found")
		}
	})
	if got != 0 {
		t.Errorf("%v allocations a read, want 0", got)
	}
}

func TestPseudonym(t *testing.T) {
	tests := []struct{ in, want string }{
		{"web3.fra1.example.com", "web3.fra1.example.com"},
		{"a b,c:d(e)", "a-b-c-d-e-"},
		{"caf\xc3\xa9", "caf--"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := Pseudonym(tt.in); got != tt.want {
			t.Errorf("Pseudonym(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzVia: ViaReceivedBy never panics, reads a string and its bytes
// alike, agrees with a reading by strings.Split and strings.Fields, and
// no value can hide an entry that follows it: v + ", 1.1 " + pseudonym is
// always received by pseudonym, whatever v opened (a comment, a quote).
func FuzzVia(f *testing.F) {
	for _, s := range []string{
		"1.1 edge-local-x", "1.0 fred, 1.1 p.example.net (Apache/1.1)", "HTTP/2 a,b c", "(", `"`, "1.1 a (b, c)",
		" \t,\t 1.1\t edge-local-x\t", "1.1 edge-local-x:80", strings.Repeat("1.1 a, ", 20),
	} {
		f.Add(s, "edge-local-x")
	}
	f.Fuzz(func(t *testing.T, v, pseudonym string) {
		got := ViaReceivedBy(v, pseudonym)
		if b := ViaReceivedBy([]byte(v), pseudonym); b != got {
			t.Fatalf("ViaReceivedBy(%q, %q): string %v, bytes %v", v, pseudonym, got, b)
		}
		if !IsToken(pseudonym) {
			return
		}
		want := false
		for _, piece := range strings.Split(v, ",") {
			words := strings.FieldsFunc(piece, func(r rune) bool { return r == ' ' || r == '\t' })
			// FieldsFunc splits at runes: a piece with invalid UTF-8 is
			// still cut only at spaces and tabs, which are single bytes.
			if len(words) >= 2 && words[1] == pseudonym {
				want = true
			}
		}
		if got != want {
			t.Fatalf("ViaReceivedBy(%q, %q) = %v, want %v", v, pseudonym, got, want)
		}
		if then := v + ", 1.1 " + pseudonym; !ViaReceivedBy(then, pseudonym) {
			t.Fatalf("ViaReceivedBy(%q, %q) = false: %q hides the entry after it", then, pseudonym, v)
		}
	})
}
