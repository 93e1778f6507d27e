package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const keysConfig = `
domains:
  - name: api
    hosts: [api.example.com]
    origin: http://127.0.0.1:9
    api_keys: {from: "header:X-API-Key", file: keys.yaml, required: true}
    rules:
      - name: rate
        limit: 10
        period: 1m
        key: ["header:X-API-Key"]
        plans: {gold: {limit: 100}}
`

// TestKeyFile: the api_keys file is read relative to the configuration,
// and every way it can be wrong is a problem of the configuration that
// never quotes a key.
func TestKeyFile(t *testing.T) {
	tests := []struct {
		name, keys, want string
	}{
		{"good", "sk-live-0123: gold\nsk-live-4567: free\n", ""},
		{"empty", "", ""},
		{"not YAML", "sk-live-0123: gold\n  sk-live-4567: [\n", "keys.yaml is not YAML (line"},
		{"not a mapping", "- sk-live-0123\n", "must be a mapping of API key to plan name"},
		{"a plan that is not a name", "sk-live-0123: {a: b}\n", "line 1: the plan must be a name"},
		{"a key twice", "sk-live-0123: gold\nsk-live-0123: free\n", "line 2: the key is listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "edge.yaml")
			if err := os.WriteFile(path, []byte(keysConfig), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "keys.yaml"), []byte(tt.keys), 0o600); err != nil {
				t.Fatal(err)
			}
			table, _, err := Load(path)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if n := table.Domains[0].APIKeys.Keys(); n != strings.Count(tt.keys, "\n") {
					t.Errorf("keys: got %d", n)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "domains[0] (api).api_keys.file: ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load: got %v, want a problem at api_keys.file saying %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "sk-live") {
				t.Errorf("the problem quotes a key: %v", err)
			}
		})
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(path, []byte(keysConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(path); err == nil || !strings.Contains(err.Error(), "api_keys.file: cannot be read") {
		t.Errorf("Load without the key file: got %v, want api_keys.file: cannot be read", err)
	}
}
