package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
)

// TestCheckWithEnvironment: edge -check reads the environment's settings
// over the file's and checks them as it checks the file's, naming the
// variable of each problem and no secret, and warns of a variable that
// names no setting, which does not fail the check.
func TestCheckWithEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(path, []byte("timeouts: {read: 30s}\n"+validDomains), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name           string
		env            map[string]string
		code           int
		stdout, stderr string // what each must hold; "" for empty
	}{
		{"a setting", map[string]string{"EDGE_TIMEOUTS_READ": "5s", "EDGE_CLIENT_IP_TRUSTED_PROXIES": "10.0.0.0/8,192.168.0.0/16"}, 0,
			"configuration " + path + " is valid: 1 domain, 1 rule\n", ""},
		{"a bad value", map[string]string{"EDGE_TIMEOUTS_READ": "60"}, 1, "",
			"edge: invalid configuration " + path + ":\n" +
				`  - EDGE_TIMEOUTS_READ (timeouts.read): a duration needs a unit, such as 30s or 1m; got "60"` + "\n"},
		{"a bad element of a list", map[string]string{"EDGE_ADMIN_HOSTS": "ok.internal,bad:1"}, 1, "",
			`  - EDGE_ADMIN_HOSTS (admin_hosts[1]): must not include a port, got "bad:1"` + "\n"},
		{"a secret", map[string]string{"EDGE_CLUSTER_REDIS_PASSWORD": longSecret, "EDGE_LOG_LEVEL": longSecret}, 1, "",
			`  - EDGE_LOG_LEVEL (log.level): must be debug, info, warn or error, got "[redacted]"` + "\n"},
		{"an unknown variable", map[string]string{"EDGE_FOO": "1"}, 0,
			"is valid: 1 domain, 1 rule\nwarning: EDGE_FOO: names no setting; ignored\n", ""},
		{"domains", map[string]string{"EDGE_DOMAINS": "[]"}, 0,
			"warning: EDGE_DOMAINS: domains is a list of mappings, which only the file gives; ignored\n", ""},
		{"an unknown variable beside a problem", map[string]string{"EDGE_FOO": "1", "EDGE_MAX_KEYS": "-1"}, 1, "",
			"  - EDGE_MAX_KEYS (max_keys): must be between 1 and 2147483647, got -1\n" +
				"warning: EDGE_FOO: names no setting; ignored\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"-check", "-config", path}, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("got exit code %d, want %d; stderr:\n%s", code, tt.code, stderr.String())
			}
			for _, out := range []struct{ name, got, want string }{
				{"stdout", stdout.String(), tt.stdout},
				{"stderr", stderr.String(), tt.stderr},
			} {
				if (out.want == "" && out.got != "") || !strings.Contains(out.got, out.want) {
					t.Errorf("got %s:\n%s\nwant it to hold:\n%s", out.name, out.got, out.want)
				}
				if strings.Contains(out.got, longSecret) {
					t.Errorf("%s shows the secret:\n%s", out.name, out.got)
				}
			}
		})
	}
}

// TestHelpStatesEnvironment: edge -h states the rule for settings in the
// environment.
func TestHelpStatesEnvironment(t *testing.T) {
	code, _, stderr := runEdge("-h")
	if code != 0 {
		t.Fatalf("edge -h: exit code %d", code)
	}
	for _, want := range []string{"EDGE_", "EDGE_LISTEN", "EDGE_CLUSTER_REDIS_PASSWORD", "upper", "comma-separated", "over the file"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("edge -h does not say %q:\n%s", want, stderr)
		}
	}
}

// TestEnvironmentAtRunTime: a running edge takes the environment's
// settings over the file's at start and at every reload, /v1/config names
// their variables in sources and shows no secret of theirs, and a
// variable that names no setting is warned of at start and at each
// reload.
func TestEnvironmentAtRunTime(t *testing.T) {
	t.Setenv("EDGE_POP", "fra-1")
	t.Setenv("EDGE_CLUSTER_REDIS_PASSWORD", longSecret)
	t.Setenv("EDGE_FOO", "1")
	path := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(path, []byte(configWithLimit(5, "pop: from-the-file\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	e := startEdge(t, path)
	defer e.stop()
	type view struct {
		Pop     string            `json:"pop"`
		Sources map[string]string `json:"sources"`
		Domains []struct {
			Rules []struct {
				Limit int `json:"limit"`
			} `json:"rules"`
		} `json:"domains"`
	}
	get := func() view {
		t.Helper()
		code, body := e.adminGet("/v1/config")
		var v view
		if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil {
			t.Fatalf("/v1/config: %d %v\n%s", code, err, body)
		}
		if strings.Contains(body, longSecret) {
			t.Errorf("/v1/config shows the secret:\n%s", body)
		}
		return v
	}
	wantSources := map[string]string{"pop": "env EDGE_POP", "cluster.redis.password": "env EDGE_CLUSTER_REDIS_PASSWORD"}
	check := func(when string, limit int) {
		t.Helper()
		v := get()
		if v.Pop != "fra-1" || len(v.Domains) != 1 || v.Domains[0].Rules[0].Limit != limit {
			t.Errorf("%s: got pop %q and %+v, want fra-1 and limit %d", when, v.Pop, v.Domains, limit)
		}
		if len(v.Sources) != len(wantSources) {
			t.Errorf("%s: got sources %v, want %v", when, v.Sources, wantSources)
		}
		for k, want := range wantSources {
			if got := v.Sources[k]; got != want {
				t.Errorf("%s: got sources[%q] %q, want %q", when, k, got, want)
			}
		}
	}
	check("at start", 5)
	warning := `msg="environment variable ignored" warning="EDGE_FOO: names no setting; ignored"`
	if n := strings.Count(e.log.String(), warning); n != 1 {
		t.Errorf("at start: warned %d times of EDGE_FOO, want once:\n%s", n, e.log.String())
	}

	h := loadedHash(t, e)
	if err := os.WriteFile(path, []byte(configWithLimit(7, "pop: still-the-file\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the reload", func() bool { return loadedHash(t, e) != h })
	check("after a reload", 7)
	if n := strings.Count(e.log.String(), warning); n != 2 {
		t.Errorf("after a reload: warned %d times of EDGE_FOO, want twice:\n%s", n, e.log.String())
	}
	if strings.Contains(e.log.String(), longSecret) {
		t.Errorf("the log shows the secret:\n%s", e.log.String())
	}
}
