package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgerate/edge/configs"
)

// TestLoad: Load reads the embedded default for "", a file otherwise, and
// returns the content's Hash; a file it cannot read is an error that says
// so, and a file with problems returns no table.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("listen_port: 80\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		path     string
		wantHash string
		err      string // a substring of the error; "" for none
	}{
		{"embedded default", "", Hash(configs.Default), ""},
		{"missing file", filepath.Join(dir, "missing.yaml"), "", "reading config: "},
		{"problems", bad, Hash([]byte("listen_port: 80\n")), "listen_port: unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, hash, err := Load(tt.path)
			if hash != tt.wantHash {
				t.Errorf("got hash %q, want %q", hash, tt.wantHash)
			}
			if tt.err == "" {
				if err != nil || table == nil {
					t.Fatalf("got %v, table %v; want a table", err, table)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) || table != nil {
				t.Errorf("got %v, table %v; want no table and an error holding %q", err, table, tt.err)
			}
		})
	}
	if h := Hash([]byte("x")); len(h) != 64 || h != Hash([]byte("x")) || h == Hash([]byte("y")) {
		t.Errorf("Hash: got %q for x", h)
	}
}
