package headers_test

import (
	"math"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/edgerate/edge/headers"
)

const maxDuration = time.Duration(math.MaxInt64)

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		want string
	}{
		{"zero", 0, "1"},
		{"negative", -5 * time.Second, "1"},
		{"most negative", math.MinInt64, "1"},
		{"1ns", time.Nanosecond, "1"},
		{"999ms", 999 * time.Millisecond, "1"},
		{"1s", time.Second, "1"},
		{"1.001s", 1001 * time.Millisecond, "2"},
		{"1s+1ns", time.Second + 1, "2"},
		{"59.5s", 59500 * time.Millisecond, "60"},
		{"60s", time.Minute, "60"},
		{"one day", 24 * time.Hour, "86400"},
		{"MaxSeconds", headers.MaxSeconds * time.Second, "2147483647"},
		{"MaxSeconds+1ns", headers.MaxSeconds*time.Second + 1, "2147483647"},
		{"100 years", 100 * 365 * 24 * time.Hour, "2147483647"},
		{"largest duration", maxDuration, "2147483647"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(headers.AppendRetryAfter(nil, tt.d)); got != tt.want {
				t.Errorf("AppendRetryAfter(%v) = %q, want %q", tt.d, got, tt.want)
			}
			if got := headers.RetryAfterSeconds(tt.d); strconv.FormatInt(got, 10) != tt.want {
				t.Errorf("RetryAfterSeconds(%v) = %d, want %s", tt.d, got, tt.want)
			}
			h := http.Header{"Retry-After": {"old", "older"}}
			headers.SetRetryAfter(h, tt.d)
			if got := h.Values("Retry-After"); !slices.Equal(got, []string{tt.want}) {
				t.Errorf("SetRetryAfter(%v): Retry-After = %q, want [%q]", tt.d, got, tt.want)
			}
		})
	}
}

func TestAppendRetryAfterAppends(t *testing.T) {
	got := string(headers.AppendRetryAfter([]byte("Retry-After: "), 1500*time.Millisecond))
	if want := "Retry-After: 2"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestSetXRateLimit(t *testing.T) {
	tests := []struct {
		name                   string
		limit, remaining       int64
		reset                  time.Duration
		wantL, wantRem, wantRe string
	}{
		{"typical", 100, 42, 17 * time.Second, "100", "42", "17"},
		{"reset rounds up", 100, 0, 16*time.Second + time.Millisecond, "100", "0", "17"},
		{"sub-second reset", 10, 9, time.Nanosecond, "10", "9", "1"},
		{"zero reset", 10, 10, 0, "10", "10", "0"},
		{"negative reset", 10, 10, -time.Hour, "10", "10", "0"},
		{"negative remaining", 10, -3, time.Second, "10", "0", "1"},
		{"negative limit", -1, 0, time.Second, "0", "0", "1"},
		{"zero limit", 0, 0, time.Minute, "0", "0", "60"},
		{"huge counts", math.MaxInt64, math.MaxInt64, maxDuration, "999999999999999", "999999999999999", "2147483647"},
		{"most negative", math.MinInt64, math.MinInt64, math.MinInt64, "0", "0", "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"X-Ratelimit-Limit": {"stale"}}
			headers.SetXRateLimit(h, tt.limit, tt.remaining, tt.reset)
			for _, f := range []struct{ key, want string }{
				{"X-RateLimit-Limit", tt.wantL},
				{"X-RateLimit-Remaining", tt.wantRem},
				{"X-RateLimit-Reset", tt.wantRe},
			} {
				if got := h.Values(f.key); !slices.Equal(got, []string{f.want}) {
					t.Errorf("%s = %q, want [%q]", f.key, got, f.want)
				}
			}
			if len(h) != 3 {
				t.Errorf("header has %d keys, want 3: %v", len(h), h)
			}
		})
	}
}

// The three values share one backing array; adding a value to one field
// must not change another.
func TestSetXRateLimitValuesIndependent(t *testing.T) {
	h := http.Header{}
	headers.SetXRateLimit(h, 1, 2, 3*time.Second)
	h.Add("X-RateLimit-Limit", "extra")
	h.Add("X-RateLimit-Remaining", "extra")
	if got, want := h.Values("X-RateLimit-Remaining"), []string{"2", "extra"}; !slices.Equal(got, want) {
		t.Errorf("X-RateLimit-Remaining = %q, want %q", got, want)
	}
	if got, want := h.Values("X-RateLimit-Reset"), []string{"3"}; !slices.Equal(got, want) {
		t.Errorf("X-RateLimit-Reset = %q, want %q", got, want)
	}
}

// The Set functions assign to the map directly, which is only correct with
// canonical keys.
func TestFieldNamesAreCanonical(t *testing.T) {
	for _, k := range []string{
		headers.FieldRetryAfter, headers.FieldRateLimit, headers.FieldRateLimitPolicy,
		headers.FieldXRateLimitLimit, headers.FieldXRateLimitRemaining, headers.FieldXRateLimitReset,
	} {
		if c := textproto.CanonicalMIMEHeaderKey(k); c != k {
			t.Errorf("field name %q is not canonical, want %q", k, c)
		}
	}
}

// An origin's field, stored by net/http under the canonical key, must be
// replaced, not duplicated.
func TestSetReplacesOriginField(t *testing.T) {
	h := http.Header{}
	h.Set("RateLimit", `"origin";r=1;t=1`)
	h.Set("RateLimit-Policy", `"origin";q=1`)
	headers.SetLimits(h, headers.Limit{Name: "edge", Remaining: 5, Reset: time.Second})
	headers.SetPolicies(h, headers.Policy{Name: "edge", Quota: 10, Window: time.Second})
	if got, want := h.Values("RateLimit"), []string{`"edge";r=5;t=1`}; !slices.Equal(got, want) {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	if got, want := h.Values("RateLimit-Policy"), []string{`"edge";q=10;w=1`}; !slices.Equal(got, want) {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	if len(h) != 2 {
		t.Errorf("header has %d keys, want 2: %v", len(h), h)
	}
}

var policyTests = []struct {
	name string
	p    headers.Policy
	want string
	// wantParsed is what the output parses back to: the clamped input.
	wantParsed headers.Policy
}{
	{
		name:       "concurrent requests",
		p:          headers.Policy{Name: "parallel", Quota: 2, Unit: "concurrent-requests"},
		want:       `"parallel";q=2;qu="concurrent-requests"`,
		wantParsed: headers.Policy{Name: "parallel", Quota: 2, Unit: "concurrent-requests"},
	},
	{
		name:       "burst",
		p:          headers.Policy{Name: "burst", Quota: 100, Window: time.Minute},
		want:       `"burst";q=100;w=60`,
		wantParsed: headers.Policy{Name: "burst", Quota: 100, Window: time.Minute},
	},
	{
		name:       "daily",
		p:          headers.Policy{Name: "daily", Quota: 1000, Window: 24 * time.Hour},
		want:       `"daily";q=1000;w=86400`,
		wantParsed: headers.Policy{Name: "daily", Quota: 1000, Window: 24 * time.Hour},
	},
	{
		name:       "zero value",
		p:          headers.Policy{},
		want:       `"";q=0`,
		wantParsed: headers.Policy{},
	},
	{
		name:       "window rounds up",
		p:          headers.Policy{Name: "w", Quota: 1, Window: 1500 * time.Millisecond},
		want:       `"w";q=1;w=2`,
		wantParsed: headers.Policy{Name: "w", Quota: 1, Window: 2 * time.Second},
	},
	{
		name:       "sub-second window",
		p:          headers.Policy{Name: "w", Quota: 1, Window: time.Nanosecond},
		want:       `"w";q=1;w=1`,
		wantParsed: headers.Policy{Name: "w", Quota: 1, Window: time.Second},
	},
	{
		name:       "negative window omitted",
		p:          headers.Policy{Name: "w", Quota: 1, Window: -time.Second},
		want:       `"w";q=1`,
		wantParsed: headers.Policy{Name: "w", Quota: 1},
	},
	{
		name:       "huge window capped",
		p:          headers.Policy{Name: "w", Quota: 1, Window: maxDuration},
		want:       `"w";q=1;w=2147483647`,
		wantParsed: headers.Policy{Name: "w", Quota: 1, Window: headers.MaxSeconds * time.Second},
	},
	{
		name:       "negative quota",
		p:          headers.Policy{Name: "q", Quota: -1, Window: time.Second},
		want:       `"q";q=0;w=1`,
		wantParsed: headers.Policy{Name: "q", Quota: 0, Window: time.Second},
	},
	{
		name:       "largest integer",
		p:          headers.Policy{Name: "q", Quota: headers.MaxInteger, Window: time.Second},
		want:       `"q";q=999999999999999;w=1`,
		wantParsed: headers.Policy{Name: "q", Quota: headers.MaxInteger, Window: time.Second},
	},
	{
		name:       "quota clamped to 15 digits",
		p:          headers.Policy{Name: "q", Quota: math.MaxInt64, Window: time.Second},
		want:       `"q";q=999999999999999;w=1`,
		wantParsed: headers.Policy{Name: "q", Quota: headers.MaxInteger, Window: time.Second},
	},
	{
		name:       "quote and backslash escaped",
		p:          headers.Policy{Name: `a"b\c`, Quota: 1, Window: time.Second},
		want:       `"a\"b\\c";q=1;w=1`,
		wantParsed: headers.Policy{Name: `a"b\c`, Quota: 1, Window: time.Second},
	},
	{
		name:       "printable ASCII kept",
		p:          headers.Policy{Name: " ~!#$%&'()*+,-./:;<=>?@[]^_`{|}", Quota: 1, Window: time.Second},
		want:       `" ~!#$%&'()*+,-./:;<=>?@[]^_` + "`" + `{|}";q=1;w=1`,
		wantParsed: headers.Policy{Name: " ~!#$%&'()*+,-./:;<=>?@[]^_`{|}", Quota: 1, Window: time.Second},
	},
	{
		name:       "controls replaced",
		p:          headers.Policy{Name: "a\tb\r\nc\x00d\x7f", Quota: 1, Window: time.Second},
		want:       `"a?b??c?d?";q=1;w=1`,
		wantParsed: headers.Policy{Name: "a?b??c?d?", Quota: 1, Window: time.Second},
	},
	{
		name:       "one ? per UTF-8 character",
		p:          headers.Policy{Name: "café 日本 🚦", Quota: 1, Window: time.Second},
		want:       `"caf? ?? ?";q=1;w=1`,
		wantParsed: headers.Policy{Name: "caf? ?? ?", Quota: 1, Window: time.Second},
	},
	{
		name:       "one ? per invalid byte",
		p:          headers.Policy{Name: "a\xff\xfeb\xe6\x97", Quota: 1, Window: time.Second},
		want:       `"a??b??";q=1;w=1`,
		wantParsed: headers.Policy{Name: "a??b??", Quota: 1, Window: time.Second},
	},
}

func TestAppendPolicy(t *testing.T) {
	for _, tt := range policyTests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(headers.AppendPolicy(nil, tt.p))
			if got != tt.want {
				t.Fatalf("AppendPolicy(%+v) = %s, want %s", tt.p, got, tt.want)
			}
			if err := checkSF(got); err != nil {
				t.Errorf("AppendPolicy(%+v) = %s: %v", tt.p, got, err)
			}
			ref, err := refPolicies(got)
			if err != nil || len(ref) != 1 || ref[0] != tt.wantParsed {
				t.Errorf("httpsfv parses %s as %+v, %v, want [%+v]", got, ref, err, tt.wantParsed)
			}
		})
	}
}

var limitTests = []struct {
	name       string
	l          headers.Limit
	want       string
	wantParsed headers.Limit
}{
	{
		name:       "typical",
		l:          headers.Limit{Name: "default", Remaining: 50, Reset: 30 * time.Second},
		want:       `"default";r=50;t=30`,
		wantParsed: headers.Limit{Name: "default", Remaining: 50, Reset: 30 * time.Second},
	},
	{
		name:       "zero value",
		l:          headers.Limit{},
		want:       `"";r=0;t=0`,
		wantParsed: headers.Limit{},
	},
	{
		name:       "reset rounds up",
		l:          headers.Limit{Name: "x", Remaining: 1, Reset: 4*time.Second + time.Nanosecond},
		want:       `"x";r=1;t=5`,
		wantParsed: headers.Limit{Name: "x", Remaining: 1, Reset: 5 * time.Second},
	},
	{
		name:       "negative reset is 0",
		l:          headers.Limit{Name: "x", Remaining: 1, Reset: -time.Minute},
		want:       `"x";r=1;t=0`,
		wantParsed: headers.Limit{Name: "x", Remaining: 1},
	},
	{
		name:       "negative remaining is 0",
		l:          headers.Limit{Name: "x", Remaining: -7, Reset: time.Second},
		want:       `"x";r=0;t=1`,
		wantParsed: headers.Limit{Name: "x", Reset: time.Second},
	},
	{
		name:       "huge values clamped",
		l:          headers.Limit{Name: "x", Remaining: math.MaxInt64, Reset: maxDuration},
		want:       `"x";r=999999999999999;t=2147483647`,
		wantParsed: headers.Limit{Name: "x", Remaining: headers.MaxInteger, Reset: headers.MaxSeconds * time.Second},
	},
	{
		name:       "most negative",
		l:          headers.Limit{Name: "x", Remaining: math.MinInt64, Reset: math.MinInt64},
		want:       `"x";r=0;t=0`,
		wantParsed: headers.Limit{Name: "x"},
	},
	{
		name:       "escapes and replacements",
		l:          headers.Limit{Name: "\"per\\user\"\n€", Remaining: 3, Reset: time.Second},
		want:       `"\"per\\user\"??";r=3;t=1`,
		wantParsed: headers.Limit{Name: "\"per\\user\"??", Remaining: 3, Reset: time.Second},
	},
}

func TestAppendLimit(t *testing.T) {
	for _, tt := range limitTests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(headers.AppendLimit(nil, tt.l))
			if got != tt.want {
				t.Fatalf("AppendLimit(%+v) = %s, want %s", tt.l, got, tt.want)
			}
			if err := checkSF(got); err != nil {
				t.Errorf("AppendLimit(%+v) = %s: %v", tt.l, got, err)
			}
			ref, err := refLimits(got)
			if err != nil || len(ref) != 1 || ref[0] != tt.wantParsed {
				t.Errorf("httpsfv parses %s as %+v, %v, want [%+v]", got, ref, err, tt.wantParsed)
			}
		})
	}
}

func TestSetPolicies(t *testing.T) {
	tests := []struct {
		name string
		ps   []headers.Policy
		want []string // nil: field absent
	}{
		{"none deletes the field", nil, nil},
		{"one", []headers.Policy{{Name: "burst", Quota: 100, Window: time.Minute}}, []string{`"burst";q=100;w=60`}},
		{
			"draft example",
			[]headers.Policy{{Name: "burst", Quota: 100, Window: time.Minute}, {Name: "daily", Quota: 1000, Window: 24 * time.Hour}},
			[]string{`"burst";q=100;w=60, "daily";q=1000;w=86400`},
		},
		{
			"longer than the stack buffer",
			slices.Repeat([]headers.Policy{{Name: strings.Repeat("n", 100), Quota: 1, Window: time.Second}}, 5),
			[]string{strings.Repeat(`"`+strings.Repeat("n", 100)+`";q=1;w=1, `, 4) + `"` + strings.Repeat("n", 100) + `";q=1;w=1`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{headers.FieldRateLimitPolicy: {"stale"}}
			headers.SetPolicies(h, tt.ps...)
			got, ok := h[headers.FieldRateLimitPolicy]
			if !slices.Equal(got, tt.want) || ok != (tt.want != nil) {
				t.Fatalf("RateLimit-Policy = %q (present %t), want %q", got, ok, tt.want)
			}
			if tt.want == nil {
				return
			}
			ref, err := refPolicies(got[0])
			if err != nil || !slices.Equal(ref, tt.ps) {
				t.Errorf("httpsfv parses %s as %+v, %v, want %+v", got[0], ref, err, tt.ps)
			}
		})
	}
}

func TestSetLimits(t *testing.T) {
	tests := []struct {
		name string
		ls   []headers.Limit
		want []string
	}{
		{"none deletes the field", nil, nil},
		{"throttled", []headers.Limit{{Name: "default", Remaining: 0, Reset: 5 * time.Second}}, []string{`"default";r=0;t=5`}},
		{
			"two windows",
			[]headers.Limit{{Name: "hour", Remaining: 900, Reset: 10 * time.Minute}, {Name: "day", Remaining: 100, Reset: 10 * time.Hour}},
			[]string{`"hour";r=900;t=600, "day";r=100;t=36000`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{headers.FieldRateLimit: {"stale"}}
			headers.SetLimits(h, tt.ls...)
			got, ok := h[headers.FieldRateLimit]
			if !slices.Equal(got, tt.want) || ok != (tt.want != nil) {
				t.Fatalf("RateLimit = %q (present %t), want %q", got, ok, tt.want)
			}
			if tt.want == nil {
				return
			}
			ref, err := refLimits(got[0])
			if err != nil || !slices.Equal(ref, tt.ls) {
				t.Errorf("httpsfv parses %s as %+v, %v, want %+v", got[0], ref, err, tt.ls)
			}
		})
	}
}

func TestAppendDoesNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 512)
	ps := []headers.Policy{{Name: "burst", Quota: 100, Window: time.Minute}, {Name: "café", Quota: 1000, Window: 24 * time.Hour}}
	ls := []headers.Limit{{Name: "burst", Remaining: 99, Reset: 59 * time.Second}, {Name: `a"b`, Remaining: 999, Reset: time.Hour}}
	tests := []struct {
		name string
		f    func()
	}{
		{"AppendRetryAfter", func() { buf = headers.AppendRetryAfter(buf[:0], 90*time.Second) }},
		{"AppendPolicy", func() { buf = headers.AppendPolicy(buf[:0], ps[1]) }},
		{"AppendPolicies", func() { buf = headers.AppendPolicies(buf[:0], ps...) }},
		{"AppendLimit", func() { buf = headers.AppendLimit(buf[:0], ls[1]) }},
		{"AppendLimits", func() { buf = headers.AppendLimits(buf[:0], ls...) }},
	}
	for _, tt := range tests {
		if got := testing.AllocsPerRun(100, tt.f); got != 0 {
			t.Errorf("%s: %v allocs per run, want 0", tt.name, got)
		}
	}
}

// checkSF reports whether v parses as an RFC 9651 List with httpsfv.
func checkSF(v string) error {
	_, err := httpsfv.UnmarshalList([]string{v})
	return err
}
