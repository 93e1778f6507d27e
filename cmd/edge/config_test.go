package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/edgerate/edge/config"
	"github.com/edgerate/edge/rules"
)

// loadConfig and parseConfig are shorthand for the tests of this package,
// which build their tables from YAML as edge does, with the settings of
// the process's environment over the file's.
func loadConfig(path string) (*rules.Table, string, error) {
	return config.LoadEnv(path, os.Environ())
}

func parseConfig(data []byte) (*rules.Table, error) { return config.ParseEnv(data, os.Environ()) }

const validDomains = "domains: [{hosts: [\"*\"], respond: {body: ok}, rules: [{name: a, limit: 1, period: 1s}]}]\n"

// TestCheckReportsConfigProblems runs `edge -check` on files with problems
// of every phase and checks what it prints.
func TestCheckReportsConfigProblems(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"unit, fraction, unknown key and validation at once", `
timeouts: {upstream: 30}
listen_port: 80
domains:
  - hosts: ["*"]
    rules:
      - {name: a, limit: 10.5, period: 1s}
      - {name: b, limit: 1}
`, "  - timeouts.upstream: a duration needs a unit, such as 30s or 1m; got 30\n" +
			"  - domains[0] (_).rules[0] (a).limit: must be a whole number, got 10.5\n" +
			"  - listen_port: unknown key\n" +
			"  - domains[0] (_): no upstream: set origin, origins or respond here, or origin or origins at the top level (or serve check, to answer only the check listener)\n" +
			"  - domains[0] (_).rules[1] (b).period: required\n"},
		// The examples of README's "Command line".
		{"readme example", `
domains:
  - name: api
    hosts: ["*"]
    respond: {body: ok}
    rules:
      - {name: login, limit: 10, period: 60}
      - {name: search, limit: 10.5, period: 1m}
      - {name: per-site, limit: 10, period: 1m, key: ["header:host"]}
`, "  - domains[0] (api).rules[0] (login).period: a duration needs a unit, such as 30s or 1m; got 60\n" +
			"  - domains[0] (api).rules[1] (search).limit: must be a whole number, got 10.5\n" +
			"  - domains[0] (api).rules[2] (per-site).key[0]: must be host rather than a header, got \"header:host\"\n"},
		{"yaml syntax", "pop: edge\ndomains:\n  - hosts: [a]\n   origin: x\n",
			"  - yaml: line 4, column 4: did not find expected '-' indicator (while parsing a block collection at line 3, column 3)\n" +
				"    4 |    origin: x\n" +
				"      |    ^\n"},
		{"not a mapping", "just some text\n",
			"  - the file must be a mapping of settings; it is a string\n"},
		{"secret", "cluster: {redis: {password: [AnotherSecret]}}\n" + validDomains,
			"  - cluster.redis.password: must be a string, got [redacted]\n"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "c"+string(rune('a'+i))+".yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"-check", "-config", path}, &stdout, &stderr)
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			want := "edge: invalid configuration " + path + ":\n" + tt.want
			if got := stderr.String(); got != want {
				t.Errorf("stderr:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}
