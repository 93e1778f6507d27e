package replay

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgerate/edge/config"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/trace"
)

// TestEveryConfig replays a small log through every example configuration,
// plain and with -suggest, as edge replay -config does: none may fail or
// panic, and every rule is either replayed or listed as skipped with its
// reason.
func TestEveryConfig(t *testing.T) {
	files, err := filepath.Glob("../configs/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("configs: got %v, %v", files, err)
	}
	var log strings.Builder
	for i := range 40 {
		fmt.Fprintf(&log, "192.0.2.%d - - [10/Oct/2000:13:55:%02d -0700] \"GET /v1/a HTTP/1.1\" 200 1 \"-\" \"ua\"\n", i%3, i)
	}
	for _, file := range files {
		table, _, err := config.Load(file)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, suggest := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/suggest=%v", filepath.Base(file), suggest), func(t *testing.T) {
				c := defaultCommand()
				c.Config, c.Table, c.Suggest = file, table, suggest
				c.Files, c.Stdin = []string{"-"}, strings.NewReader(log.String())
				if err := c.Check(); err != nil {
					t.Fatalf("Check: %v", err)
				}
				var stdout, stderr bytes.Buffer
				if err := c.Run(context.Background(), &stdout, &stderr); err != nil {
					t.Fatalf("Run: %v\n%s", err, stderr.String())
				}
				out := stdout.String()
				for _, d := range table.Domains {
					for _, r := range d.Rules {
						name := d.Name + "/" + r.Name
						if !strings.Contains(out, name) {
							t.Errorf("rule %s is neither replayed nor skipped in\n%s", name, out)
						}
						if unreplayable(r) != "" && !strings.Contains(out, "skipped "+name+": a ") {
							t.Errorf("%s rule %s: not listed as skipped, with its reason, in\n%s", r.Algorithm, name, out)
						}
					}
				}
				for _, line := range strings.Split(out, "\n") {
					if name, reason, ok := strings.Cut(strings.TrimPrefix(line, "skipped "), ": "); ok && strings.HasPrefix(line, "skipped ") && (name == "" || reason == "") {
						t.Errorf("skipped line without a rule or a reason: %q", line)
					}
				}
			})
		}
	}
}

// TestSkippedRule checks that -rule naming a rule replay cannot count
// lists it as skipped rather than saying it does not exist.
func TestSkippedRule(t *testing.T) {
	table, _, err := config.Load("../configs/concurrency.yaml")
	if err != nil {
		t.Fatal(err)
	}
	skips := TableSkips(table, "")
	if len(skips) == 0 {
		t.Fatal("configs/concurrency.yaml: got no skipped rule, want its concurrency rules")
	}
	c := defaultCommand()
	c.Config, c.Table, c.Rule = "concurrency.yaml", table, skips[0].Rule
	c.Given["rule"] = true
	c.Files = []string{"-"}
	c.Stdin = strings.NewReader(`192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1` + "\n")
	var stdout, stderr bytes.Buffer
	err = c.Run(context.Background(), &stdout, &stderr)
	want := "skipped " + skips[0].Rule + ": a concurrency rule counts requests in flight"
	if err != nil || !strings.Contains(stdout.String(), want) {
		t.Errorf("Run: got %v and\n%s\nwant nil and output holding %q", err, stdout.String(), want)
	}
}

// TestUnrecordedHeader checks that a rule keyed by a header the log
// records for no request is skipped, and one it records is replayed.
func TestUnrecordedHeader(t *testing.T) {
	lr := LogRule{Key: []rules.KeyPart{{Kind: rules.KeyIP}, {Kind: rules.KeyHeader, Header: "X-Api-Key"}}}
	tests := []struct {
		name string
		recs []trace.Record
		want string
	}{
		{"no headers", []trace.Record{{Path: "/"}}, "keyed by header X-Api-Key, which the log records for no request"},
		{"other headers", []trace.Record{{Headers: map[string]string{"User-Agent": "ua"}}}, "keyed by header X-Api-Key, which the log records for no request"},
		{"recorded once", []trace.Record{{}, {Headers: map[string]string{"X-Api-Key": "k"}}}, ""},
	}
	for _, tt := range tests {
		if got := lr.Unrecorded(tt.recs); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}
