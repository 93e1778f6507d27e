package accesslog

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CombinedRE is nginx's combined line, strictly: every field present, a
// quoted field holding only printable ASCII but for a quote or a backslash,
// which appear as nginx's \xHH escapes.
var CombinedRE = regexp.MustCompile(`^(\S+) - - \[(\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4})\] "((?:[ !#-\[\]-~]|\\x[0-9A-F]{2})*)" (\d{3}) (\d+) "((?:[ !#-\[\]-~]|\\x[0-9A-F]{2})*)" "((?:[ !#-\[\]-~]|\\x[0-9A-F]{2})*)"\n$`)

func sampleEntry() Entry {
	return Entry{
		Time:     time.Date(2026, 12, 2, 12, 30, 5, 123_456_789, time.UTC),
		Peer:     netip.MustParseAddr("10.0.0.1"),
		Client:   netip.MustParseAddr("2001:db8::7"),
		Host:     "api.example.com",
		Method:   "GET",
		Target:   "/v1/items?q=1",
		Proto:    "HTTP/1.1",
		Status:   429,
		Bytes:    57,
		Duration: 1500 * time.Microsecond,
		Domain:   "api",
		Origin:   "http://127.0.0.1:9000", OriginStatus: 200, OriginTook: 1200 * time.Microsecond, Attempts: 1,
		Referer:   "https://example.com/",
		UserAgent: "curl/8.5.0",
		Outcome:   "blocked",
		Queued:    250 * time.Millisecond,
		Rules: []Rule{
			{Name: "per-ip", Outcome: "limited", Limit: 10, Remaining: 0, Key: "2001:db8::/64", HasKey: true},
			{Name: "global", Outcome: "allowed", Limit: 1000, Remaining: 990},
		},
		RefusedBy: "per-ip",
		Sample:    10,
	}
}

// TestCombinedLine: nginx's combined line, field by field.
func TestCombinedLine(t *testing.T) {
	e := sampleEntry()
	got := string(AppendCombined(nil, &e))
	want := `2001:db8::7 - - [02/Dec/2026:12:30:05 +0000] "GET /v1/items?q=1 HTTP/1.1" 429 57 "https://example.com/" "curl/8.5.0"` + "\n"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if !CombinedRE.MatchString(got) {
		t.Errorf("%q does not match nginx's combined format", got)
	}
	e.Referer, e.UserAgent = "", ""
	e.Client = netip.Addr{}
	if got := string(AppendCombined(nil, &e)); !strings.HasPrefix(got, "- - - [") || !strings.HasSuffix(got, `57 "-" "-"`+"\n") {
		t.Errorf("empty fields: got %q, want - for each", got)
	}
}

// TestCombinedEscaping: nginx's escapes (ngx_http_log_escape).
func TestCombinedEscaping(t *testing.T) {
	tests := []struct{ in, want string }{
		{`plain`, `plain`},
		{`a"b`, `a\x22b`},
		{`a\b`, `a\x5Cb`},
		{"a\nb\r\t", `a\x0Ab\x0D\x09`},
		{"\x7f\xff\xc3\xa9", `\x7F\xFF\xC3\xA9`},
		{`x'y{}`, `x'y{}`},
	}
	for _, tt := range tests {
		if got := string(appendEscaped(nil, tt.in)); got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.in, got, tt.want)
		}
	}
}

// jsonLine is the JSON line's fields, as encoding/json reads them.
type jsonLine struct {
	Time         string  `json:"time"`
	Peer         string  `json:"peer"`
	Client       string  `json:"client"`
	Host         string  `json:"host"`
	Method       string  `json:"method"`
	Target       string  `json:"target"`
	Proto        string  `json:"proto"`
	Status       int     `json:"status"`
	Bytes        int64   `json:"bytes"`
	DurationMS   float64 `json:"duration_ms"`
	Domain       string  `json:"domain"`
	Origin       string  `json:"origin"`
	OriginStatus int     `json:"origin_status"`
	OriginMS     float64 `json:"origin_ms"`
	Attempts     int     `json:"attempts"`
	Referer      string  `json:"referer"`
	UserAgent    string  `json:"user_agent"`
	Outcome      string  `json:"outcome"`
	QueuedMS     float64 `json:"queued_ms"`
	Rules        []struct {
		Name      string `json:"name"`
		Outcome   string `json:"outcome"`
		Limit     int64  `json:"limit"`
		Remaining int64  `json:"remaining"`
		Key       string `json:"key"`
	} `json:"rules"`
	RefusedBy string `json:"refused_by"`
	Sample    int    `json:"sample"`
}

// TestJSONLine: every field, read back by encoding/json with unknown
// fields refused.
func TestJSONLine(t *testing.T) {
	e := sampleEntry()
	b := AppendJSON(nil, &e)
	if bytes.Count(b, []byte("\n")) != 1 || b[len(b)-1] != '\n' {
		t.Fatalf("not one line: %q", b)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var got jsonLine
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	var want jsonLine
	want.Time, want.Peer, want.Client = "2026-12-02T12:30:05.123Z", "10.0.0.1", "2001:db8::7"
	want.Host, want.Method, want.Target, want.Proto = "api.example.com", "GET", "/v1/items?q=1", "HTTP/1.1"
	want.Status, want.Bytes, want.DurationMS, want.Domain = 429, 57, 1.5, "api"
	want.Origin, want.OriginStatus, want.OriginMS, want.Attempts = "http://127.0.0.1:9000", 200, 1.2, 1
	want.Referer, want.UserAgent, want.Outcome, want.QueuedMS = "https://example.com/", "curl/8.5.0", "blocked", 250
	want.Rules = append(want.Rules, struct {
		Name      string `json:"name"`
		Outcome   string `json:"outcome"`
		Limit     int64  `json:"limit"`
		Remaining int64  `json:"remaining"`
		Key       string `json:"key"`
	}{"per-ip", "limited", 10, 0, "2001:db8::/64"}, struct {
		Name      string `json:"name"`
		Outcome   string `json:"outcome"`
		Limit     int64  `json:"limit"`
		Remaining int64  `json:"remaining"`
		Key       string `json:"key"`
	}{"global", "allowed", 1000, 990, ""})
	want.RefusedBy, want.Sample = "per-ip", 10
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if bytes.Contains(b, []byte(`"global","outcome":"allowed","limit":1000,"remaining":990,"key"`)) {
		t.Errorf("a rule without a recorded key has a key field: %s", b)
	}
	// Not forwarded, not queued, not sampled: those fields are left out.
	e.Attempts, e.Queued, e.Sample, e.RefusedBy = 0, 0, 1, ""
	b = AppendJSON(nil, &e)
	for _, f := range []string{`"origin"`, `"origin_status"`, `"origin_ms"`, `"attempts"`, `"queued_ms"`, `"sample"`, `"refused_by"`} {
		if bytes.Contains(b, []byte(f)) {
			t.Errorf("%s in %s", f, b)
		}
	}
}

func TestMillis(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0.000", time.Microsecond: "0.001", 1234567 * time.Nanosecond: "1.234", 3 * time.Second: "3000.000", -time.Second: "0.000"} {
		if got := string(appendMillis(nil, d)); got != want {
			t.Errorf("%v: got %s, want %s", d, got, want)
		}
	}
}

// unescapeCombined undoes nginx's \xHH escapes.
func unescapeCombined(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] == 'x' {
			v, _ := strconv.ParseUint(s[i+2:i+4], 16, 8)
			b.WriteByte(byte(v))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// FuzzLineEscaping: a target, user agent or referer with quotes, control
// bytes or invalid UTF-8 gives one well-formed line in either format,
// which reads back as what the client sent (JSON: as encoding/json
// writes the string).
func FuzzLineEscaping(f *testing.F) {
	f.Add("/a?b=\"c\"", "Mozilla/5.0 \"x\"", "http://r/\\")
	f.Add("/\x00\n\r\x7f", "\xff\xfe", "\u2028\u2029")
	f.Add("/%22", "", "-")
	f.Fuzz(func(t *testing.T, target, ua, referer string) {
		e := sampleEntry()
		e.Target, e.UserAgent, e.Referer = target, ua, referer
		c := AppendCombined(nil, &e)
		m := CombinedRE.FindSubmatch(c)
		if m == nil {
			t.Fatalf("combined line not nginx's format: %q", c)
		}
		if got, want := unescapeCombined(string(m[3])), "GET "+target+" HTTP/1.1"; got != want {
			t.Errorf("request: got %q, want %q", got, want)
		}
		dash := func(s string) string {
			if s == "" {
				return "-"
			}
			return s
		}
		if got := unescapeCombined(string(m[7])); got != dash(ua) {
			t.Errorf("user agent: got %q, want %q", got, dash(ua))
		}
		if got := unescapeCombined(string(m[6])); got != dash(referer) {
			t.Errorf("referer: got %q, want %q", got, dash(referer))
		}
		j := AppendJSON(nil, &e)
		if bytes.IndexByte(j, '\n') != len(j)-1 || !json.Valid(j) {
			t.Fatalf("json line not one valid line: %q", j)
		}
		var got jsonLine
		if err := json.Unmarshal(j, &got); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ got, sent string }{{got.Target, target}, {got.UserAgent, ua}, {got.Referer, referer}} {
			ref, _ := json.Marshal(c.sent)
			var want string
			_ = json.Unmarshal(ref, &want)
			if c.got != want {
				t.Errorf("json: got %q, want %q", c.got, want)
			}
		}
	})
}

// BenchmarkAppend: a refusal's line in each format, as the fast path
// renders it for every request with the access log on.
func BenchmarkAppend(b *testing.B) {
	e := sampleEntry()
	e.Rules = e.Rules[:1]
	e.Rules[0].HasKey = false
	e.Attempts = 0
	buf := make([]byte, 0, 1024)
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = AppendJSON(buf[:0], &e)
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("combined", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = AppendCombined(buf[:0], &e)
		}
		b.SetBytes(int64(len(buf)))
	})
}

// BenchmarkWriterWrite: a line into the writer's buffer.
func BenchmarkWriterWrite(b *testing.B) {
	w, err := Open(Options{Path: b.TempDir() + "/access.log", Buffer: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close(nil)
	e := sampleEntry()
	line := AppendJSON(nil, &e)
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		w.Write(line)
	}
}
