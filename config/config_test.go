package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// configLines returns Parse's problems with data, one per line (a
// YAML error's quoted line stays with its message).
func configLines(t *testing.T, data string) []string {
	t.Helper()
	return configLinesEnv(t, data, nil)
}

// configLinesEnv is configLines with the environment env (ParseEnv).
func configLinesEnv(t *testing.T, data string, env []string) []string {
	t.Helper()
	table, err := ParseEnv([]byte(data), env)
	if err == nil {
		t.Fatalf("Parse accepted:\n%s", data)
	}
	if table != nil {
		t.Errorf("Parse returned a table along with its error")
	}
	var lines []string
	for _, e := range rules.Problems(err) {
		lines = append(lines, e.Error())
	}
	return lines
}

// oneRule is a valid config but for the rule, written between braces.
func oneRule(rule string) string {
	return "domains: [{hosts: [\"*\"], respond: {body: ok}, rules: [{" + rule + "}]}]\n"
}

const validDomains = "domains: [{hosts: [\"*\"], respond: {body: ok}, rules: [{name: a, limit: 1, period: 1s}]}]\n"

// TestConfigProblemMessages checks the exact problems reported for values
// that do not decode, required keys left out, and every problem at once.
func TestConfigProblemMessages(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		// Durations need a unit.
		{"duration integer", "timeouts: {upstream: 30}\n" + validDomains,
			[]string{"timeouts.upstream: a duration needs a unit, such as 30s or 1m; got 30"}},
		{"duration float", "timeouts: {read_header: 1.5}\n" + validDomains,
			[]string{"timeouts.read_header: a duration needs a unit, such as 30s or 1m; got 1.5"}},
		{"duration quoted bare number", "timeouts: {idle: \"30\"}\n" + validDomains,
			[]string{`timeouts.idle: a duration needs a unit, such as 30s or 1m; got "30"`}},
		{"period integer", oneRule("name: a, limit: 1, period: 60"),
			[]string{"domains[0] (_).rules[0] (a).period: a duration needs a unit, such as 30s or 1m; got 60"}},
		{"mitigation_timeout integer", oneRule("name: a, limit: 1, period: 1s, mitigation_timeout: 60"),
			[]string{"domains[0] (_).rules[0] (a).mitigation_timeout: a duration needs a unit, such as 30s or 1m; got 60"}},
		{"cluster duration integer", "cluster: {budget: 20, redis: {dial_timeout: \"1\"}}\n" + validDomains, []string{
			`cluster.redis.dial_timeout: a duration needs a unit, such as 30s or 1m; got "1"`,
			"cluster.budget: a duration needs a unit, such as 30s or 1m; got 20",
		}},
		{"duration not a duration", "timeouts: {read: forever}\n" + validDomains,
			[]string{`timeouts.read: must be a duration such as 30s, 1m or 1h, got "forever"`}},
		{"duration list", "timeouts: {read: [1s]}\n" + validDomains,
			[]string{`timeouts.read: must be a duration such as 30s, 1m or 1h, got a list`}},
		{"duration below its minimum", "timeouts: {upstream: 30ns}\n" + validDomains,
			[]string{"timeouts.upstream: must be between 1ms and 24h, got 30ns"}},
		{"duration above its maximum", "timeouts: {shutdown: 2h}\n" + validDomains,
			[]string{"timeouts.shutdown: must be between 1ms and 1h, got 2h"}},
		{"off duration below its minimum", "timeouts: {write: 1us}\n" + validDomains,
			[]string{"timeouts.write: must be 0 (off) or between 1ms and 24h, got 1µs"}},

		// Whole numbers are whole.
		{"limit with a fraction", oneRule("name: a, limit: 10.5, period: 1s"),
			[]string{"domains[0] (_).rules[0] (a).limit: must be a whole number, got 10.5"}},
		{"max_keys with a fraction", "max_keys: 1.5\n" + validDomains,
			[]string{"max_keys: must be a whole number, got 1.5"}},
		{"status true", "domains: [{hosts: [\"*\"], respond: {status: true}}]\n",
			[]string{"domains[0] (_).respond.status: must be a whole number, got true"}},
		{"quoted fraction", "client_ip: {ipv6_prefix: \"64.5\"}\n" + validDomains,
			[]string{`client_ip.ipv6_prefix: must be a whole number, got "64.5"`}},
		{"integer word", oneRule("name: a, limit: lots, period: 1s"),
			[]string{`domains[0] (_).rules[0] (a).limit: must be a whole number, got "lots"`}},
		{"rls.max_descriptors a word", "rls: {listen: \"127.0.0.1:8081\", config: [x.yaml], max_descriptors: lots}\n" + validDomains,
			[]string{`rls.max_descriptors: must be a whole number, got "lots"`}},
		{"rls.max_descriptors zero", "rls: {listen: \"127.0.0.1:8081\", config: [x.yaml], max_descriptors: 0}\n" + validDomains,
			[]string{"rls.max_descriptors: must be between 1 and 10000, got 0"}},

		// Missing means required; written as zero is out of range.
		{"period left out", oneRule("name: a, limit: 10"),
			[]string{"domains[0] (_).rules[0] (a).period: required"}},
		{"period null", oneRule("name: a, limit: 10, period: ~"),
			[]string{"domains[0] (_).rules[0] (a).period: required"}},
		{"period zero", oneRule("name: a, limit: 10, period: 0s"),
			[]string{"domains[0] (_).rules[0] (a).period: must be at least 1s, got 0s"}},
		{"limit left out", oneRule("name: a, period: 1s"),
			[]string{"domains[0] (_).rules[0] (a).limit: required"}},
		{"limit zero", oneRule("name: a, limit: 0, period: 1s"),
			[]string{"domains[0] (_).rules[0] (a).limit: must be at least 1, got 0"}},
		{"count_blocked false with mode soft", oneRule("name: a, limit: 1, period: 1s, mode: soft, count_blocked: false"),
			[]string{"domains[0] (_).rules[0] (a).count_blocked: false is not allowed with mode: soft, which counts every request offered (leave count_blocked out)"}},
		{"name left out", oneRule("limit: 1, period: 1s"),
			[]string{"domains[0] (_).rules[0].name: required"}},
		{"hosts left out", "domains: [{respond: {body: ok}}]\n",
			[]string{"domains[0].hosts: required"}},
		{"domains left out", "listen: \":8080\"\n",
			[]string{"domains: required"}},
		{"empty file", "",
			[]string{"domains: required"}},
		{"redis addresses left out", "cluster: {store: redis}\n" + validDomains,
			[]string{"cluster.redis.addresses: required with store redis"}},

		// Every problem at once; a field that failed to decode is reported
		// once and not validated further, nor is the section holding it.
		{"all problems at once", `
listen_port: 80
max_keys: -1
domains:
  - hosts: ["*"]
    respond: oops
    rules:
      - {name: a, limit: 10.5, period: 1s}
      - {name: b, limit: 1}
      - {name: c, limit: 1, period: 5, bucket_size: 3}
`, []string{
			`domains[0] (_).respond: must be a mapping, got "oops"`,
			"domains[0] (_).rules[0] (a).limit: must be a whole number, got 10.5",
			"domains[0] (_).rules[2] (c).period: a duration needs a unit, such as 30s or 1m; got 5",
			"domains[0] (_).rules[2] (c).bucket_size: unknown key",
			"listen_port: unknown key",
			"max_keys: must be between 1 and 2147483647, got -1",
			"domains[0] (_).rules[1] (b).period: required",
		}},
		{"a list that is not one", "domains: 5\n",
			[]string{"domains: must be a list, got 5"}},
		{"a mapping that is not one", "timeouts: 30s\n" + validDomains,
			[]string{`timeouts: must be a mapping, got "30s"`}},

		// Secrets are never echoed.
		{"password not a string", "cluster: {redis: {password: [AnotherSecret]}}\n" + validDomains,
			[]string{"cluster.redis.password: must be a string, got [redacted]"}},
		{"admin_token not a string", "admin_token: {value: AnotherSecret}\n" + validDomains,
			[]string{"admin_token: must be a string, got [redacted]"}},

		// YAML errors a person can act on.
		{"yaml bad indentation", "domains:\n  - hosts: [a]\n   origin: x\n", []string{
			"yaml: line 3, column 4: did not find expected '-' indicator (while parsing a block collection at line 2, column 3)\n" +
				"    3 |    origin: x\n" +
				"      |    ^",
		}},
		{"yaml missing comma", oneRule("name: a, limit: 1 period: 1s"), []string{
			"yaml: line 1, column 80: did not find expected ',' or '}' (while parsing a flow mapping at line 1, column 55)\n" +
				`    1 | domains: [{hosts: ["*"], respond: {body: ok}, rules: [{name: a, limit: 1 period: 1s}]}]` + "\n" +
				"      |                                                                                ^",
		}},
		{"yaml unclosed bracket", "domains: [\n", []string{
			"yaml: line 2, column 1: did not find expected node content\n" +
				"    1 | domains: [\n" +
				"      |           ^",
		}},
		{"yaml tab", "log:\n\tlevel: info\n", []string{
			"yaml: line 2, column 1: found character that cannot start any token (a tab: YAML indents with spaces)\n" +
				"    2 | \tlevel: info\n" +
				"      | ^",
		}},
		{"yaml key twice", "pop: a\npop: b\n", []string{
			"yaml: line 2, column 1: mapping key \"pop\" already defined at line 1\n" +
				"    2 | pop: b\n" +
				"      | ^",
		}},
		{"yaml unclosed quote on a secret", "cluster:\n  redis:\n    password: \"AnotherSecret\n", []string{
			"yaml: line 4, column 1: found unexpected end of stream (while scanning a quoted scalar at line 3, column 15)\n" +
				"    3 |     password: [redacted]\n" +
				"      |               ^",
		}},
		{"file is a string", "hello\n", []string{"the file must be a mapping of settings; it is a string"}},
		{"file is a list", "- domains: []\n", []string{"the file must be a mapping of settings; it is a list"}},
		{"file is a number", "42\n", []string{"the file must be a mapping of settings; it is a number"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := configLines(t, tt.yaml)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			for _, line := range got {
				if strings.Contains(line, "AnotherSecret") || strings.Contains(line, "interface") {
					t.Errorf("problem %q shows a secret or a Go type", line)
				}
			}
		})
	}
}

// TestConfigZeroDurations: 0, with or without a unit, is accepted by every
// duration key that documents 0 as off, and takes the default where 0
// means the default.
func TestConfigZeroDurations(t *testing.T) {
	table, err := Parse([]byte(`
timeouts: {write: 0, drain_delay: "0", read: 0s, upstream: 0}
cluster: {budget: 0}
domains: [{hosts: ["*"], respond: {body: ok}, rules: [{name: a, limit: 1, period: 1s, mitigation_timeout: 0}]}]
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	tests := []struct {
		name      string
		got, want any
	}{
		{"timeouts.write", table.Timeouts.Write.String(), "0s"},
		{"timeouts.drain_delay", table.Timeouts.DrainDelay.String(), "0s"},
		{"timeouts.read", table.Timeouts.Read.String(), "1m0s"},
		{"timeouts.upstream", table.Timeouts.Upstream.String(), "30s"},
		{"cluster.budget", table.Cluster.Budget.String(), "20ms"},
		{"mitigation_timeout", table.Domains[0].Rules[0].MitigationTimeout.String(), "0s"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "unknown key",
			yaml: "listen: \":8080\"\nlisten_port: 80\ndomains: [{hosts: [\"*\"], respond: {body: ok}}]\n",
			want: []string{"listen_port"},
		},
		{
			name: "unknown rule key",
			yaml: "domains: [{hosts: [\"*\"], respond: {body: ok}, rules: [{name: a, limit: 1, period: 1s, bucket_size: 3}]}]\n",
			want: []string{"domains[0] (_).rules[0] (a).bucket_size: unknown key"},
		},
		{
			name: "wrong type",
			yaml: "domains: [{hosts: [\"*\"], respond: {body: ok}, rules: [{name: a, limit: lots, period: 1s}]}]\n",
			want: []string{"limit", "lots"},
		},
		{
			name: "bad duration",
			yaml: "domains: [{hosts: [\"*\"], respond: {body: ok}, rules: [{name: a, limit: 1, period: often}]}]\n",
			want: []string{"period", "often"},
		},
		{
			name: "every validation problem at once",
			yaml: `
origin: "ftp://nope"
domains:
  - hosts: ["api.example.com"]
    rules:
      - {name: a, limit: 0, period: 500ms}
      - {name: a, limit: 1, period: 1m}
  - hosts: ["api.example.com"]
`,
			want: []string{
				`origin: must be an absolute http, https or h2c URL, got "ftp://nope"`,
				"domains[0] (api.example.com).rules[0] (a).limit: must be at least 1, got 0",
				"domains[0] (api.example.com).rules[0] (a).period: must be at least 1s, got 500ms",
				`domains[0] (api.example.com).rules[1] (a).name: "a" is used by domains[0] (api.example.com).rules[0] (a)`,
				`domains[1] (api.example.com).hosts[0]: "api.example.com" is already claimed by domains[0] (api.example.com)`,
			},
		},
		{
			name: "not YAML",
			yaml: "domains: [\n",
			want: []string{"yaml: line 2, column 1: did not find expected node content"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatal("got no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestEmptyACMESection: tls.acme written as an empty mapping is the section
// with its defaults, not no section (viper drops empty mappings).
func TestEmptyACMESection(t *testing.T) {
	tab, err := Parse([]byte("listen: \":8080\"\norigin: http://o.internal\ntls:\n  listen: \":8443\"\n  acme: {}\ndomains: [{hosts: [a.example.com], acme: true}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a := tab.TLS.ACME; a == nil || a.CA != rules.DefaultACMECA || !a.HTTP01 || !a.TLSALPN01 || len(a.Names) != 1 {
		t.Errorf("got %+v, want the defaults for a.example.com", a)
	}
}

// TestEmptySections: a top-level section written {} is the section, not
// nothing (viper drops an empty mapping): each fails naming what it
// requires, where before it was silently no section.
func TestEmptySections(t *testing.T) {
	base := "listen: \":8080\"\norigin: http://o.internal\ndomains: [{hosts: [a.example.com]}]\n"
	if _, err := Parse([]byte(base)); err != nil {
		t.Fatalf("the base config: %v", err)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"check: {}\n", "check.listen"},
		{"connections: {rate_per_client: {}}\n", "connections.rate_per_client"},
		{"connections: {max_per_client: 5, allow: {}}\n", "connections.allow.cidrs"},
		{"health: {}\n", "health.path"},
	} {
		_, err := Parse([]byte(base + tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want an error naming %s", tt.yaml, err, tt.want)
		}
	}
}

// TestUpstreamConfig: origins, balance, hash_key, health, passive
// (false too), retries and when_down decode into the compiled group, at
// the top level and in a domain, and their mistakes name the key.
func TestUpstreamConfig(t *testing.T) {
	tab, err := Parse([]byte(`
listen: ":8080"
retries: {attempts: 2, budget: 50%}
domains:
  - hosts: [a.example.com]
    origins: [{url: "http://10.0.0.1:80", weight: 3}, {url: "http://10.0.0.2:80"}]
    balance: hash
    hash_key: ["header:X-User"]
    health: {path: /healthz, expect_status: [204, "300-399"]}
    passive: false
    when_down: {status: 503, retry_after: 30s}
  - hosts: [b.example.com]
    origin: "http://10.0.0.3:80"
    passive: {}
    retries: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := tab.Domains[0].Upstream, tab.Domains[1].Upstream
	tests := []struct {
		name      string
		got, want any
	}{
		{"servers", len(a.Servers), 2},
		{"weight", a.Servers[0].Weight, 3},
		{"default weight", a.Servers[1].Weight, 1},
		{"balance", a.Balance, rules.BalanceHash},
		{"hash_key", a.HashKey[0].String(), "header:X-User"},
		{"expect_status", fmt.Sprint(a.Health.Expect), "[{204 204} {300 399}]"},
		{"health host", a.Health.Host, "a.example.com"},
		{"passive false", a.Passive == nil, true},
		{"when_down", *a.WhenDown, rules.WhenDown{Status: 503, RetryAfter: 30 * time.Second}},
		{"top-level retries", a.Retries, rules.Retries{Attempts: 2, On: rules.DefaultRetryOn, Budget: 0.5}},
		{"origin is a list of one", len(b.Servers), 1},
		{"passive: {} on for one server", b.Passive != nil, true},
		{"retries: {} the defaults", b.Retries, rules.Retries{Attempts: 1, On: rules.DefaultRetryOn, Budget: 0.2}},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	for _, tt := range []struct{ yaml, want string }{
		{"origin: http://a\norigins: [{url: http://b}]\n", "origin: set origin or origins, not both"},
		{"origins: [{url: http://a}, {url: ftp://b}]\n", "origins[1].url: must be an absolute http, https or h2c URL"},
		{"origins: [{url: http://a, weight: 0.5}]\n", "origins[0].weight: must be a whole number"},
		{"origins: [{url: http://a}]\nbalance: fastest\n", "balance: must be round_robin, least_requests, random_two or hash"},
		{"origins: [{url: http://a}]\nhash_key: [ip]\n", "hash_key: applies only with balance hash"},
		{"origins: [{url: http://a}]\npassive: {max_fails: -1}\n", "passive.max_fails: must be between 1 and 1000"},
		{"origins: [{url: http://a}]\nretries: {budget: lots}\n", "retries.budget: must be a share"},
		{"origins: [{url: http://a}]\nwhen_down: {status: 404}\n", "when_down.status: must be between 500 and 599"},
		{"origins: [{url: http://a}]\nhealth: {path: /h, expect_status: [99]}\n", "health.expect_status[0]"},
	} {
		_, err := Parse([]byte("listen: \":8080\"\ndomains: [{hosts: [a.example.com]}]\n" + tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want an error with %q", tt.yaml, err, tt.want)
		}
	}
}

// TestRoutesConfig: a domain's routes decode with every group key, and
// `passive: false` and `{}` sections, and their mistakes name the route.
func TestRoutesConfig(t *testing.T) {
	tab, err := Parse([]byte(`
listen: ":8080"
domains:
  - hosts: [a.example.com]
    origin: "http://10.0.0.1:80"
    routes:
      - name: api
        match: {path_prefix: /api/, methods: [GET, post]}
        origins: [{url: "http://10.0.0.2:80"}, {url: "http://10.0.0.3:80", weight: 2}]
        balance: hash
        hash_key: [ip, path]
        health: {path: /healthz}
        passive: false
        retries: {}
        when_down: {status: 503}
      - name: static
        match: {path_prefix: /static/}
        origins: [{url: "http://10.0.0.4:80"}]
        passive: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	d := tab.Domains[0]
	api, static := d.Routes[0], d.Routes[1]
	for _, tt := range []struct {
		name      string
		got, want any
	}{
		{"routes", len(d.Routes), 2},
		{"name", api.Name, "api"},
		{"path_prefix", api.PathPrefix, "/api/"},
		{"methods upper-cased", api.Methods, []string{"GET", "POST"}},
		{"servers", len(api.Upstream.Servers), 2},
		{"weight", api.Upstream.Servers[1].Weight, 2},
		{"balance", api.Upstream.Balance, rules.BalanceHash},
		{"hash_key", len(api.Upstream.HashKey), 2},
		{"health", api.Upstream.Health.Path, "/healthz"},
		{"passive false", api.Upstream.Passive == nil, true},
		{"retries {}", api.Upstream.Retries.Attempts, 1},
		{"when_down", api.Upstream.WhenDown.Status, 503},
		{"passive {} for one server", static.Upstream.Passive != nil, true},
		{"no methods", static.Methods == nil, true},
		{"the domain's own", d.Upstream.Servers[0].Name, "http://10.0.0.1:80"},
	} {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	for _, tt := range []struct{ yaml, want string }{
		{"routes: [{name: a, match: {path_prefix: /a/, host: x}, origins: [{url: http://b}]}]\n", "(a.example.com).routes[0].match.host: unknown key"},
		{"routes: [{name: a, match: {path_prefix: /a/}, origins: [{url: http://b}], rules: []}]\n", "(a.example.com).routes[0].rules: unknown key"},
		{"routes: [{name: a, match: {path_prefix: a}, origins: [{url: http://b}]}]\n", `(a.example.com).routes[0].match.path_prefix: must start with "/"`},
		{"routes: [{name: a, match: {path_prefix: /a/}}]\n", "(a.example.com).routes[0].origins: must be set"},
		{"routes: [{match: {path_prefix: /a/}, origins: [{url: http://b}]}]\n", "(a.example.com).routes[0].name: must be set"},
		{"routes: [{name: a, match: {path_prefix: /a/}, origins: [{url: http://b}], passive: {max_fails: 0.5}}]\n", "routes[0].passive.max_fails: must be a whole number"},
	} {
		_, err := Parse([]byte("listen: \":8080\"\ndomains:\n  - hosts: [a.example.com]\n    origin: http://o\n    " + tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want an error with %q", tt.yaml, err, tt.want)
		}
	}
}

// TestOriginLimitConfig: max_in_flight on a server entry and origin_queue
// (a domain's, else the top level's, else the defaults) decode into the
// compiled domain, and their mistakes name the path, the domain and the
// value.
func TestOriginLimitConfig(t *testing.T) {
	tab, err := Parse([]byte(`
listen: ":8080"
origin_queue: {timeout: 2s}
domains:
  - hosts: [a.example.com]
    origins: [{url: "http://10.0.0.1:80", max_in_flight: 10}, {url: "http://10.0.0.2:80"}]
    origin_queue: {max: 50, timeout: 500ms}
  - hosts: [b.example.com]
    origin: "http://10.0.0.3:80"
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := tab.Domains[0], tab.Domains[1]
	tests := []struct {
		name      string
		got, want any
	}{
		{"max_in_flight", a.Upstream.Servers[0].MaxInFlight, 10},
		{"no max_in_flight", a.Upstream.Servers[1].MaxInFlight, 0},
		{"the domain's origin_queue", a.OriginQueue, rules.OriginQueue{Max: 50, Timeout: 500 * time.Millisecond}},
		{"the top level's origin_queue, max defaulted", b.OriginQueue, rules.OriginQueue{Max: rules.DefaultOriginQueueMax, Timeout: 2 * time.Second}},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	defaults, err := Parse([]byte("listen: \":8080\"\ndomains: [{hosts: [a.example.com], origin: \"http://10.0.0.1\"}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := defaults.Domains[0].OriginQueue, (rules.OriginQueue{Max: 1000}); got != want {
		t.Errorf("origin_queue left out: got %v, want %v", got, want)
	}
	for _, tt := range []struct{ name, yaml, want string }{
		{"negative max_in_flight", "domains: [{hosts: [a.example.com], origins: [{url: http://a, max_in_flight: -1}]}]\n",
			`domains[0] (a.example.com).origins[0].max_in_flight: must be between 1 and 1000000 (or 0 for no bound), got -1`},
		{"huge max_in_flight", "domains: [{hosts: [a.example.com], origins: [{url: http://a}, {url: http://b, max_in_flight: 2000000}]}]\n",
			`domains[0] (a.example.com).origins[1].max_in_flight: must be between 1 and 1000000 (or 0 for no bound), got 2000000`},
		{"max_in_flight not a number", "domains: [{hosts: [a.example.com], origins: [{url: http://a, max_in_flight: many}]}]\n",
			`domains[0] (a.example.com).origins[0].max_in_flight: must be a whole number, got "many"`},
		{"queue max", "domains: [{hosts: [a.example.com], origin: http://a, origin_queue: {max: -5}}]\n",
			`domains[0] (a.example.com).origin_queue.max: must be between 1 and 1000000, got -5`},
		{"queue timeout", "domains: [{hosts: [a.example.com], origin: http://a, origin_queue: {timeout: 1h}}]\n",
			`domains[0] (a.example.com).origin_queue.timeout: must be between 0 (refused at once) and 10m, got 1h`},
		{"top-level queue timeout", "origin_queue: {timeout: -1s}\ndomains: [{hosts: [a.example.com], origin: http://a}]\n",
			`origin_queue.timeout: must be between 0 (refused at once) and 10m, got -1s`},
		{"unknown queue key", "domains: [{hosts: [a.example.com], origin: http://a, origin_queue: {size: 5}}]\n",
			`size`},
		{"origin_queue without origins", "domains: [{hosts: [a.example.com], respond: {body: ok}, origin_queue: {max: 5}}]\n",
			`domains[0] (a.example.com).origin_queue: applies only to a domain forwarded to origins`},
	} {
		_, err := Parse([]byte("listen: \":8080\"\n" + tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error with %q", tt.name, err, tt.want)
		}
	}
}
