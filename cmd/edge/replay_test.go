package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// accessLog is a Combined Log Format log: 203.0.113.9 sends 4 requests in
// one second, 198.51.100.2 one, and 2001:db8::1 and 2001:db8::2 (the same
// /64) one each, plus one malformed line.
const accessLog = `203.0.113.9 - - [05/Mar/2024:14:07:09 +0000] "GET /v1/a HTTP/1.1" 200 1 "-" "ua"
203.0.113.9 - - [05/Mar/2024:14:07:09 +0000] "GET /v1/b HTTP/1.1" 200 1 "-" "ua"
198.51.100.2 - - [05/Mar/2024:14:07:09 +0000] "GET / HTTP/1.1" 200 1 "-" "ua"
not a log line
203.0.113.9 - - [05/Mar/2024:14:07:10 +0000] "POST /v1/c HTTP/1.1" 200 1 "-" "ua"
2001:db8::1 - - [05/Mar/2024:14:07:10 +0000] "GET /v1/x HTTP/1.1" 200 1 "-" "ua"
2001:db8::2 - - [05/Mar/2024:14:07:10 +0000] "GET /v1/y HTTP/1.1" 200 1 "-" "ua"
203.0.113.9 - - [05/Mar/2024:14:07:10 +0000] "GET /v1/d HTTP/1.1" 200 1 "-" "ua"
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func runEdge(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

type replayJSON struct {
	Reports []struct {
		Name     string `json:"name"`
		Sources  int    `json:"sources"`
		Requests int64  `json:"requests"`
		CountAll struct {
			ExactDenied  int64 `json:"exact_denied"`
			ApproxDenied int64 `json:"approx_denied"`
		} `json:"count_all"`
		CountAdmitted struct {
			AdmittedExact int64 `json:"admitted_exact"`
		} `json:"count_admitted"`
	} `json:"reports"`
	Suggestions []struct {
		Limit           int64 `json:"suggested_limit"`
		BlockedSources  int   `json:"blocked_sources"`
		BlockedRequests int64 `json:"blocked_requests"`
		Peaks           struct {
			Max int64 `json:"max"`
		} `json:"peaks"`
	} `json:"suggestions"`
}

func TestReplayLog(t *testing.T) {
	log := writeFile(t, "access.log", accessLog)
	code, out, errOut := runEdge("replay", "-limit", "2", "-period", "10s", "-json", log)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	if !strings.Contains(errOut, "skipped 1 malformed of 8 lines") {
		t.Errorf("stderr %q, want a note of the skipped line", errOut)
	}
	var got replayJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(got.Reports) != 1 {
		t.Fatalf("%d reports, want 1", len(got.Reports))
	}
	r := got.Reports[0]
	// Sources: 203.0.113.9 (4 requests, the last 2 over the limit of 2),
	// 198.51.100.2, and 2001:db8::/64 (2 requests).
	if r.Sources != 3 || r.Requests != 7 || r.CountAll.ExactDenied != 2 || r.CountAll.ApproxDenied != 2 || r.CountAdmitted.AdmittedExact != 5 {
		t.Errorf("got %+v, want 3 sources, 7 requests, 2 denied by each, 5 admitted", r)
	}

	code, table, _ := runEdge("replay", "-limit", "2", "-period", "10s", log)
	if code != 0 || !strings.Contains(table, "count-all (count_blocked: true") || !strings.Contains(table, "count-admitted") {
		t.Errorf("exit %d, table:\n%s", code, table)
	}
}

// apiConfig writes a configuration of one domain, api, with rules (YAML
// list items indented for the domain's rules key).
func apiConfig(t *testing.T, rules string) string {
	t.Helper()
	return writeFile(t, "edge.yaml", `
origin: "http://127.0.0.1:9"
domains:
  - name: api
    hosts: ["api.example"]
    rules:`+rules)
}

func TestReplayConfigRule(t *testing.T) {
	log := writeFile(t, "access.log", accessLog)
	cfg := apiConfig(t, `
      - name: reads
        match: {path_prefix: /v1/, methods: [GET]}
        limit: 2
        period: 10s
      - name: all
        limit: 100
        period: 1m
`)
	code, out, errOut := runEdge("replay", "-config", cfg, "-rule", "api/reads", "-json", log)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	var got replayJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	// GET under /v1/: 203.0.113.9 sends 3 (one over), the /64 sends 2.
	if len(got.Reports) != 1 || got.Reports[0].Name != "api/reads" || got.Reports[0].Requests != 5 || got.Reports[0].CountAll.ExactDenied != 1 {
		t.Errorf("got %+v, want api/reads with 5 requests, 1 denied", got.Reports)
	}

	code, out, _ = runEdge("replay", "-config", cfg, "-json", log)
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got.Reports) != 2 {
		t.Errorf("every rule: exit %d, %d reports, want 2", code, len(got.Reports))
	}
	if code, _, errOut := runEdge("replay", "-config", cfg, "-rule", "api/nope", log); code != 1 || !strings.Contains(errOut, `no rule "api/nope"`) {
		t.Errorf("unknown rule: exit %d, stderr %q", code, errOut)
	}
}

// TestReplayInvalidConfig: edge replay -config with a file that does not
// load names the file and lists its problems as edge -check does, and
// exits 1 before reading any log.
func TestReplayInvalidConfig(t *testing.T) {
	cfg := writeFile(t, "bad.yaml", "domains: [{hosts: [a], respond: {body: ok}, rules: [{name: r, limit: 0, period: 1s}]}]\n")
	code, out, errOut := runEdge("replay", "-config", cfg, filepath.Join(t.TempDir(), "missing.log"))
	want := "edge replay: invalid configuration " + cfg + ":\n  - domains[0] (a).rules[0] (r).limit: must be at least 1, got 0\n"
	if code != 1 || out != "" || errOut != want {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", code, out, errOut, want)
	}
}

func TestReplaySuggest(t *testing.T) {
	log := writeFile(t, "access.log", accessLog)
	code, out, errOut := runEdge("replay", "-suggest", "-period", "10s", "-percentile", "50", "-headroom", "0", "-json", log)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	var got replayJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	// Peaks per 10 s: 4, 1, 2; the median is 2, so the limit is 2 and it
	// blocks the 2 requests of 203.0.113.9 over it.
	if len(got.Suggestions) != 1 {
		t.Fatalf("%d suggestions, want 1", len(got.Suggestions))
	}
	s := got.Suggestions[0]
	if s.Peaks.Max != 4 || s.Limit != 2 || s.BlockedSources != 1 || s.BlockedRequests != 2 {
		t.Errorf("got %+v, want max peak 4, limit 2, 1 source and 2 requests blocked", s)
	}
	code, table, _ := runEdge("replay", "-suggest", log)
	if code != 0 || !strings.Contains(table, "suggested limit") {
		t.Errorf("exit %d, table:\n%s", code, table)
	}
}

// TestReplayCompare replays accessLog through every algorithm at 2 per
// 10s. 203.0.113.9 sends 2 requests at 14:07:09 and 2 at 14:07:10, a
// 10-second boundary: the fixed window admits all 4, the others 2. With
// buckets of 1, each source gets 1 request through, as 1 second refills
// only 0.2 of a unit, and the second source of the /64 is refused too.
func TestReplayCompare(t *testing.T) {
	log := writeFile(t, "access.log", accessLog)
	type row struct {
		Algorithm      string  `json:"algorithm"`
		Burst          int64   `json:"burst"`
		Admitted       int64   `json:"admitted"`
		Refused        int64   `json:"refused"`
		MostInPeriod   int64   `json:"most_in_period"`
		OverLimit      float64 `json:"most_in_period_over_limit"`
		MostInSecond   int64   `json:"most_in_second"`
		SourcesLimited int     `json:"sources_limited"`
	}
	tests := []struct {
		name  string
		flags []string
		want  []row
	}{
		{"burst of the limit", nil, []row{
			{"exact", 0, 5, 2, 2, 1, 2, 1},
			{"sliding_window", 0, 5, 2, 2, 1, 2, 1},
			{"fixed_window", 0, 7, 0, 4, 2, 2, 0},
			{"token_bucket", 2, 5, 2, 2, 1, 2, 1},
			{"leaky_bucket", 2, 5, 2, 2, 1, 2, 1},
		}},
		{"burst 1", []string{"-burst", "1"}, []row{
			{"exact", 0, 5, 2, 2, 1, 2, 1},
			{"sliding_window", 0, 5, 2, 2, 1, 2, 1},
			{"fixed_window", 0, 7, 0, 4, 2, 2, 0},
			{"token_bucket", 1, 3, 4, 1, 0.5, 1, 2},
			{"leaky_bucket", 1, 3, 4, 1, 0.5, 1, 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"replay", "-compare", "-limit", "2", "-period", "10s", "-json"}, tt.flags...)
			code, out, errOut := runEdge(append(args, log)...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %s", code, errOut)
			}
			var got struct {
				Comparisons []struct {
					Requests int64 `json:"requests"`
					Rows     []row `json:"rows"`
				} `json:"comparisons"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out)
			}
			if len(got.Comparisons) != 1 || got.Comparisons[0].Requests != 7 || len(got.Comparisons[0].Rows) != len(tt.want) {
				t.Fatalf("got %+v, want one comparison of 7 requests in %d rows", got.Comparisons, len(tt.want))
			}
			for i, w := range tt.want {
				if g := got.Comparisons[0].Rows[i]; g != w {
					t.Errorf("row %d: got %+v, want %+v", i, g, w)
				}
			}
		})
	}
	code, table, _ := runEdge("replay", "-compare", "-limit", "2", "-period", "10s", log)
	if code != 0 || !strings.Contains(table, "most in one period (×limit)") || !strings.Contains(table, "fixed_window") {
		t.Errorf("exit %d, table:\n%s", code, table)
	}
}

// TestReplayAlgorithmFlag replays accessLog through one algorithm given by
// flags, and through a configuration's token bucket rule, beside the exact
// log.
func TestReplayAlgorithmFlag(t *testing.T) {
	log := writeFile(t, "access.log", accessLog)
	cfg := apiConfig(t, `
      - name: bucket
        algorithm: token_bucket
        limit: 2
        period: 10s
        burst: 1
`)
	type report struct {
		Rule struct {
			Algorithm string `json:"algorithm"`
			Burst     int64  `json:"burst"`
		} `json:"rule"`
		CountAll struct {
			ExactDenied  int64 `json:"exact_denied"`
			ApproxDenied int64 `json:"approx_denied"`
		} `json:"count_all"`
	}
	tests := []struct {
		name                      string
		args                      []string
		algorithm                 string
		burst, exact, storeDenied int64
	}{
		{"fixed window", []string{"-algorithm", "fixed_window", "-limit", "2", "-period", "10s"}, "fixed_window", 0, 2, 0},
		{"token bucket", []string{"-algorithm", "token_bucket", "-burst", "1", "-limit", "2", "-period", "10s"}, "token_bucket", 1, 2, 4},
		{"leaky bucket of the limit", []string{"-algorithm", "leaky_bucket", "-limit", "2", "-period", "10s"}, "leaky_bucket", 2, 2, 2},
		{"configuration", []string{"-config", cfg}, "token_bucket", 1, 2, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"replay", "-json"}, tt.args...), log)
			code, out, errOut := runEdge(args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %s", code, errOut)
			}
			var got struct{ Reports []report }
			if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Reports) != 1 {
				t.Fatalf("got %v, %+v; want one report", err, got)
			}
			r := got.Reports[0]
			if r.Rule.Algorithm != tt.algorithm || r.Rule.Burst != tt.burst || r.CountAll.ExactDenied != tt.exact || r.CountAll.ApproxDenied != tt.storeDenied {
				t.Errorf("got %+v, want algorithm %s, burst %d, exact denied %d, store denied %d", r, tt.algorithm, tt.burst, tt.exact, tt.storeDenied)
			}
		})
	}
}

// TestReplaySyntheticIsDeterministic runs a synthetic scenario twice and
// requires the same bytes.
func TestReplaySyntheticIsDeterministic(t *testing.T) {
	args := []string{"replay", "-synthetic", "edge", "-json"}
	code, a, errOut := runEdge(args...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	_, b, _ := runEdge(args...)
	if a != b || !strings.Contains(a, `"overshoot_approx": 2`) {
		t.Errorf("two runs differ or miss the 2× overshoot:\n%s\n%s", a, b)
	}
}

func TestReplayBadFlags(t *testing.T) {
	log := writeFile(t, "access.log", accessLog)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"replay"}, "give log files"},
		{[]string{"replay", "-limit", "0", log}, "-limit: must be at least 1, got 0"},
		{[]string{"replay", "-period", "1500us", log}, "-period: must be a whole number of milliseconds"},
		{[]string{"replay", "-key", "cookie", log}, `-key: must be ip, path, host, ja4, header:NAME, cookie:NAME, query:NAME or jwt:CLAIM`},
		{[]string{"replay", "-synthetic", "nope"}, `unknown scenario "nope"`},
		{[]string{"replay", "-synthetic", "edge", "-limit", "5"}, "-limit: not with -synthetic"},
		{[]string{"replay", "-synthetic", "edge", "-scale", "huge"}, "scale: must be ci, medium or full"},
		{[]string{"replay", "-seed", "3", log}, "-seed: only with -synthetic"},
		{[]string{"replay", "-config", "x.yaml", "-limit", "5", log}, "-limit: not with -config"},
		{[]string{"replay", "-format", "xml", log}, "format: must be auto"},
		{[]string{"replay", "-percentile", "0", log}, "-percentile: must be in (0, 100]"},
		{[]string{"replay", "-algorithm", "quota", log}, `-algorithm: unknown algorithm "quota"; want sliding_window, fixed_window, token_bucket or leaky_bucket`},
		{[]string{"replay", "-burst", "5", log}, "-burst: applies only to -algorithm token_bucket or leaky_bucket, got sliding_window"},
		{[]string{"replay", "-algorithm", "fixed_window", "-burst", "5", log}, "-burst: applies only to -algorithm token_bucket or leaky_bucket, got fixed_window"},
		{[]string{"replay", "-algorithm", "token_bucket", "-burst", "-1", log}, "-burst: must be between 0 and 4294967295, got -1"},
		{[]string{"replay", "-compare", "-algorithm", "token_bucket", log}, "-algorithm: not with -compare"},
		{[]string{"replay", "-config", "x.yaml", "-algorithm", "token_bucket", log}, "-algorithm: not with -config"},
		{[]string{"replay", "-config", "x.yaml", "-burst", "3", log}, "-burst: not with -config"},
		{[]string{"replay", "-compare", "-suggest", log}, "-compare: not with -suggest"},
		{[]string{"replay", "-compare", "-plot", "d", log}, "-plot: not with -compare or -suggest"},
		{[]string{"replay", "-plot-sources", "a", log}, "-plot-sources: only with -plot"},
		{[]string{"replay", "-sample", "-1", log}, "-sample: must be at least 0, got -1"},
		{[]string{"replay", "-sample", "5", "-suggest", log}, "-sample: not with -compare or -suggest"},
		{[]string{"replay", "-precision", "exact", log}, `-precision: want standard or fine, got "exact"`},
		{[]string{"replay", "-precision", "fine", "-compare", log}, "-precision: not with -compare or -suggest"},
		{[]string{"replay", "-precision", "fine", "-algorithm", "fixed_window", log}, "-precision: applies only to the sliding window, got -algorithm fixed_window"},
	} {
		t.Run(strings.Join(tt.args[1:], " "), func(t *testing.T) {
			code, _, errOut := runEdge(tt.args...)
			if code != 2 || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, errOut, tt.want)
			}
		})
	}
	if code, _, errOut := runEdge("replay", filepath.Join(t.TempDir(), "missing.log")); code != 1 || !strings.Contains(errOut, "no such file") {
		t.Errorf("missing file: exit %d, stderr %q; want exit 1", code, errOut)
	}
}

// lockedBuffer is a bytes.Buffer safe for a writing goroutine and a
// reading test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestReplayPrecision: -precision fine replays every sliding-window input
// at both precisions, standard first, each report naming its precision in
// -json and the fine one labelled in the table; a configuration's rule of
// precision fine is replayed as such.
func TestReplayPrecision(t *testing.T) {
	type report struct {
		Name      string `json:"name"`
		Precision string `json:"precision"`
		CountAll  struct {
			Misjudged float64 `json:"misjudged_fraction"`
		} `json:"count_all"`
	}
	code, out, errOut := runEdge("replay", "-synthetic", "nearlimit", "-precision", "fine", "-json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	var got struct{ Reports []report }
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Reports) == 0 || len(got.Reports)%2 != 0 {
		t.Fatalf("got %v, %d reports; want pairs", err, len(got.Reports))
	}
	for i := 0; i < len(got.Reports); i += 2 {
		std, fine := got.Reports[i], got.Reports[i+1]
		if std.Name != fine.Name || std.Precision != "standard" || fine.Precision != "fine" {
			t.Fatalf("reports %d and %d: %+v, %+v; want one input at standard then fine", i, i+1, std, fine)
		}
		if std.CountAll.Misjudged == 0 || fine.CountAll.Misjudged >= std.CountAll.Misjudged/10 {
			t.Errorf("%s: misjudged %g standard, %g fine; want fine under a tenth of standard", std.Name, std.CountAll.Misjudged, fine.CountAll.Misjudged)
		}
	}
	code, out, errOut = runEdge("replay", "-precision", "fine", "-limit", "2", "-period", "10s", writeFile(t, "access.log", accessLog))
	if code != 0 || !strings.Contains(out, "2/10s fine") {
		t.Errorf("table: exit %d, stderr %s, out:\n%s\nwant a row labelled fine", code, errOut, out)
	}
	cfg := apiConfig(t, `
      - name: exact
        limit: 2
        period: 10s
        precision: fine
`)
	code, out, errOut = runEdge("replay", "-json", "-config", cfg, writeFile(t, "access.log", accessLog))
	if code != 0 {
		t.Fatalf("config: exit %d, stderr %s", code, errOut)
	}
	got.Reports = nil
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Reports) != 1 || got.Reports[0].Precision != "fine" {
		t.Errorf("config: %v, %+v; want one report of precision fine", err, got.Reports)
	}
}
