package proxy

import (
	"testing"

	"github.com/edgerate/edge/rules"
)

func TestHostRouting(t *testing.T) {
	exact, _ := newOrigin(t, "exact")
	wild, _ := newOrigin(t, "wild")
	all, _ := newOrigin(t, "all")
	cfg := rules.Config{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1",
		Domains: []rules.DomainConfig{
			{Hosts: []string{"*.example.com"}, Origin: wild.URL},
			{Hosts: []string{"api.example.com"}, Origin: exact.URL},
			{Hosts: []string{"static.test"}, Respond: &rules.ResponseConfig{Status: 203, Body: "static"}},
		},
	}
	e := newEnv(t, cfg)
	tests := []struct {
		host       string
		wantStatus int
		wantBody   string
	}{
		{"api.example.com", 200, "origin:exact"},
		{"API.EXAMPLE.COM:8080", 200, "origin:exact"},
		{"a.b.example.com", 200, "origin:wild"},
		{"example.com", 421, ""},
		{"static.test", 203, "static"},
		{"unknown.test", 421, ""},
		{"bad host", 400, ""},
	}
	for _, tt := range tests {
		resp, body := e.get(tt.host, "/")
		if resp.StatusCode != tt.wantStatus || (tt.wantBody != "" && body != tt.wantBody) {
			t.Errorf("Host %q: got %d %q, want %d %q", tt.host, resp.StatusCode, body, tt.wantStatus, tt.wantBody)
		}
	}
	// A catch-all takes what nothing else claims.
	cfg.Domains = append(cfg.Domains, rules.DomainConfig{Hosts: []string{"*"}, Origin: all.URL})
	e = newEnv(t, cfg)
	if _, body := e.get("unknown.test", "/"); body != "origin:all" {
		t.Errorf("catch-all: got %q, want origin:all", body)
	}
	if _, body := e.get("api.example.com", "/"); body != "origin:exact" {
		t.Errorf("exact with catch-all present: got %q, want origin:exact", body)
	}
}
