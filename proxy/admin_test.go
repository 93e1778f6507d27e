package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

func TestAdminAPI(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	penalty := rule("per-ip", 2, time.Minute)
	penalty.MitigationTimeout = 10 * time.Minute
	byKey := rule("per-key", 100, time.Minute)
	byKey.Key = []string{"header:X-Api-Key", "ip"}
	cfg := oneDomain(origin.URL, penalty, byKey)
	cfg.ClientIP.TrustedProxies = []string{"127.0.0.1/32"}
	e := newEnv(t, cfg)
	admin := httptest.NewServer(e.proxy.AdminHandler())
	t.Cleanup(admin.Close)
	call := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, admin.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	send := func(xff string, n int) {
		for range n {
			e.do("GET", "api.example.com", "/", map[string]string{"X-Forwarded-For": xff, "X-Api-Key": "k1"}, "")
		}
	}
	send("203.0.113.7", 5)  // 2 allowed, then mitigated
	send("198.51.100.1", 1) // light
	send("2001:db8:1:2::7", 3)

	code, body := call("GET", "/v1/keys/api.example.com/per-ip/203.0.113.7")
	var ks keyState
	if err := json.Unmarshal([]byte(body), &ks); code != 200 || err != nil {
		t.Fatalf("GET key: %d %s", code, body)
	}
	if ks.Current != 2 || ks.Remaining != 0 || ks.MitigatedUntil == nil || ks.RetryAfter != 600 {
		t.Errorf("key state = %+v, want 2 counted, mitigated for 600s", ks)
	}
	// IPv6 clients are keyed by their /64: any address inside it, or the
	// prefix, names the key.
	for _, k := range []string{"2001:db8:1:2::/64", "2001:db8:1:2::99"} {
		if code, body := call("GET", "/v1/keys/api.example.com/per-ip/"+k); code != 200 || !strings.Contains(body, `"current": 2`) {
			t.Errorf("GET IPv6 key %s: %d %s", k, code, body)
		}
	}
	if code, _ := call("GET", "/v1/keys/api.example.com/per-key/k1|203.0.113.7"); code != 200 {
		t.Errorf("GET two-part key: %d", code)
	}

	code, body = call("GET", "/v1/top/api.example.com/per-ip?n=2")
	var top []keyState
	if err := json.Unmarshal([]byte(body), &top); code != 200 || err != nil || len(top) != 2 {
		t.Fatalf("GET top: %d %s", code, body)
	}
	if top[0].Key != "203.0.113.7" || top[0].Count != 5 || top[0].Blocked != 3 || top[1].Key != "2001:db8:1:2::/64" {
		t.Errorf("top = %+v, want 203.0.113.7 (5 seen, 3 blocked) then 2001:db8:1:2::/64", top)
	}

	if code, _ := call("DELETE", "/v1/keys/api.example.com/per-ip/203.0.113.7"); code != 204 {
		t.Errorf("DELETE key: %d, want 204", code)
	}
	if resp, _ := e.do("GET", "api.example.com", "/", map[string]string{"X-Forwarded-For": "203.0.113.7"}, ""); resp.StatusCode != 200 {
		t.Errorf("after DELETE the client is still refused: %d", resp.StatusCode)
	}

	errorCases := []struct {
		method, path string
		want         int
	}{
		{"GET", "/v1/keys/nope.example/per-ip/1.2.3.4", 404},
		{"GET", "/v1/keys/api.example.com/nope/1.2.3.4", 404},
		{"GET", "/v1/keys/api.example.com/per-ip/192.0.2.1", 404}, // never seen
		{"DELETE", "/v1/keys/api.example.com/per-ip/192.0.2.1", 404},
		{"GET", "/v1/keys/api.example.com/per-ip/not-an-ip", 400},
		{"GET", "/v1/keys/api.example.com/per-key/only-one-part", 400},
		{"GET", "/v1/top/api.example.com/per-ip?n=0", 400},
		{"GET", "/v1/top/api.example.com/per-ip?n=x", 400},
		{"POST", "/v1/config", 405},
		{"GET", "/v1/nothing", 404},
	}
	for _, c := range errorCases {
		if code, body := call(c.method, c.path); code != c.want || !strings.Contains(body, `"error"`) {
			t.Errorf("%s %s: got %d %s, want %d with a JSON error", c.method, c.path, code, body, c.want)
		}
	}

	code, body = call("GET", "/v1/config")
	var cv configView
	if err := json.Unmarshal([]byte(body), &cv); code != 200 || err != nil {
		t.Fatalf("GET config: %d %v", code, err)
	}
	if len(cv.Domains) != 1 || len(cv.Domains[0].Rules) != 2 || !slices.Equal(cv.Domains[0].Rules[1].Key, []string{"header:X-Api-Key", "ip"}) {
		t.Errorf("config view = %+v", cv.Domains)
	}
	if cv.Hash != "" && !strings.Contains(body, `"last_load"`) {
		t.Errorf("config view lacks last_load")
	}
}

// TestAdminConfigRLS: /v1/config shows the rls section when the rate
// limit service is on, and nothing of it when it is off.
func TestAdminConfigRLS(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	for _, on := range []bool{false, true} {
		cfg := oneDomain(origin.URL, rule("r", 1, time.Minute))
		if on {
			cfg.RLS = rules.RLSConfig{Listen: "127.0.0.1:8081", Config: []string{"ratelimit/*.yaml"}, Algorithm: "fixed_window"}
		}
		e := newEnv(t, cfg)
		rec := httptest.NewRecorder()
		e.proxy.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/config", nil))
		var cv configView
		if err := json.Unmarshal(rec.Body.Bytes(), &cv); err != nil {
			t.Fatal(err)
		}
		switch {
		case !on && cv.RLS != nil:
			t.Errorf("off: got %+v, want no rls", cv.RLS)
		case on && (cv.RLS == nil || cv.RLS.Listen != "127.0.0.1:8081" || cv.RLS.Algorithm != "fixed_window" ||
			!slices.Equal(cv.RLS.Config, []string{"ratelimit/*.yaml"})):
			t.Errorf("on: got %+v", cv.RLS)
		}
	}
}

// TestAdminKeyText: a key whose header values hold what key text uses as
// structure ('|', ", ", a leading "-") is listed in the top talkers under
// a text of its own, with its own counters, and a reset through
// /v1/keys/... of that text, percent-encoded once more as the status page
// encodes it, forgets that key and not the neighbour whose text it would
// otherwise share.
func TestAdminKeyText(t *testing.T) {
	type request struct {
		client string
		header http.Header
	}
	tests := []struct {
		name                string
		hostile, neighbour  request
		hostText, neighText string
	}{
		{"pipe",
			request{"203.0.113.1", http.Header{"X-User": {"a|b"}, "X-Team": {"c"}}},
			request{"203.0.113.2", http.Header{"X-User": {"a"}, "X-Team": {"b|c"}}},
			"a%7Cb|c", "a|b%7Cc"},
		{"comma",
			request{"203.0.113.1", http.Header{"X-User": {"a, b"}, "X-Team": {"t"}}},
			request{"203.0.113.2", http.Header{"X-User": {"a", "b"}, "X-Team": {"t"}}},
			"a%2C b|t", "a, b|t"},
		{"leading dash",
			request{"203.0.113.1", http.Header{"X-User": {"-1.2.3.4"}, "X-Team": {"t"}}},
			request{"1.2.3.4", http.Header{"X-Team": {"t"}}},
			"%2D1.2.3.4|t", "-1.2.3.4|t"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			origin, _ := newOrigin(t, "a")
			byUser := rule("by-user", 4, time.Minute)
			byUser.Key = []string{"header:X-User", "header:X-Team"}
			cfg := oneDomain(origin.URL, byUser)
			cfg.ClientIP.TrustedProxies = []string{"127.0.0.1/32"}
			e := newEnv(t, cfg)
			admin := httptest.NewServer(e.proxy.AdminHandler())
			t.Cleanup(admin.Close)
			send := func(r request) int {
				t.Helper()
				req, _ := http.NewRequest("GET", e.srv.URL+"/", nil)
				req.Host = "api.example.com"
				req.Header = r.header.Clone()
				req.Header.Set("X-Forwarded-For", r.client)
				resp, err := e.srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			call := func(method, text string) (int, keyState) {
				t.Helper()
				req, _ := http.NewRequest(method, admin.URL+"/v1/keys/api.example.com/by-user/"+url.PathEscape(text), nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var ks keyState
				json.NewDecoder(resp.Body).Decode(&ks)
				return resp.StatusCode, ks
			}
			for range 7 { // 4 allowed, 3 refused
				send(tt.hostile)
			}
			for range 3 {
				send(tt.neighbour)
			}

			rec := httptest.NewRecorder()
			e.proxy.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/top/api.example.com/by-user", nil))
			var top []keyState
			if err := json.Unmarshal(rec.Body.Bytes(), &top); err != nil {
				t.Fatalf("GET top: %v %s", err, rec.Body)
			}
			// Seen counts requests from the second on: top talkers observe
			// a key once it has used half its limit.
			got := map[string]keyState{}
			for _, k := range top {
				got[k.Key] = k
			}
			if h, n := got[tt.hostText], got[tt.neighText]; len(top) != 2 ||
				h.Count != 6 || h.Blocked != 3 || h.Current != 4 || n.Count != 2 || n.Blocked != 0 || n.Current != 3 {
				t.Fatalf("top = %+v, want %q (6 seen, 3 blocked, 4 counted) and %q (2 seen, none blocked, 3 counted)",
					top, tt.hostText, tt.neighText)
			}

			if code, _ := call("DELETE", tt.hostText); code != http.StatusNoContent {
				t.Fatalf("DELETE %q: %d, want 204", tt.hostText, code)
			}
			if code, _ := call("GET", tt.hostText); code != http.StatusNotFound {
				t.Errorf("GET %q after its reset: %d, want 404 (not tracked)", tt.hostText, code)
			}
			if code, ks := call("GET", tt.neighText); code != http.StatusOK || ks.Current != 3 {
				t.Errorf("GET %q after the other's reset: %d, %d counted, want 200 and still 3", tt.neighText, code, ks.Current)
			}
			if code := send(tt.hostile); code != http.StatusOK {
				t.Errorf("the reset key's next request: %d, want 200", code)
			}
		})
	}
}

// TestAdminConfigAfterFailedReload: after a failed reload GET /v1/config
// shows why, at its top level: last_reload_ok, last_reload_error (every
// problem on its line) and last_reload_problems, beside config_path; and
// after a good reload, that it succeeded.
func TestAdminConfigAfterFailedReload(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	e := newEnv(t, oneDomain(origin.URL, rule("r", 1, time.Minute)))
	get := func() map[string]any {
		t.Helper()
		rec := httptest.NewRecorder()
		e.proxy.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/config", nil))
		var v map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); rec.Code != 200 || err != nil {
			t.Fatalf("GET /v1/config: %d %v\n%s", rec.Code, err, rec.Body)
		}
		return v
	}
	bad := oneDomain(origin.URL, rule("r", 1, 0), rule("s", -1, time.Minute))
	_, err := rules.Compile(bad)
	if err == nil {
		t.Fatal("the bad configuration compiled")
	}
	e.proxy.ReloadFailed(err)
	v := get()
	if got, ok := v["last_reload_ok"].(bool); !ok || got {
		t.Errorf("last_reload_ok: got %v, want false", v["last_reload_ok"])
	}
	if got, _ := v["last_reload_error"].(string); !strings.Contains(got, "period") || !strings.Contains(got, "limit") || strings.Count(got, "\n") < 1 {
		t.Errorf("last_reload_error: got %q, want both problems, one a line", got)
	}
	if got, _ := v["last_reload_problems"].(float64); got != float64(len(rules.Problems(err))) || got < 2 {
		t.Errorf("last_reload_problems: got %v, want %d", v["last_reload_problems"], len(rules.Problems(err)))
	}
	if _, ok := v["config_path"]; !ok {
		t.Error("config_path is missing")
	}
	if _, ok := v["extra"]; ok {
		t.Error(`"extra" is still there`)
	}

	good, err := rules.Compile(oneDomain(origin.URL, rule("r", 2, time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.proxy.Reload(good, "good"); err != nil {
		t.Fatal(err)
	}
	v = get()
	if v["last_reload_ok"] != true || v["last_reload_error"] != "" || v["last_reload_problems"] != float64(0) {
		t.Errorf("after a good reload: got ok %v, error %q, problems %v; want true, \"\", 0",
			v["last_reload_ok"], v["last_reload_error"], v["last_reload_problems"])
	}
}

// TestAdminConfigSources: GET /v1/config's sources names, by path, where
// each setting the file did not give comes from (rules.Table.Sources),
// and is {} when every setting is the file's.
func TestAdminConfigSources(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	tests := []struct {
		name    string
		sources map[string]string
		want    string // compact JSON
	}{
		{"none", nil, `{}`},
		{"from the environment", map[string]string{"pop": "env EDGE_POP", "timeouts.read": "env EDGE_TIMEOUTS_READ"},
			`{"pop":"env EDGE_POP","timeouts.read":"env EDGE_TIMEOUTS_READ"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := oneDomain(origin.URL, rule("r", 1, time.Minute))
			cfg.Sources = tt.sources
			e := newEnv(t, cfg)
			rec := httptest.NewRecorder()
			e.proxy.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/config", nil))
			var v struct {
				Sources json.RawMessage `json:"sources"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &v); rec.Code != 200 || err != nil {
				t.Fatalf("GET /v1/config: %d %v\n%s", rec.Code, err, rec.Body)
			}
			var got bytes.Buffer
			if err := json.Compact(&got, v.Sources); err != nil || got.String() != tt.want {
				t.Errorf("got sources %s (%v), want %s", v.Sources, err, tt.want)
			}
		})
	}
}
