package replay

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
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
		// Paths are decoded as net/http decodes URL.Path, then cleaned;
		// the screen refuses some before any rule.
		{"percent-encoded letter", "203.0.113.9", "GET", "api.example", "/v1/%79", "k", "203.0.113.9|/v1/y|api.example|k"},
		{"percent-encoded prefix", "203.0.113.9", "GET", "api.example", "/%76%31/a", "k", "203.0.113.9|/v1/a|api.example|k"},
		// Decoded once to the text "%2F", which KeyText escapes back.
		{"double-encoded slash", "203.0.113.9", "GET", "api.example", "/v1/%252F", "k", "203.0.113.9|/v1/%252F|api.example|k"},
		{"encoded slash", "203.0.113.9", "GET", "api.example", "/v1%2Fa", "k", screened},
		{"encoded backslash", "203.0.113.9", "GET", "api.example", "/v1/%5cb", "k", screened},
		{"invalid escape", "203.0.113.9", "GET", "api.example", "/v1/%zz", "k", screened},
		{"truncated escape", "203.0.113.9", "GET", "api.example", "/v1/a%7", "k", screened},
		{"dot segment", "203.0.113.9", "GET", "api.example", "/v2/../v1/a", "k", screened},
		{"encoded dot segment", "203.0.113.9", "GET", "api.example", "/v1/%2e%2e/v1/a", "k", screened},
		{"dot segment with params", "203.0.113.9", "GET", "api.example", "/v1/..;x/a", "k", screened},
		{"encoded control byte", "203.0.113.9", "GET", "api.example", "/v1/a%0A", "k", screened},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotProxy := proxyKey(t, table, tt.client, tt.method, tt.host, tt.path, tt.apiKey)
			rec := trace.Record{Source: tt.client, Method: tt.method, Host: tt.host, Path: tt.path}
			if tt.apiKey != "" {
				rec.Headers = map[string]string{"X-Api-Key": tt.apiKey}
			}
			gotReplay := ""
			kept, st := Screen([]trace.Record{rec})
			if len(kept) == 0 && st.Screened == 1 && st.First != nil {
				gotReplay = screened
			}
			// LogInputs leaves out what Screen drops.
			for _, in := range LogInputs([]trace.Record{rec}, lr, table.IPv6Prefix) {
				if in.Sources == 1 {
					if gotReplay != "" {
						t.Errorf("LogInputs: counted a screened request as %q", in.srcName(0))
					}
					gotReplay = in.srcName(0)
				}
			}
			if gotProxy != tt.want || gotReplay != tt.want {
				t.Errorf("got proxy %q, replay %q, want %q for both", gotProxy, gotReplay, tt.want)
			}
		})
	}
}

// screened stands for the key of a request the proxy refuses before any
// rule: net/http for an invalid escape, the screen for the rest.
const screened = "(screened)"

// proxyKey sends one request through a new proxy and returns the key its
// rule counted it by, "" if no rule did, screened if it refused it with
// 400 before any rule. The request is read from its bytes, as net/http's
// server reads it, so that the path is decoded as it is in production.
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
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")))
	if err != nil {
		return screened // net/http's server answers 400
	}
	r.RemoteAddr = net.JoinHostPort(client, "40000")
	if apiKey != "" {
		r.Header.Set("X-Api-Key", apiKey)
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r)
	if w.Code == http.StatusBadRequest {
		return screened
	}
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

// TestEncodedPrefix checks that a rule's path_prefix matches a logged
// path that spells it percent-encoded, as the proxy matches the request.
func TestEncodedPrefix(t *testing.T) {
	table, err := rules.Compile(rules.Config{Domains: []rules.DomainConfig{{
		Name: "api", Hosts: []string{"api.example"}, Respond: &rules.ResponseConfig{Body: "ok"},
		Rules: []rules.RuleConfig{{
			Name: "y", Limit: 1, Period: time.Minute,
			Match: &rules.MatchConfig{PathPrefix: "/v1/y"},
		}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	recs := []trace.Record{
		{Time: 1_000_000, Source: "192.0.2.1", Method: "GET", Path: "/v1/%79"},
		{Time: 2_000_000, Source: "192.0.2.1", Method: "GET", Path: "/v1/%79"},
	}
	ins := LogInputs(recs, TableRules(table, ""), table.IPv6Prefix)
	if len(ins) != 1 || ins[0].Sources != 1 {
		t.Fatalf("LogInputs: got %d inputs, want 1 with 1 source", len(ins))
	}
	r, err := Run(t.Context(), ins[0], Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 2 || r.CountAll.ExactDenied != 1 {
		t.Errorf("got %d requests, %d denied exactly, want 2 and 1 (the second, as the proxy refuses it)", r.Requests, r.CountAll.ExactDenied)
	}
}

// TestSkipsUnrecordedKeys: rules keyed by a cookie, a token's claim or a
// query parameter are left out of a replay, with the reason.
func TestSkipsUnrecordedKeys(t *testing.T) {
	tab, err := rules.Compile(rules.Config{Origin: "http://o.internal", Domains: []rules.DomainConfig{{
		Name: "api", Hosts: []string{"api.example"}, JWT: &rules.JWTConfig{KeysFile: "jwks.json"}, Rules: []rules.RuleConfig{
			{Name: "c", Limit: 1, Period: time.Second, Key: []string{"cookie:s"}},
			{Name: "j", Limit: 1, Period: time.Second, Key: []string{"jwt:sub"}},
			{Name: "q", Limit: 1, Period: time.Second, Key: []string{"query:k"}},
			{Name: "ip", Limit: 1, Period: time.Second},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	got := TableSkips(tab, "")
	want := []Skip{
		{"api/c", "keyed by cookie s, which an access log does not record"},
		{"api/j", "keyed by jwt:sub, a claim of a verified token, which an access log does not record"},
		{"api/q", "keyed by query parameter k, and an access log's paths are read without their query"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := ParseKeyList("ip,cookie:s"); err == nil {
		t.Error("ParseKeyList accepts cookie:s, which no log records")
	}
}
