package algorithm

import "testing"

func TestString(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"sliding window", SlidingWindow.String(), "sliding_window"},
		{"fixed window", FixedWindow.String(), "fixed_window"},
		{"token bucket", TokenBucket.String(), "token_bucket"},
		{"leaky bucket", LeakyBucket.String(), "leaky_bucket"},
		{"quota", Quota.String(), "quota"},
		{"concurrency", Concurrency.String(), "concurrency"},
		{"algorithm out of range", Algorithm(9).String(), "Algorithm(9)"},
		{"standard", Standard.String(), "standard"},
		{"fine", Fine.String(), "fine"},
		{"precision out of range", Precision(2).String(), "Precision(2)"},
		{"daily", Daily.String(), "daily"},
		{"weekly", Weekly.String(), "weekly"},
		{"monthly", Monthly.String(), "monthly"},
		{"reset out of range", Reset(3).String(), "Reset(3)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		parse   func(string) (uint8, error)
		in      string
		want    uint8
		wantErr string
	}{
		{"empty algorithm", parseAlgorithm, "", uint8(SlidingWindow), ""},
		{"every algorithm", parseAlgorithm, "concurrency", uint8(Concurrency), ""},
		{"unknown algorithm", parseAlgorithm, "gcra", 0,
			`must be sliding_window, fixed_window, token_bucket, leaky_bucket, quota or concurrency, got "gcra"`},
		{"empty precision", parsePrecision, "", uint8(Standard), ""},
		{"fine", parsePrecision, "fine", uint8(Fine), ""},
		{"spelling is case-sensitive", parsePrecision, "Fine", 0, `must be standard or fine, got "Fine"`},
		{"empty reset", parseReset, "", uint8(Daily), ""},
		{"monthly", parseReset, "monthly", uint8(Monthly), ""},
		{"unknown reset", parseReset, "yearly", 0, `must be daily, weekly or monthly, got "yearly"`},
	}
	for _, tt := range tests {
		got, err := tt.parse(tt.in)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if got != tt.want || gotErr != tt.wantErr {
			t.Errorf("%s: parse(%q) = %d, %q; want %d, %q", tt.name, tt.in, got, gotErr, tt.want, tt.wantErr)
		}
	}
}

// Every value a type names parses back from its String.
func TestRoundTrip(t *testing.T) {
	for a := range Concurrency + 1 {
		if got, err := ParseAlgorithm(a.String()); got != a || err != nil {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", a.String(), got, err, a)
		}
	}
	for p := range Fine + 1 {
		if got, err := ParsePrecision(p.String()); got != p || err != nil {
			t.Errorf("ParsePrecision(%q) = %v, %v; want %v", p.String(), got, err, p)
		}
	}
	for r := range Monthly + 1 {
		if got, err := ParseReset(r.String()); got != r || err != nil {
			t.Errorf("ParseReset(%q) = %v, %v; want %v", r.String(), got, err, r)
		}
	}
}

func parseAlgorithm(s string) (uint8, error) { v, err := ParseAlgorithm(s); return uint8(v), err }
func parsePrecision(s string) (uint8, error) { v, err := ParsePrecision(s); return uint8(v), err }
func parseReset(s string) (uint8, error)     { v, err := ParseReset(s); return uint8(v), err }
