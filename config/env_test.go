package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/edgerate/edge/rules"
)

// TestEnvOverFile: a variable gives its setting over the file's, decoded
// as the file's value would be (a string, a duration, a whole number,
// true or false, a size, a list of strings comma-separated), counts as
// given, and is named in the table's Sources; an empty one is unset.
func TestEnvOverFile(t *testing.T) {
	const file = "listen: \":8080\"\ntimeouts: {read: 30s}\nmax_keys: 100\nfastpath: true\n" +
		"client_ip: {trusted_proxies: [192.0.2.1]}\nadmin_token: from-the-file\n" + validDomains
	tests := []struct {
		name    string
		env     []string
		got     func(*rules.Table) any
		want    any
		sources map[string]string
	}{
		{"string", []string{"EDGE_LISTEN=127.0.0.1:18080"},
			func(t *rules.Table) any { return t.Listen }, "127.0.0.1:18080",
			map[string]string{"listen": "env EDGE_LISTEN"}},
		{"duration", []string{"EDGE_TIMEOUTS_READ=5s"},
			func(t *rules.Table) any { return t.Timeouts.Read.String() }, "5s",
			map[string]string{"timeouts.read": "env EDGE_TIMEOUTS_READ"}},
		{"a key with underscores of its own", []string{"EDGE_TIMEOUTS_READ_HEADER=2s"},
			func(t *rules.Table) any { return t.Timeouts.ReadHeader.String() + " " + t.Timeouts.Read.String() }, "2s 30s",
			map[string]string{"timeouts.read_header": "env EDGE_TIMEOUTS_READ_HEADER"}},
		{"whole number", []string{"EDGE_MAX_KEYS=5000"},
			func(t *rules.Table) any { return t.MaxKeys }, 5000,
			map[string]string{"max_keys": "env EDGE_MAX_KEYS"}},
		{"bool", []string{"EDGE_FASTPATH=false"},
			func(t *rules.Table) any { return t.FastPath }, false,
			map[string]string{"fastpath": "env EDGE_FASTPATH"}},
		{"size", []string{"EDGE_MAX_REQUEST_BODY=1MiB"},
			func(t *rules.Table) any { return t.Domains[0].Body.MaxSize.String() }, "1MiB",
			map[string]string{"max_request_body": "env EDGE_MAX_REQUEST_BODY"}},
		{"list of strings", []string{"EDGE_CLIENT_IP_TRUSTED_PROXIES=10.0.0.0/8, 192.168.0.0/16"},
			func(t *rules.Table) any { return fmt.Sprint(t.TrustedProxies) }, "[10.0.0.0/8 192.168.0.0/16]",
			map[string]string{"client_ip.trusted_proxies": "env EDGE_CLIENT_IP_TRUSTED_PROXIES"}},
		{"list of one", []string{"EDGE_ADMIN_HOSTS=edge-admin.internal"},
			func(t *rules.Table) any { return fmt.Sprint(t.AdminHosts) }, "[edge-admin.internal]",
			map[string]string{"admin_hosts": "env EDGE_ADMIN_HOSTS"}},
		{"nested section the file leaves out", []string{"EDGE_CLUSTER_REDIS_PASSWORD=from-the-env"},
			func(t *rules.Table) any { return t.Cluster.Password }, "from-the-env",
			map[string]string{"cluster.redis.password": "env EDGE_CLUSTER_REDIS_PASSWORD"}},
		{"secret over the file's", []string{"EDGE_ADMIN_TOKEN=from-the-env"},
			func(t *rules.Table) any { return t.AdminToken }, "from-the-env",
			map[string]string{"admin_token": "env EDGE_ADMIN_TOKEN"}},
		{"optional section from the environment alone", []string{"EDGE_CHECK_LISTEN=127.0.0.1:18082", "EDGE_CHECK_TOKEN=check-token"},
			func(t *rules.Table) any { return fmt.Sprintf("%+v", *t.Check) }, "{Listen:127.0.0.1:18082 DenyStatus:429 Token:check-token}",
			map[string]string{"check.listen": "env EDGE_CHECK_LISTEN", "check.token": "env EDGE_CHECK_TOKEN"}},
		{"given: 0 turns accuracy_sample off", []string{"EDGE_ACCURACY_SAMPLE=0"},
			func(t *rules.Table) any { return t.AccuracySample }, 0,
			map[string]string{"accuracy_sample": "env EDGE_ACCURACY_SAMPLE"}},
		{"empty is unset", []string{"EDGE_LISTEN="},
			func(t *rules.Table) any { return t.Listen }, ":8080", nil},
		{"the first of a name given twice", []string{"EDGE_POP=first", "EDGE_POP=second"},
			func(t *rules.Table) any { return t.Pop }, "first",
			map[string]string{"pop": "env EDGE_POP"}},
		{"other variables", []string{"PATH=/bin", "edge_listen=127.0.0.1:1", "EDGE_FOO=1", "EDGE_DOMAINS=x"},
			func(t *rules.Table) any { return t.Listen + " " + t.Domains[0].Name }, ":8080 _", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := ParseEnv([]byte(file), tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.got(table); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if got := table.Sources; fmt.Sprint(got) != fmt.Sprint(tt.sources) {
				t.Errorf("got sources %v, want %v", got, tt.sources)
			}
		})
	}
	if table, err := Parse([]byte(file)); err != nil || table.Listen != ":8080" || table.Sources != nil {
		t.Errorf("Parse: got %v, listen %q, sources %v; want the file alone", err, table.Listen, table.Sources)
	}
}

// TestEnvProblems: a variable's problems, in decoding or validation, name
// the variable beside the key, and are reported with the file's; a
// problem in an optional section that only the environment gives says so.
func TestEnvProblems(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  []string
		want []string
	}{
		{"duration without a unit", validDomains, []string{"EDGE_TIMEOUTS_READ=60"},
			[]string{`EDGE_TIMEOUTS_READ (timeouts.read): a duration needs a unit, such as 30s or 1m; got "60"`}},
		{"duration out of range", validDomains, []string{"EDGE_TIMEOUTS_UPSTREAM=30ns"},
			[]string{"EDGE_TIMEOUTS_UPSTREAM (timeouts.upstream): must be between 1ms and 24h, got 30ns"}},
		{"whole number", validDomains, []string{"EDGE_MAX_KEYS=ten"},
			[]string{`EDGE_MAX_KEYS (max_keys): must be a whole number, got "ten"`}},
		{"bool", validDomains, []string{"EDGE_FASTPATH=yes"},
			[]string{`EDGE_FASTPATH (fastpath): must be true or false, got "yes"`}},
		{"size", validDomains, []string{"EDGE_REQUEST_BUFFER=1MB"},
			[]string{`EDGE_REQUEST_BUFFER (request_buffer): must be a size such as 64KiB or 1MiB (units B, KiB, MiB, GiB) or a whole number of bytes, got "1MB"`}},
		{"an element of a list", validDomains, []string{"EDGE_CLIENT_IP_TRUSTED_PROXIES=10.0.0.0/8,10.0.0.300"},
			[]string{`EDGE_CLIENT_IP_TRUSTED_PROXIES (client_ip.trusted_proxies[1]): must be an IP address or CIDR prefix, got "10.0.0.300"`}},
		{"a collision with the file's", "listen: \"127.0.0.1:18080\"\n" + validDomains, []string{"EDGE_ADMIN_LISTEN=127.0.0.1:18080"},
			[]string{`EDGE_ADMIN_LISTEN (admin_listen): must differ from listen ("127.0.0.1:18080"), got "127.0.0.1:18080"`}},
		{"with the file's problems", "max_keys: 1.5\n" + validDomains, []string{"EDGE_LOG_LEVEL=loud"}, []string{
			"max_keys: must be a whole number, got 1.5",
			`EDGE_LOG_LEVEL (log.level): must be debug, info, warn or error, got "loud"`,
		}},
		{"an optional section the file does not have", validDomains, []string{"EDGE_CHECK_TOKEN=check-token"},
			[]string{"check.listen: required with the check section (host:port); the file has no check section, EDGE_CHECK_TOKEN gives it"}},
		{"an optional section the file has", "check: {deny_status: 403}\n" + validDomains, []string{"EDGE_CHECK_TOKEN=check-token"},
			[]string{"check.listen: required with the check section (host:port)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := configLinesEnv(t, tt.yaml, tt.env)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestEnvWarnings: a variable that begins with EDGE_ but names no
// setting, a section or a key only the file gives is a warning, and the
// configuration still loads without it.
func TestEnvWarnings(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want []string
	}{
		{"unknown", []string{"EDGE_FOO=1"}, []string{"EDGE_FOO: names no setting; ignored"}},
		{"misspelt", []string{"EDGE_TIMEOUT_READ=5s"}, []string{"EDGE_TIMEOUT_READ: names no setting; ignored"}},
		{"domains", []string{"EDGE_DOMAINS=[{hosts: [a]}]"},
			[]string{"EDGE_DOMAINS: domains is a list of mappings, which only the file gives; ignored"}},
		{"under domains", []string{"EDGE_DOMAINS_0_ORIGIN=http://a"},
			[]string{"EDGE_DOMAINS_0_ORIGIN: names no setting (domains is a list of mappings, which only the file gives); ignored"}},
		{"a section", []string{"EDGE_TIMEOUTS=5s"},
			[]string{"EDGE_TIMEOUTS: names the section timeouts, not a setting: give each of its settings (such as EDGE_TIMEOUTS_READ_HEADER); ignored"}},
		{"once each, in order", []string{"EDGE_B=1", "EDGE_A=1", "EDGE_B=2"},
			[]string{"EDGE_B: names no setting; ignored", "EDGE_A: names no setting; ignored"}},
		{"empty", []string{"EDGE_FOO="}, []string{"EDGE_FOO: names no setting; ignored"}},
		{"settings", []string{"EDGE_LISTEN=:8080", "EDGE_CLUSTER_REDIS_PASSWORD=x", "EDGE_CHECK_TOKEN="}, nil},
		{"not edge's", []string{"PATH=/bin", "edge_foo=1", "EDGE=1", "XEDGE_FOO=1"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EnvWarnings(tt.env); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			env := slices.DeleteFunc(slices.Clone(tt.env), func(kv string) bool { return strings.HasPrefix(kv, "EDGE_CHECK_TOKEN") })
			if _, err := ParseEnv([]byte(validDomains), env); err != nil {
				t.Errorf("the configuration does not load: %v", err)
			}
		})
	}
}

// TestEnvNames: every key of the schema outside domains has a variable,
// EDGE_ and its path in upper case with _ for each dot, no two keys (nor
// sections) share one, and a list of mappings has none.
func TestEnvNames(t *testing.T) {
	byName := map[string]string{}
	settings := 0
	for _, n := range envNames {
		if other, ok := byName[n.name]; ok {
			t.Errorf("%s and %s are both %s", other, n.path, n.name)
		}
		byName[n.name] = n.path
		if want := "EDGE_" + strings.ToUpper(strings.ReplaceAll(n.path, ".", "_")); n.name != want {
			t.Errorf("%s: got %s, want %s", n.path, n.name, want)
		}
		if n.kind == envSetting || n.kind == envList {
			settings++
		}
		if strings.HasPrefix(n.path, "domains") && (n.path != "domains" || n.kind != envFileOnly) {
			t.Errorf("%s: kind %d; want only domains, and file-only", n.path, n.kind)
		}
	}
	if settings < 40 {
		t.Errorf("found %d settings, want the whole schema outside domains", settings)
	}
	for name, want := range map[string]struct {
		path string
		kind envKind
	}{
		"EDGE_LISTEN":                    {"listen", envSetting},
		"EDGE_ADMIN_LISTEN":              {"admin_listen", envSetting},
		"EDGE_CLUSTER_REDIS_PASSWORD":    {"cluster.redis.password", envSetting},
		"EDGE_CLIENT_IP_TRUSTED_PROXIES": {"client_ip.trusted_proxies", envList},
		"EDGE_RLS_CONFIG":                {"rls.config", envList},
		"EDGE_CHECK":                     {"check", envSection},
		"EDGE_DOMAINS":                   {"domains", envFileOnly},
	} {
		if got := envByName[name]; got.path != want.path || got.kind != want.kind {
			t.Errorf("%s: got %s (kind %d), want %s (kind %d)", name, got.path, got.kind, want.path, want.kind)
		}
	}
}

// TestEnvSecrets: the value of a variable whose key is a secret is one of
// the table's secrets, a short one weak under the variable's name, and
// the value of any other variable is not (a URL's password from the
// environment: TestConfigSecretsNeverInMessages).
func TestEnvSecrets(t *testing.T) {
	tests := []struct {
		name     string
		env      []string
		redacted string // Secrets.Redact of longSecret
		weak     []string
	}{
		{"redis password", []string{"EDGE_CLUSTER_REDIS_PASSWORD=" + longSecret}, "[redacted]", nil},
		{"check token", []string{"EDGE_CHECK_LISTEN=127.0.0.1:18082", "EDGE_CHECK_TOKEN=" + longSecret}, "[redacted]", nil},
		{"weak", []string{"EDGE_CLUSTER_REDIS_PASSWORD=Zq9x"}, longSecret, []string{"EDGE_CLUSTER_REDIS_PASSWORD"}},
		{"not a secret", []string{"EDGE_POP=" + longSecret}, longSecret, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := ParseEnv([]byte(validDomains), tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if got := table.Secrets.Redact(longSecret); got != tt.redacted {
				t.Errorf("Redact: got %q, want %q", got, tt.redacted)
			}
			if got := table.Secrets.Weak(); !slices.Equal(got, tt.weak) {
				t.Errorf("Weak: got %q, want %q", got, tt.weak)
			}
		})
	}
}
