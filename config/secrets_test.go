package config

import (
	"strings"
	"testing"
)

// longSecret is a secret long enough to be replaced wherever it appears.
const longSecret = "SuperSecretValue"

// TestConfigSecretsNeverInMessages: a secret of 6 bytes or more appears in
// no problem, wherever the file puts it: on a line of its own that the
// YAML parser quotes, or copied by an alias into a key whose problem names
// its value.
func TestConfigSecretsNeverInMessages(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  []string
		want []string
	}{
		// The file does not parse: what is known of its secrets is read
		// from its lines.
		{"unclosed quote on the line after the key", "cluster:\n  redis:\n    password:\n      \"" + longSecret + "\n", nil, []string{
			"yaml: line 5, column 1: found unexpected end of stream (while scanning a quoted scalar at line 4, column 7)\n" +
				"    4 |       [redacted]\n" +
				"      |       ^",
		}},
		{"tab before the value on the line after the key", "admin_token:\n\t" + longSecret + "\n", nil, []string{
			"yaml: line 2, column 1: found character that cannot start any token (a tab: YAML indents with spaces)\n" +
				"    2 | \t[redacted]\n" +
				"      | ^",
		}},
		{"the value elsewhere on the quoted line", "admin_token: " + longSecret + "\npop: [" + longSecret + "\n", nil, []string{
			"yaml: line 3, column 1: did not find expected ',' or ']' (while parsing a flow sequence at line 2, column 6)\n" +
				"    2 | pop: [[redacted]\n" +
				"      |      ^",
		}},
		// The file parses: its secrets are read from its node tree.
		{"alias into log.level", "admin_token: &t " + longSecret + "\nlog: {level: *t}\n" + validDomains, nil,
			[]string{`log.level: must be debug, info, warn or error, got "[redacted]"`}},
		{"alias of check.token into an origin", "check: {listen: \"127.0.0.1:0\", token: &t " + longSecret + "}\ndomains: [{hosts: [a], origin: *t}]\n", nil,
			[]string{`domains[0] (a).origin: must be an absolute http, https or h2c URL, got "[redacted]"`}},
		{"alias of the redis password into listen", "cluster: {store: redis, redis: {addresses: [\"127.0.0.1:6379\"], password: &p " + longSecret + "}}\nlisten: *p\n" + validDomains, nil,
			[]string{`listen: must be host:port, got "[redacted]"`}},
		{"a secret that %q escapes", "admin_token: &t 'Sec\"ret\\99'\nlog: {level: *t}\n" + validDomains, nil,
			[]string{`log.level: must be debug, info, warn or error, got "[redacted]"`}},
		{"a mapping key under a secret, given twice", "admin_token: {" + longSecret + ": 1, " + longSecret + ": 2}\n", nil, []string{
			"yaml: line 1, column 36: mapping key \"[redacted]\" already defined at line 1\n" +
				"    1 | admin_token: [redacted]\n" +
				"      |                        ^",
		}},
		{"EDGE_ADMIN_TOKEN's value in the file", "log: {level: " + longSecret + "}\n" + validDomains, []string{"EDGE_ADMIN_TOKEN=" + longSecret},
			[]string{`log.level: must be debug, info, warn or error, got "[redacted]"`}},
		{"EDGE_CHECK_TOKEN's value in the file", "check: {listen: \"127.0.0.1:0\"}\nlog: {level: " + longSecret + "}\n" + validDomains, []string{"EDGE_CHECK_TOKEN=" + longSecret},
			[]string{`log.level: must be debug, info, warn or error, got "[redacted]"`}},
		{"EDGE_CLUSTER_REDIS_PASSWORD's value in another variable", validDomains,
			[]string{"EDGE_CLUSTER_REDIS_PASSWORD=" + longSecret, "EDGE_LOG_LEVEL=" + longSecret},
			[]string{`EDGE_LOG_LEVEL (log.level): must be debug, info, warn or error, got "[redacted]"`}},
		{"EDGE_CLUSTER_REDIS_PASSWORD's value in the file", "log: {level: " + longSecret + "}\n" + validDomains,
			[]string{"EDGE_CLUSTER_REDIS_PASSWORD=" + longSecret},
			[]string{`log.level: must be debug, info, warn or error, got "[redacted]"`}},
		{"a password in an origin URL from the environment", validDomains,
			[]string{"EDGE_ORIGIN=http://u:" + longSecret + "@example.com", "EDGE_LOG_LEVEL=" + longSecret}, []string{
				`EDGE_ORIGIN (origin): must not contain user info, got "http://u:xxxxx@example.com"`,
				`EDGE_LOG_LEVEL (log.level): must be debug, info, warn or error, got "[redacted]"`,
			}},
		{"a password in an origin URL", "origin: &o \"http://u:" + longSecret + "@example.com\"\nlog: {level: *o}\n" + validDomains, nil, []string{
			`origin: must not contain user info, got "http://u:xxxxx@example.com"`,
			`log.level: must be debug, info, warn or error, got "http://u:[redacted]@example.com"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := configLinesEnv(t, tt.yaml, tt.env)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			for _, line := range got {
				for _, s := range []string{longSecret, `Sec\"ret`, `Sec"ret`} {
					if strings.Contains(line, s) {
						t.Errorf("problem %q shows the secret", line)
					}
				}
			}
		})
	}
}
