package trace

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestReadLog(t *testing.T) {
	t0 := time.Date(2024, 3, 5, 14, 7, 9, 0, time.UTC).UnixMicro()
	tests := []struct {
		name    string
		format  Format
		in      string
		want    []Record
		skipped int
	}{
		{
			name:   "common",
			format: FormatAuto,
			in:     `203.0.113.9 - frank [05/Mar/2024:15:07:09 +0100] "GET /a/b?x=1 HTTP/1.1" 200 2326` + "\n",
			want:   []Record{{Time: t0, Source: "203.0.113.9", Method: "GET", Path: "/a/b", Status: 200}},
		},
		{
			name:   "combined, with an escaped quote and a CRLF",
			format: FormatCLF,
			in:     `2001:db8::1 - - [05/Mar/2024:14:07:09 +0000] "POST /login HTTP/2.0" 401 - "https://x.example/" "curl \"8\""` + "\r\n",
			want: []Record{{Time: t0, Source: "2001:db8::1", Method: "POST", Path: "/login", Status: 401,
				Headers: map[string]string{"Referer": "https://x.example/", "User-Agent": `curl \"8\"`}}},
		},
		{
			name:   "absolute-form target",
			format: FormatCLF,
			in:     `198.51.100.2 - - [05/Mar/2024:14:07:09 +0000] "GET http://example.com/p?q HTTP/1.0" 304 0` + "\n",
			want:   []Record{{Time: t0, Source: "198.51.100.2", Method: "GET", Path: "/p", Status: 304}},
		},
		{
			name:   "common, unescaped quote in the request (old Apache)",
			format: FormatAuto,
			in:     `ppp.example.com - - [05/Mar/2024:14:07:09 +0000] "GET /a.gifalt=" HTTP/1.0" 404 -` + "\n",
			want:   []Record{{Time: t0, Source: "ppp.example.com", Method: "GET", Path: `/a.gifalt="`, Status: 404}},
		},
		{
			name:   "common, two unescaped quotes and a quote-space in the request",
			format: FormatCLF,
			in:     `192.0.2.1 - - [05/Mar/2024:14:07:09 +0000] "GET /q?x=" "y" HTTP/1.0" 200 1839` + "\n",
			want:   []Record{{Time: t0, Source: "192.0.2.1", Method: "GET", Path: "/q", Status: 200}},
		},
		{
			name:   "combined, unescaped quote in the request",
			format: FormatCLF,
			in:     `192.0.2.1 - - [05/Mar/2024:14:07:09 +0000] "GET /a"b HTTP/1.1" 301 0 "http://r.example/" "ua 1"` + "\n",
			want: []Record{{Time: t0, Source: "192.0.2.1", Method: "GET", Path: `/a"b`, Status: 301,
				Headers: map[string]string{"Referer": "http://r.example/", "User-Agent": "ua 1"}}},
		},
		{
			name:   "request that is only a quote",
			format: FormatCLF,
			in:     `192.0.2.1 - - [05/Mar/2024:14:07:09 +0000] """ 400 -` + "\n",
			want:   []Record{{Time: t0, Source: "192.0.2.1", Status: 400}},
		},
		{
			name:   "extra fields after the Combined ones",
			format: FormatCLF,
			in:     `192.0.2.1 - - [05/Mar/2024:14:07:09 +0000] "GET / HTTP/1.1" 200 5 "-" "ua" 0.003` + "\n",
			want: []Record{{Time: t0, Source: "192.0.2.1", Method: "GET", Path: "/", Status: 200,
				Headers: map[string]string{"Referer": "-", "User-Agent": "ua"}}},
		},
		{
			name:   "no status and size after any quote",
			format: FormatCLF,
			in: `192.0.2.1 - - [05/Mar/2024:14:07:09 +0000] "GET /a" HTTP/1.0" 404` + "\n" +
				`192.0.2.1 - - [05/Mar/2024:14:07:09 +0000] "GET / HTTP/1.0" 2000 1` + "\n" +
				`192.0.2.1 - - [05/Mar/2024:14:07:09 +0000] "GET / HTTP/1.0" 200 1x` + "\n" +
				`192.0.2.1 - - [05/Mar/2024:14:07:09 +0000] "GET / HTTP/1.0 200 1` + "\n",
			skipped: 4,
		},
		{
			name:    "malformed lines are skipped",
			format:  FormatCLF,
			in:      "garbage\n198.51.100.2 - - [not a time] \"GET / HTTP/1.0\" 200 1\n\n198.51.100.2 - - [05/Mar/2024:14:07:09 +0000] \"GET / HTTP/1.0\" 200 1\n",
			want:    []Record{{Time: t0, Source: "198.51.100.2", Method: "GET", Path: "/", Status: 200}},
			skipped: 2,
		},
		{
			name:   "json, flat, Unix seconds with a fraction",
			format: FormatAuto,
			in:     `{"time": 1709647629.25, "remote_addr": "192.0.2.7:53122", "method": "GET", "path": "/x?y", "status": 200, "host": "API.example", "headers": {"x-api-key": "k1"}}` + "\n",
			want: []Record{{Time: t0 + 250_000, Source: "192.0.2.7", Method: "GET", Path: "/x", Status: 200, Host: "API.example",
				Headers: map[string]string{"X-Api-Key": "k1"}}},
		},
		{
			name:   "json, nested like Caddy, RFC 3339 time",
			format: FormatJSON,
			in:     `{"ts": "2024-03-05T14:07:09Z", "request": {"remote_ip": "2001:db8::2", "method": "PUT", "uri": "/v1/k", "host": "h", "headers": {"User-Agent": ["ua"]}}, "status": 201}` + "\n",
			want: []Record{{Time: t0, Source: "2001:db8::2", Method: "PUT", Path: "/v1/k", Status: 201, Host: "h",
				Headers: map[string]string{"User-Agent": "ua"}}},
		},
		{
			name:    "json without a time is skipped",
			format:  FormatJSON,
			in:      `{"remote_addr": "192.0.2.7"}` + "\n",
			skipped: 1,
		},
		{
			name:   "nasa tsv",
			format: FormatAuto,
			in:     "host\tlogname\ttime\tmethod\turl\tresponse\tbytes\treferer\tuseragent\nppp.example.com\t-\t1709647629\tGET\t/images/x.gif\t200\t1713\n",
			want:   []Record{{Time: t0, Source: "ppp.example.com", Method: "GET", Path: "/images/x.gif", Status: 200}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Record
			st, err := ReadLog(strings.NewReader(tt.in), tt.format, func(r Record) { got = append(got, r) })
			if err != nil {
				t.Fatalf("ReadLog: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v,\nwant %+v", got, tt.want)
			}
			if st.Skipped != tt.skipped || st.Records != len(tt.want) {
				t.Errorf("stats %+v, want %d records and %d skipped", st, len(tt.want), tt.skipped)
			}
			if tt.skipped > 0 && st.FirstError == nil {
				t.Errorf("skipped lines but no FirstError")
			}
		})
	}
}

func TestReadLogErrors(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		want     string
	}{
		{"nasa header without time", "host\tlogname\tmethod\nx\t-\tGET\n", "must name host and time"},
		{"line over 1 MiB", strings.Repeat("x", 2<<20) + "\n", "token too long"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadLog(strings.NewReader(tt.in), FormatAuto, func(Record) {})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// FuzzReadLog feeds arbitrary bytes to every format: no panic, and every
// record passed on names a source.
func FuzzReadLog(f *testing.F) {
	f.Add(`203.0.113.9 - - [05/Mar/2024:15:07:09 +0100] "GET / HTTP/1.1" 200 2 "r" "u"`)
	f.Add(`{"ts": 1.5, "request": {"remote_ip": "[::1]:8", "headers": {"A": ["b"]}}}`)
	f.Add("host\tlogname\ttime\nh\t-\t807256800\n")
	f.Add(`x - - [05/Mar/2024:15:07:09 +0100] "\" 200 2`)
	f.Add(`x - - [05/Mar/2024:15:07:09 +0100] "GET /a.gifalt=" HTTP/1.0" 404 -`)
	f.Add(`x - - [05/Mar/2024:15:07:09 +0100] "GET /a" 1 "b" HTTP/1.0" 200 9 "r" "u"`)
	f.Fuzz(func(t *testing.T, in string) {
		for _, format := range []Format{FormatAuto, FormatCLF, FormatJSON, FormatNASA} {
			_, _ = ReadLog(strings.NewReader(in), format, func(r Record) {
				if r.Source == "" {
					t.Errorf("format %v: a record without a source from %q", format, in)
				}
				if format == FormatCLF && (r.Status < 0 || r.Status > 999) {
					t.Errorf("clf: status %d from %q, want three digits", r.Status, in)
				}
			})
		}
	})
}
