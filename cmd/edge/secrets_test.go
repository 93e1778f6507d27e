package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// longSecret is a secret long enough to be replaced wherever it appears.
const longSecret = "SuperSecretValue"

// TestV1ConfigShowsNoSecret: /v1/config and the reload log show no secret
// of 6 bytes or more, neither where an alias copies it into a running
// setting nor in the problems of a reload that failed.
func TestV1ConfigShowsNoSecret(t *testing.T) {
	t.Setenv("EDGE_ADMIN_TOKEN", "")
	const token = "t0ken-" + longSecret
	a := newAdminUnderTest(t, siteConfig("admin_token: &t "+token+"\npop: *t\nadmin_hosts: [*t]\n"), true)
	code, body := a.do("GET", "", "/v1/config", token)
	var v struct {
		Pop         string   `json:"pop"`
		AdminHosts  []string `json:"admin_hosts"`
		ReloadError string   `json:"last_reload_error"`
	}
	if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil {
		t.Fatalf("/v1/config: %d %v\n%s", code, err, body)
	}
	if v.Pop != "[redacted]" || len(v.AdminHosts) != 1 || v.AdminHosts[0] != "[redacted]" {
		t.Errorf("/v1/config pop and admin_hosts: got %q and %q, want [redacted] for both", v.Pop, v.AdminHosts)
	}
	if got := a.proxy.Table().AdminHosts; got[0] != strings.ToLower(token) {
		t.Errorf("showing the view changed the running admin_hosts: got %q", got)
	}

	a.reload(siteConfig("admin_token: &t " + token + "\nlog: {level: *t}\n"))
	code, body = a.do("GET", "", "/v1/config", token)
	if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil {
		t.Fatalf("/v1/config: %d %v\n%s", code, err, body)
	}
	want := `log.level: must be debug, info, warn or error, got "[redacted]"`
	if !strings.Contains(v.ReloadError, want) {
		t.Errorf("/v1/config last_reload_error: got %q, want it to hold %q", v.ReloadError, want)
	}
	if strings.Contains(body, longSecret) {
		t.Errorf("/v1/config shows the secret:\n%s", body)
	}
	if log := a.log.String(); !strings.Contains(log, "configuration reload failed") || strings.Contains(log, longSecret) {
		t.Errorf("the log lacks the failed reload or shows the secret:\n%s", log)
	}
}

// TestWeakSecretWarned: edge warns at -check, at start and on each reload that a
// secret shorter than 6 bytes is weak, naming its key and not its value;
// such a secret is still masked where its key stands.
func TestWeakSecretWarned(t *testing.T) {
	t.Setenv("EDGE_ADMIN_TOKEN", "")
	t.Setenv("EDGE_CHECK_TOKEN", "")
	const weak = "Zq9x"
	path := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(path, []byte(configWithLimit(5, "admin_token: "+weak+"\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-check", "-config", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("edge -check: exit code %d, want 0\n%s", code, stderr.String())
	}
	if got, want := stdout.String(), "\nwarning: admin_token: weak secret: shorter than 6 bytes"; !strings.Contains(got, want) || strings.Contains(got, weak) {
		t.Errorf("edge -check printed:\n%s\nwant it to hold %q and not the value", got, want)
	}

	e := startEdge(t, path)
	e.stop()
	log := e.log.String()
	if !strings.Contains(log, "weak secret") || !strings.Contains(log, "admin_token") {
		t.Errorf("the log lacks a warning naming admin_token:\n%s", log)
	}
	if strings.Contains(log, weak) {
		t.Errorf("the log shows the weak secret:\n%s", log)
	}

	a := newAdminUnderTest(t, siteConfig(""), true)
	a.reload(siteConfig("check: {listen: \"127.0.0.1:0\", token: " + weak + "}\n"))
	if log := a.log.String(); !strings.Contains(log, "weak secret") || !strings.Contains(log, "check.token") || strings.Contains(log, weak) {
		t.Errorf("after a reload, the log lacks a warning naming check.token, or shows the value:\n%s", log)
	}
}
