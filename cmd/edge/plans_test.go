package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
)

// TestAPIKeyFileReload: the api_keys file is read again when it changes,
// without the configuration changing; a broken file fails the reload and
// keeps the running mapping, and no message shows a key.
func TestAPIKeyFileReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "edge.yaml")
	keys := filepath.Join(dir, "keys.yaml")
	must(t, os.WriteFile(keys, []byte("sk-one-secret: gold\n"), 0o600))
	must(t, os.WriteFile(path, []byte(fmt.Sprintf(`
listen: %q
admin_listen: %q
domains:
  - name: site
    hosts: ["*"]
    respond: {body: "ok"}
    api_keys: {from: "header:X-API-Key", file: keys.yaml, required: true}
    rules:
      - name: rate
        limit: 1
        period: 720h
        key: ["header:X-API-Key"]
        plans: {gold: {limit: 2}}
`, publicAnyPort, adminAnyPort)), 0o644))
	e := startEdge(t, path)
	get := func(key string) int {
		req, _ := http.NewRequest("GET", "http://"+e.public+"/", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := []int{get("sk-one-secret"), get("sk-one-secret"), get("sk-one-secret"), get("sk-two-secret")}; fmt.Sprint(got) != "[200 200 429 403]" {
		t.Fatalf("before: got %v, want [200 200 429 403]", got)
	}
	reloads := func() int { return strings.Count(e.log.String(), "configuration reloaded") }

	// The second key is added: the file alone changed.
	before := reloads()
	must(t, os.WriteFile(keys, []byte("sk-one-secret: gold\nsk-two-secret: gold\n"), 0o600))
	wait.For(t, 10*time.Second, "reload after the key file changed", func() bool { return reloads() > before })
	if got := get("sk-two-secret"); got != 200 {
		t.Errorf("the added key: got %d, want 200", got)
	}

	// A broken file: the reload fails, the mapping stays.
	must(t, os.WriteFile(keys, []byte("sk-one-secret: gold\nsk-three-secret: [\n"), 0o600))
	wait.For(t, 10*time.Second, "the failed reload to be reported", func() bool {
		_, body := e.adminGet("/readyz")
		return strings.Contains(body, "last reload failed")
	})
	if got := get("sk-two-secret"); got != 200 {
		t.Errorf("after a broken file, a key of the running mapping: got %d, want 200", got)
	}
	_, body := e.adminGet("/v1/config")
	if !strings.Contains(body, "api_keys.file") {
		t.Errorf("/v1/config does not name the problem:\n%s", body)
	}
	if strings.Contains(body, "-secret") || strings.Contains(e.log.String(), "-secret") {
		t.Errorf("a key shows in /v1/config or the log")
	}
	if code := e.stop(); code != 0 {
		t.Errorf("exit code %d", code)
	}
}
