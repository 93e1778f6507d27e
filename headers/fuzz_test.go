package headers_test

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/edgerate/edge/headers"
)

// FuzzPolicy checks that whatever a Policy holds, AppendPolicy writes one
// valid RFC 9651 List item that httpsfv reads back as the clamped input.
func FuzzPolicy(f *testing.F) {
	for _, tt := range policyTests {
		f.Add(tt.p.Name, tt.p.Quota, int64(tt.p.Window))
	}
	f.Add("", int64(math.MinInt64), int64(math.MinInt64))
	f.Add("\x00\"\\\x7f\x80\xff☃", int64(math.MaxInt64), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, name string, quota, window int64) {
		p := headers.Policy{Name: name, Quota: quota, Window: time.Duration(window)}
		out := string(headers.AppendPolicy([]byte("prefix"), p))
		v, ok := strings.CutPrefix(out, "prefix")
		if !ok {
			t.Fatalf("AppendPolicy overwrote its buffer: %q", out)
		}
		want := headers.Policy{Name: wantName(name), Quota: wantCount(quota)}
		wantParams := []string{"q"}
		if window > 0 {
			want.Window = time.Duration(wantSeconds(p.Window)) * time.Second
			wantParams = append(wantParams, "w")
		}

		// Twice, to check the ", " separator too.
		l, err := httpsfv.UnmarshalList([]string{v + ", " + v})
		if err != nil || len(l) != 2 {
			t.Fatalf("httpsfv.UnmarshalList(%s, %s) = %v, %v, want 2 items", v, v, l, err)
		}
		it, ok := l[0].(httpsfv.Item)
		if !ok {
			t.Fatalf("%s: member is %T, want an item", v, l[0])
		}
		if got, ok := it.Value.(string); !ok || got != want.Name {
			t.Errorf("%s: name = %#v, want string %q", v, it.Value, want.Name)
		}
		if got := it.Params.Names(); !slices.Equal(got, wantParams) {
			t.Errorf("%s: parameters %q, want %q", v, got, wantParams)
		}
		if got, _ := it.Params.Get("q"); got != want.Quota {
			t.Errorf("%s: q = %#v, want %d", v, got, want.Quota)
		}
		if window > 0 {
			if got, _ := it.Params.Get("w"); got != wantSeconds(p.Window) {
				t.Errorf("%s: w = %#v, want %d", v, got, wantSeconds(p.Window))
			}
		}

		ps, err := refPolicies(v)
		if err != nil || len(ps) != 1 || ps[0] != want {
			t.Errorf("httpsfv reads %s as %+v, %v, want [%+v]", v, ps, err, want)
		}
	})
}

// FuzzLimit is FuzzPolicy for AppendLimit.
func FuzzLimit(f *testing.F) {
	for _, tt := range limitTests {
		f.Add(tt.l.Name, tt.l.Remaining, int64(tt.l.Reset))
	}
	f.Add("", int64(math.MinInt64), int64(math.MinInt64))
	f.Add("\x00\"\\\x7f\x80\xff☃", int64(math.MaxInt64), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, name string, remaining, reset int64) {
		l := headers.Limit{Name: name, Remaining: remaining, Reset: time.Duration(reset)}
		out := string(headers.AppendLimit([]byte("prefix"), l))
		v, ok := strings.CutPrefix(out, "prefix")
		if !ok {
			t.Fatalf("AppendLimit overwrote its buffer: %q", out)
		}
		named := headers.AppendLimitNamed([]byte("prefix"), string(headers.AppendName(nil, name)), remaining, l.Reset)
		if string(named) != out {
			t.Fatalf("AppendLimitNamed wrote %q, AppendLimit %q", named, out)
		}
		want := headers.Limit{
			Name:      wantName(name),
			Remaining: wantCount(remaining),
			Reset:     time.Duration(wantSeconds(l.Reset)) * time.Second,
		}

		list, err := httpsfv.UnmarshalList([]string{v + ", " + v})
		if err != nil || len(list) != 2 {
			t.Fatalf("httpsfv.UnmarshalList(%s, %s) = %v, %v, want 2 items", v, v, list, err)
		}
		it, ok := list[0].(httpsfv.Item)
		if !ok {
			t.Fatalf("%s: member is %T, want an item", v, list[0])
		}
		if got, ok := it.Value.(string); !ok || got != want.Name {
			t.Errorf("%s: name = %#v, want string %q", v, it.Value, want.Name)
		}
		if got, want := it.Params.Names(), []string{"r", "t"}; !slices.Equal(got, want) {
			t.Errorf("%s: parameters %q, want %q", v, got, want)
		}
		if got, _ := it.Params.Get("r"); got != want.Remaining {
			t.Errorf("%s: r = %#v, want %d", v, got, want.Remaining)
		}
		if got, _ := it.Params.Get("t"); got != wantSeconds(l.Reset) {
			t.Errorf("%s: t = %#v, want %d", v, got, wantSeconds(l.Reset))
		}

		ls, err := refLimits(v)
		if err != nil || len(ls) != 1 || ls[0] != want {
			t.Errorf("httpsfv reads %s as %+v, %v, want [%+v]", v, ls, err, want)
		}
	})
}

// wantName is the name as AppendPolicy documents it: each character outside
// printable ASCII, or invalid byte, replaced by '?'. strings.Map visits an
// invalid byte as its own utf8.RuneError.
func wantName(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}

func wantCount(n int64) int64 {
	switch {
	case n < 0:
		return 0
	case n > 999_999_999_999_999:
		return 999_999_999_999_999
	}
	return n
}

// wantSeconds rounds d up to whole seconds, within [0, 2^31-1], by another
// route than the package: for d > 0, ceil(d/s) = (d-1)/s + 1.
func wantSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return min(int64((d-1)/time.Second)+1, 1<<31-1)
}

// FuzzRoundTrip reads arbitrary RateLimit-Policy and RateLimit values with
// httpsfv as a client would and checks that what it accepts, written again
// by AppendPolicies and AppendLimits, is a List httpsfv reads as the same
// values (windows and resets capped at MaxSeconds).
func FuzzRoundTrip(f *testing.F) {
	for _, v := range []string{
		`"burst";q=100;w=60, "daily";q=1000;w=86400`,
		`"default";r=50;t=30`,
		`"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`,
		`"a";q=1;acme-x=1.5;acme-y=?0;acme-z=@1700000000;acme-d=%"caf%c3%a9";acme-t=tok/en:x;acme-flag`,
		`tok;r=1;t=2, "b\"c";r=3`,
		`("a" "b";x=1);y=2, "c";q=1`,
		`"a";q=999999999999999;w=999999999999999`,
	} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if ps, err := refPolicies(v); err == nil && len(ps) > 0 {
			out := string(headers.AppendPolicies(nil, ps...))
			for i := range ps {
				ps[i].Window = min(ps[i].Window, headers.MaxSeconds*time.Second)
			}
			if again, err := refPolicies(out); err != nil || !slices.Equal(again, ps) {
				t.Fatalf("%q written as %s, read back as %+v, %v, want %+v", v, out, again, err, ps)
			}
		}
		if ls, err := refLimits(v); err == nil && len(ls) > 0 {
			out := string(headers.AppendLimits(nil, ls...))
			for i := range ls {
				ls[i].Reset = min(ls[i].Reset, headers.MaxSeconds*time.Second)
			}
			if again, err := refLimits(out); err != nil || !slices.Equal(again, ls) {
				t.Fatalf("%q written as %s, read back as %+v, %v, want %+v", v, out, again, err, ls)
			}
		}
	})
}
