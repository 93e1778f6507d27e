package headers_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/edgerate/edge/headers"
)

func TestParsePolicies(t *testing.T) {
	tests := []struct {
		name string
		v    string
		want []headers.Policy
	}{
		{"empty", "", nil},
		{"only spaces", "   ", nil},
		{"draft example", `"burst";q=100;w=60,"daily";q=1000;w=86400`, []headers.Policy{
			{Name: "burst", Quota: 100, Window: time.Minute},
			{Name: "daily", Quota: 1000, Window: 24 * time.Hour},
		}},
		{"OWS around commas", " \"a\";q=1 \t,\t \"b\";q=2\t ", []headers.Policy{{Name: "a", Quota: 1}, {Name: "b", Quota: 2}}},
		{"partition key ignored", `"peruser";q=100;w=60;pk=:cHsdsRa894==:`, []headers.Policy{{Name: "peruser", Quota: 100, Window: time.Minute}}},
		{"quota unit ignored", `"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`, []headers.Policy{{Name: "peruser", Quota: 65535, Window: 10 * time.Second}}},
		{"unpadded byte sequence", `"a";q=1;pk=:YQ:`, []headers.Policy{{Name: "a", Quota: 1}}},
		{"vendor parameters of every type ignored", `"a";q=1;acme-x=1.5;acme-y=?0;acme-z=@1700000000;acme-d=%"caf%c3%a9";acme-t=tok/en:x;acme-flag`, []headers.Policy{{Name: "a", Quota: 1}}},
		{"token name", `permin;q=50;w=60`, []headers.Policy{{Name: "permin", Quota: 50, Window: time.Minute}}},
		{"escaped name", `"a\"b\\c";q=1`, []headers.Policy{{Name: `a"b\c`, Quota: 1}}},
		{"last duplicate wins", `"a";q=1;w=1;q=2`, []headers.Policy{{Name: "a", Quota: 2, Window: time.Second}}},
		{"space after semicolon", `"a"; q=1; w=2`, []headers.Policy{{Name: "a", Quota: 1, Window: 2 * time.Second}}},
		{"w=0", `"a";q=1;w=0`, []headers.Policy{{Name: "a", Quota: 1}}},
		{"-0 is 0", `"a";q=-0`, []headers.Policy{{Name: "a"}}},
		{"largest integers", `"a";q=999999999999999;w=999999999999999`, []headers.Policy{{Name: "a", Quota: headers.MaxInteger, Window: math.MaxInt64}}},
		{"lines joined", strings.Join([]string{`"a";q=1`, `"b";q=2`}, ","), []headers.Policy{{Name: "a", Quota: 1}, {Name: "b", Quota: 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := headers.ParsePolicies(tt.v)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("ParsePolicies(%q) = %+v, %v, want %+v", tt.v, got, err, tt.want)
			}
			// The unpadded byte sequence is the one case where httpsfv is
			// stricter than RFC 9651 asks.
			if tt.name == "unpadded byte sequence" {
				return
			}
			ref, err := refPolicies(tt.v)
			if err != nil || !slices.Equal(ref, tt.want) {
				t.Errorf("reference parses %q as %+v, %v, want %+v", tt.v, ref, err, tt.want)
			}
		})
	}
}

func TestParseLimits(t *testing.T) {
	tests := []struct {
		name string
		v    string
		want []headers.Limit
	}{
		{"draft example", `"default";r=50;t=30`, []headers.Limit{{Name: "default", Remaining: 50, Reset: 30 * time.Second}}},
		{"no t", `"default";r=999;pk=:dHJpYWwxMjEzMjM=:`, []headers.Limit{{Name: "default", Remaining: 999}}},
		{"two", `"hour";r=900;t=600, "day";r=100;t=36000`, []headers.Limit{
			{Name: "hour", Remaining: 900, Reset: 10 * time.Minute},
			{Name: "day", Remaining: 100, Reset: 10 * time.Hour},
		}},
		{"huge t saturates", `"a";r=0;t=999999999999999`, []headers.Limit{{Name: "a", Reset: math.MaxInt64}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := headers.ParseLimits(tt.v)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("ParseLimits(%q) = %+v, %v, want %+v", tt.v, got, err, tt.want)
			}
			ref, err := refLimits(tt.v)
			if err != nil || !slices.Equal(ref, tt.want) {
				t.Errorf("reference parses %q as %+v, %v, want %+v", tt.v, ref, err, tt.want)
			}
		})
	}
}

// Each of these must be rejected by ParsePolicies and by the reference; the
// ones marked syntax must be rejected by httpsfv itself.
var invalidPolicies = []struct {
	name   string
	v      string
	syntax bool
}{
	{"missing q", `"a";w=60`, false},
	{"q not an integer", `"a";q=1.5`, false},
	{"q a string", `"a";q="1"`, false},
	{"q boolean", `"a";q`, false},
	{"negative q", `"a";q=-1`, false},
	{"negative w", `"a";q=1;w=-1`, false},
	{"w a decimal", `"a";q=1;w=1.0`, false},
	{"name an integer", `1;q=1`, false},
	{"name a byte sequence", `:YQ==:;q=1`, false},
	{"inner list", `("a" "b");q=1`, false},
	{"second member bad", `"a";q=1, "b"`, false},
	{"trailing comma", `"a";q=1,`, true},
	{"empty member", `"a";q=1,,"b";q=2`, true},
	{"leading comma", `,"a";q=1`, true},
	{"leading tab", "\t\"a\";q=1", true},
	{"unterminated string", `"a;q=1`, true},
	{"bad escape", `"a\n";q=1`, true},
	{"non-ASCII in string", "\"caf\u00e9\";q=1", true},
	{"control in string", "\"a\tb\";q=1", true},
	{"16-digit integer", `"a";q=1000000000000000`, true},
	{"decimal with 4 fraction digits", `"a";q=1;x=1.2345`, true},
	{"decimal with 13 integer digits", `"a";q=1;x=1234567890123.1`, true},
	{"decimal ending in dot", `"a";q=1;x=1.`, true},
	{"minus alone", `"a";q=-`, true},
	{"upper-case key", `"a";Q=1`, true},
	{"key starting with digit", `"a";1q=1`, true},
	{"empty value", `"a";q=`, true},
	{"space before =", `"a";q =1`, true},
	{"garbage after item", `"a";q=1 x`, true},
	{"unterminated byte sequence", `"a";q=1;pk=:YQ==`, true},
	{"bad base64 character", `"a";q=1;pk=:Y.Q=:`, true},
	{"bad boolean", `"a";q=1;x=?2`, true},
	{"decimal date", `"a";q=1;x=@1.5`, true},
	{"display string upper-case hex", `"a";q=1;x=%"%C3%A9"`, true},
	{"display string not UTF-8", `"a";q=1;x=%"%ff"`, true},
	{"display string truncated escape", `"a";q=1;x=%"%c"`, true},
	{"unterminated inner list", `("a" "b"`, true},
	{"inner list without space", `("a""b")`, true},
	{"bare item start", `<a>;q=1`, true},
	{"inner list with bad item parameter", `("a";Q=1);q=1`, true},
	{"inner list with bad parameter", `("a");Q=1`, true},
	{"inner list ending after item", `("a";x=1`, true},
	{"inner list open", `(`, true},
	{"empty inner list", `();q=1`, false},
	{"display string without quote", `"a";q=1;x=%a`, true},
	{"display string unterminated", `"a";q=1;x=%"abc`, true},
	{"display string with control", "\"a\";q=1;x=%\"a\tb\"", true},
	{"display string non-ASCII", "\"a\";q=1;x=%\"\u00e9\"", true},
}

func TestParsePoliciesInvalid(t *testing.T) {
	for _, tt := range invalidPolicies {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := headers.ParsePolicies(tt.v); err == nil || got != nil {
				t.Errorf("ParsePolicies(%q) = %+v, %v, want nil and an error", tt.v, got, err)
			} else if !strings.HasPrefix(err.Error(), "parse RateLimit-Policy: ") {
				t.Errorf("ParsePolicies(%q) error %q lacks the field name", tt.v, err)
			}
			if got, err := refPolicies(tt.v); err == nil {
				t.Errorf("reference parses %q as %+v, want an error", tt.v, got)
			}
			if _, err := httpsfv.UnmarshalList([]string{tt.v}); (err != nil) != tt.syntax {
				t.Errorf("httpsfv.UnmarshalList(%q) error = %v, want error %t", tt.v, err, tt.syntax)
			}
		})
	}
}

func TestParseLimitsInvalid(t *testing.T) {
	for _, v := range []string{`"a";t=1`, `"a";r=-1`, `"a";r=1;t=-1`, `"a";r=1;t=?1`, `"a";r=1;`} {
		if got, err := headers.ParseLimits(v); err == nil {
			t.Errorf("ParseLimits(%q) = %+v, want an error", v, got)
		} else if !strings.HasPrefix(err.Error(), "parse RateLimit: ") {
			t.Errorf("ParseLimits(%q) error %q lacks the field name", v, err)
		}
	}
}

// FuzzParse checks ParsePolicies and ParseLimits against a reference built
// on httpsfv, and that what they accept formats back to the same values.
func FuzzParse(f *testing.F) {
	for _, tt := range invalidPolicies {
		f.Add(tt.v)
	}
	for _, v := range []string{
		`"burst";q=100;w=60, "daily";q=1000;w=86400`,
		`"default";r=50;t=30`,
		`"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`,
		`"a";q=1;acme-x=1.5;acme-y=?0;acme-z=@1700000000;acme-d=%"caf%c3%a9";acme-t=tok/en:x;acme-flag`,
		`tok;r=1;t=2, "b\"c";r=3`,
		`("a" "b";x=1);y=2, "c";q=1`,
		`"a";q=1;pk=:YQ:`,
	} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ps, err := headers.ParsePolicies(v)
		ref, refErr := refPolicies(v)
		if err := agree(err, refErr); err != nil {
			t.Fatalf("ParsePolicies(%q): %v", v, err)
		}
		if err == nil && refErr == nil && !slices.Equal(ps, ref) {
			t.Fatalf("ParsePolicies(%q) = %+v, reference %+v", v, ps, ref)
		}
		for _, p := range ps {
			out := string(headers.AppendPolicy(nil, p))
			again, err := headers.ParsePolicies(out)
			p.Window = min(p.Window, headers.MaxSeconds*time.Second)
			if err != nil || len(again) != 1 || again[0] != p {
				t.Fatalf("ParsePolicies(%s) = %+v, %v, want [%+v]", out, again, err, p)
			}
		}

		ls, err := headers.ParseLimits(v)
		refL, refErr := refLimits(v)
		if err := agree(err, refErr); err != nil {
			t.Fatalf("ParseLimits(%q): %v", v, err)
		}
		if err == nil && refErr == nil && !slices.Equal(ls, refL) {
			t.Fatalf("ParseLimits(%q) = %+v, reference %+v", v, ls, refL)
		}
		for _, l := range ls {
			out := string(headers.AppendLimit(nil, l))
			again, err := headers.ParseLimits(out)
			l.Reset = min(l.Reset, headers.MaxSeconds*time.Second)
			if err != nil || len(again) != 1 || again[0] != l {
				t.Fatalf("ParseLimits(%s) = %+v, %v, want [%+v]", out, again, err, l)
			}
		}
	})
}

// agree reports whether our parser's error and the reference's agree. The
// one disagreement allowed: httpsfv requires '=' padding in a Byte
// Sequence, which RFC 9651, Section 4.2.7 says parsers SHOULD NOT do.
func agree(err, refErr error) error {
	switch {
	case (err == nil) == (refErr == nil):
		return nil
	case err == nil && errors.As(refErr, new(base64.CorruptInputError)):
		return nil
	case err == nil:
		return fmt.Errorf("accepted, reference rejected: %v", refErr)
	default:
		return fmt.Errorf("rejected (%v), reference accepted", err)
	}
}

// refPolicies is the reference for ParsePolicies: httpsfv parses the List
// and the draft's rules are applied to what it returns.
func refPolicies(v string) ([]headers.Policy, error) {
	var ps []headers.Policy
	err := refList(v, "q", "w", func(name string, q, w int64) {
		ps = append(ps, headers.Policy{Name: name, Quota: q, Window: seconds(w)})
	})
	if err != nil {
		return nil, err
	}
	return ps, nil
}

// refLimits is the reference for ParseLimits.
func refLimits(v string) ([]headers.Limit, error) {
	var ls []headers.Limit
	err := refList(v, "r", "t", func(name string, r, t int64) {
		ls = append(ls, headers.Limit{Name: name, Remaining: r, Reset: seconds(t)})
	})
	if err != nil {
		return nil, err
	}
	return ls, nil
}

func refList(v, req, opt string, add func(name string, req, opt int64)) error {
	l, err := httpsfv.UnmarshalList([]string{v})
	if err != nil {
		return err
	}
	for i, m := range l {
		it, ok := m.(httpsfv.Item)
		if !ok {
			return fmt.Errorf("member %d: %T", i, m)
		}
		var name string
		switch x := it.Value.(type) {
		case string:
			name = x
		case httpsfv.Token:
			name = string(x)
		default:
			return fmt.Errorf("member %d: name %T", i, x)
		}
		rv, _ := it.Params.Get(req)
		r, ok := rv.(int64)
		if !ok || r < 0 {
			return fmt.Errorf("member %d: %s=%v", i, req, rv)
		}
		var o int64
		if ov, ok := it.Params.Get(opt); ok {
			if o, ok = ov.(int64); !ok || o < 0 {
				return fmt.Errorf("member %d: %s=%v", i, opt, ov)
			}
		}
		add(name, r, o)
	}
	return nil
}

// seconds converts whole seconds to a Duration, saturating.
func seconds(s int64) time.Duration {
	if s > math.MaxInt64/int64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(s) * time.Second
}
