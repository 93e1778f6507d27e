package proxy

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/edgerate/edge/rules"
)

func TestBlockedResponse(t *testing.T) {
	origin, got := newOrigin(t, "a")
	e := newEnv(t, oneDomain(origin.URL, rule("per-ip", 3, time.Minute)))
	e.clock.Advance(15 * time.Second)
	for i := range 3 {
		resp, _ := e.get("api.example.com", "/")
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: got %d, want 200", i, resp.StatusCode)
		}
		if resp.Header.Get("Ratelimit") != "" || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("request %d: headers: blocked (the default) sent fields on an allowed response", i)
		}
	}
	resp, body := e.get("api.example.com", "/")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("4th request: got %d, want 429", resp.StatusCode)
	}
	if n := len(got()); n != 3 {
		t.Errorf("origin saw %d requests, want 3", n)
	}
	// curr = 3 at 15s into the minute: the estimate 3×(60−e)/60 falls below
	// 3 just after the next minute starts, 45s on: rounded up, 46s.
	want := map[string]string{
		"Retry-After":           "46",
		"X-Ratelimit-Limit":     "3",
		"X-Ratelimit-Remaining": "0",
		"X-Ratelimit-Reset":     "46",
		"Ratelimit-Policy":      `"per-ip";q=3;w=60`,
		"Ratelimit":             `"per-ip";r=0;t=46`,
		"Content-Type":          "text/plain; charset=utf-8",
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if body != "rate limited: retry in 46s\n" {
		t.Errorf("body = %q", body)
	}
	for _, f := range []string{"Ratelimit", "Ratelimit-Policy"} {
		if _, err := httpsfv.UnmarshalList(resp.Header.Values(f)); err != nil {
			t.Errorf("%s is not a valid structured field list: %v", f, err)
		}
	}
	// JSON for clients that accept it.
	resp, body = e.do("GET", "api.example.com", "/", map[string]string{"Accept": "application/json, text/plain;q=0.5"}, "")
	var j struct {
		Error      string `json:"error"`
		Rule       string `json:"rule"`
		RetryAfter int    `json:"retry_after"`
	}
	if err := json.Unmarshal([]byte(body), &j); err != nil || j.Error != "rate_limited" || j.Rule != "per-ip" || j.RetryAfter != 46 {
		t.Errorf("JSON body = %q (%v), want rate_limited per-ip 46", body, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("JSON Content-Type = %q", ct)
	}
	// Just before the computed time still blocked, at it allowed.
	e.clock.Advance(45 * time.Second)
	if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != 429 {
		t.Errorf("at 45s (the boundary, estimate exactly 3): got %d, want 429", resp.StatusCode)
	}
	e.clock.Advance(time.Second)
	if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != 200 {
		t.Errorf("at 46s (Retry-After): got %d, want 200", resp.StatusCode)
	}
}

func TestCustomBlockResponse(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	r := rule("login", 1, time.Minute)
	r.BlockResponse = &rules.ResponseConfig{Status: 420, Body: `{"slow":"down"}`, ContentType: "application/json"}
	e := newEnv(t, oneDomain(origin.URL, r))
	e.get("api.example.com", "/")
	resp, body := e.get("api.example.com", "/")
	if resp.StatusCode != 420 || body != `{"slow":"down"}` || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("got %d %q %q, want the configured response", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("custom block response lacks Retry-After")
	}
}
