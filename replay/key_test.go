package replay

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/edgerate/edge/proxy"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/trace"
)

// TestKeyAsProxy sends the same requests through the proxy and through
// replay, and checks that both match the same ones and key each the same:
// the proxy's key as its admin API lists the rule's top talkers, replay's
// as it names the source.
func TestKeyAsProxy(t *testing.T) {
	table, err := rules.Compile(rules.Config{Domains: []rules.DomainConfig{{
		Name:    "api",
		Hosts:   []string{"api.example"},
		Respond: &rules.ResponseConfig{Body: "ok"},
		Rules: []rules.RuleConfig{{
			Name: "reads", Limit: 1, Period: time.Minute,
			Match: &rules.MatchConfig{PathPrefix: "/v1/", Methods: []string{"GET"}},
			Key:   []string{"ip", "path", "host", "header:X-Api-Key"},
		}, {
			// Not replayed: a log has no durations.
			Name: "parallel", Limit: 1, Algorithm: "concurrency",
		}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if all := TableRules(table, ""); len(all) != 1 {
		t.Fatalf("TableRules: got %d rules, want 1 (a concurrency rule is not replayed)", len(all))
	}
	lr := TableRules(table, "api/reads")
	if len(lr) != 1 {
		t.Fatalf("TableRules: got %d rules, want 1", len(lr))
	}
	tests := []struct {
		name       string
		client     string // an address, as the log names it
		method     string
		host, path string
		apiKey     string // "" for none
		want       string // the key; "" when the rule does not match
	}{
		{"plain", "203.0.113.9", "GET", "api.example", "/v1/a", "k", "203.0.113.9|/v1/a|api.example|k"},
		{"params cut", "203.0.113.9", "GET", "api.example", "/v1;x=1/a", "k", "203.0.113.9|/v1/a|api.example|k"},
		{"params hide no prefix", "203.0.113.9", "GET", "api.example", "/v2;/v1/a", "k", ""},
		{"slashes merged", "203.0.113.9", "GET", "api.example", "//v1//a/", "k", "203.0.113.9|/v1/a/|api.example|k"},
		{"other prefix", "203.0.113.9", "GET", "api.example", "/v2/a", "k", ""},
		{"other method", "203.0.113.9", "POST", "api.example", "/v1/a", "k", ""},
		{"ipv6 by its /64", "2001:db8:1:2::7", "GET", "api.example", "/v1/a", "k", "2001:db8:1:2::/64|/v1/a|api.example|k"},
		{"ipv4-mapped", "::ffff:192.0.2.1", "GET", "api.example", "/v1/a", "k", "192.0.2.1|/v1/a|api.example|k"},
		{"host normalised", "203.0.113.9", "GET", "API.Example.:8080", "/v1/a", "k", "203.0.113.9|/v1/a|api.example|k"},
		{"missing header", "203.0.113.9", "GET", "api.example", "/v1/a", "", "203.0.113.9|/v1/a|api.example|-203.0.113.9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotProxy := proxyKey(t, table, tt.client, tt.method, tt.host, tt.path, tt.apiKey)
			rec := trace.Record{Source: tt.client, Method: tt.method, Host: tt.host, Path: tt.path}
			if tt.apiKey != "" {
				rec.Headers = map[string]string{"X-Api-Key": tt.apiKey}
			}
			gotReplay := ""
			for _, in := range LogInputs([]trace.Record{rec}, lr, table.IPv6Prefix) {
				if in.Sources == 1 {
					gotReplay = in.srcName(0)
				}
			}
			if gotProxy != tt.want || gotReplay != tt.want {
				t.Errorf("got proxy %q, replay %q, want %q for both", gotProxy, gotReplay, tt.want)
			}
		})
	}
}

// proxyKey sends one request through a new proxy and returns the key its
// rule counted it by, "" if no rule did.
func proxyKey(t *testing.T, table *rules.Table, client, method, host, path, apiKey string) string {
	t.Helper()
	now := time.Unix(1_800_000_000, 0)
	p, err := proxy.New(proxy.Options{Table: table, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	r := httptest.NewRequest(method, "http://placeholder"+path, nil)
	r.Host = host
	r.RemoteAddr = net.JoinHostPort(client, "40000")
	if apiKey != "" {
		r.Header.Set("X-Api-Key", apiKey)
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("proxy answered %d %q", w.Code, w.Body.String())
	}
	w = httptest.NewRecorder()
	p.AdminHandler().ServeHTTP(w, httptest.NewRequest("GET", "/v1/top/api/reads", nil))
	var top []struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &top); err != nil || w.Code != http.StatusOK {
		t.Fatalf("/v1/top: %d %v\n%s", w.Code, err, w.Body.String())
	}
	switch len(top) {
	case 0:
		return ""
	case 1:
		return top[0].Key
	}
	t.Fatalf("/v1/top: %d keys for one request", len(top))
	return ""
}
