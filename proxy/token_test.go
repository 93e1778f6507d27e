package proxy

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgerate/edge/rules"
)

const testSecretEnv = "EDGE_TEST_JWT_SECRET"

var testSecret = []byte("0123456789abcdef0123456789abcdef-test")

// hs256 signs claims with the test's HMAC secret.
func hs256(t testing.TB, claims jwt.MapClaims) string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// jwtConfig is api.example.com verifying HS256 tokens, with rules keyed by
// sub, by org.id, and a per-key rule that skips anonymous clients.
func jwtConfig(origin, invalid string) rules.Config {
	cfg := oneDomain(origin,
		rules.RuleConfig{Name: "per-user", Limit: 2, Period: time.Minute, Key: []string{"jwt:sub"}},
		rules.RuleConfig{Name: "per-org", Limit: 100, Period: time.Minute, Key: []string{"jwt:org.id"}, WhenMissing: "skip"},
	)
	cfg.Domains[0].JWT = &rules.JWTConfig{HMACSecretEnv: testSecretEnv, Algorithms: []string{"HS256"},
		Issuer: "https://id.example", Audiences: []string{"api"}, Invalid: invalid}
	return cfg
}

func userToken(t testing.TB, now time.Time, sub string, extra jwt.MapClaims) string {
	c := jwt.MapClaims{"sub": sub, "iss": "https://id.example", "aud": "api", "exp": now.Add(time.Hour).Unix()}
	for k, v := range extra {
		c[k] = v
	}
	return hs256(t, c)
}

func (e *env) jwtResults(result string) float64 {
	return testutil.ToFloat64(e.proxy.metrics.jwt.WithLabelValues("api.example.com", result))
}

func TestJWTKeys(t *testing.T) {
	t.Setenv(testSecretEnv, string(testSecret))
	origin, _ := newOrigin(t, "o")
	e := newEnv(t, jwtConfig(origin.URL, ""))
	now := e.clock.Now()
	alice, bob := userToken(t, now, "alice", nil), userToken(t, now, "bob", nil)
	auth := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	for i, want := range []int{200, 200, 429} {
		if resp, _ := e.do("GET", "api.example.com", "/", auth(alice), ""); resp.StatusCode != want {
			t.Fatalf("alice's request %d: got %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	if resp, _ := e.do("GET", "api.example.com", "/", auth(bob), ""); resp.StatusCode != 200 {
		t.Errorf("bob: got %d, want 200 (his own key)", resp.StatusCode)
	}
	// Anonymous (no token, a bad one): keyed by the address, apart from
	// the users.
	expired := userToken(t, now, "alice", jwt.MapClaims{"exp": now.Add(-time.Minute).Unix()})
	for i, want := range []int{200, 200, 429} {
		hdr := auth(expired)
		if i == 0 {
			hdr = nil
		}
		if resp, _ := e.do("GET", "api.example.com", "/", hdr, ""); resp.StatusCode != want {
			t.Fatalf("anonymous request %d: got %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	if got := e.jwtResults("valid"); got != 4 {
		t.Errorf("valid: got %v, want 4", got)
	}
	if got := e.jwtResults("missing") + e.jwtResults("expired"); got != 3 {
		t.Errorf("missing and expired: got %v, want 3", got)
	}
	// The per-org rule skipped every request without org.id: it counted
	// none of them.
	if got := testutil.ToFloat64(e.proxy.metrics.decisions.WithLabelValues("api.example.com", "per-org", "block", "allowed")); got != 0 {
		t.Errorf("per-org counted %v requests without org.id, want 0", got)
	}
	// A claim that is an object is missing, and counted.
	org := userToken(t, now, "carol", jwt.MapClaims{"org": map[string]any{"id": []int{1}}})
	e.do("GET", "api.example.com", "/", auth(org), "")
	if got := e.jwtResults("claim_not_scalar"); got != 1 {
		t.Errorf("claim_not_scalar: got %v, want 1", got)
	}
}

func TestJWTRefuse(t *testing.T) {
	t.Setenv(testSecretEnv, string(testSecret))
	origin, seen := newOrigin(t, "o")
	e := newEnv(t, jwtConfig(origin.URL, "refuse"))
	now := e.clock.Now()
	none := "eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"alice"}`)) + "."
	tests := []struct {
		name   string
		auth   string
		status int
		www    string
	}{
		{"valid", "Bearer " + userToken(t, now, "alice", nil), 200, ""},
		{"scheme in any case", "bearer " + userToken(t, now, "alice", nil), 200, ""},
		{"no token", "", 401, "Bearer"},
		{"another scheme", "Basic YTpi", 401, "Bearer"},
		{"wrong audience", "Bearer " + userToken(t, now, "alice", jwt.MapClaims{"aud": "admin"}), 401, `Bearer error="invalid_token"`},
		{"alg none", "Bearer " + none, 401, `Bearer error="invalid_token"`},
		{"garbage", "Bearer x.y.z", 401, `Bearer error="invalid_token"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(seen())
			var hdr map[string]string
			if tt.auth != "" {
				hdr = map[string]string{"Authorization": tt.auth}
			}
			resp, body := e.do("GET", "api.example.com", "/", hdr, "")
			if resp.StatusCode != tt.status || resp.Header.Get("WWW-Authenticate") != tt.www {
				t.Fatalf("got %d %q (%q), want %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body, tt.status, tt.www)
			}
			if forwarded := len(seen()) - before; (tt.status == 200) != (forwarded == 1) {
				t.Errorf("forwarded %d requests", forwarded)
			}
		})
	}
	if got := testutil.ToFloat64(e.proxy.metrics.requests.WithLabelValues("api.example.com", outcomeUnauthorized)); got != 5 {
		t.Errorf("unauthorized: got %v, want 5", got)
	}
}

// TestJWTCheckListener: the check listener verifies the Authorization the
// asking proxy forwards, and refuses with deny_status.
func TestJWTCheckListener(t *testing.T) {
	t.Setenv(testSecretEnv, string(testSecret))
	cfg := checkTestConfig(403)
	cfg.Domains[0].Rules = []rules.RuleConfig{{Name: "per-user", Limit: 1, Period: time.Minute, Key: []string{"jwt:sub"}}}
	cfg.Domains[0].JWT = &rules.JWTConfig{HMACSecretEnv: testSecretEnv, Algorithms: []string{"HS256"}, Invalid: "refuse"}
	e := newCheckEnv(t, cfg)
	now := e.clock.Now()
	ask := func(auth string) (*http.Response, string) {
		h := http.Header{"Host": {"api.example.com"}, "X-Forwarded-Method": {"GET"}, "X-Forwarded-Uri": {"/x"},
			"X-Forwarded-For": {"203.0.113.5"}}
		if auth != "" {
			h["Authorization"] = []string{auth}
		}
		return e.ask(h)
	}
	alice := "Bearer " + hs256(t, jwt.MapClaims{"sub": "alice", "exp": now.Add(time.Hour).Unix()})
	bob := "Bearer " + hs256(t, jwt.MapClaims{"sub": "bob", "exp": now.Add(time.Hour).Unix()})
	for _, step := range []struct {
		auth   string
		status int
		www    string
	}{{alice, 200, ""}, {alice, 403, ""}, {bob, 200, ""}, {"", 403, "Bearer"}, {"Bearer bad", 403, `Bearer error="invalid_token"`}} {
		resp, body := ask(step.auth)
		if resp.StatusCode != step.status || resp.Header.Get("WWW-Authenticate") != step.www {
			t.Errorf("%.20q: got %d %q (%q), want %d %q", step.auth, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body, step.status, step.www)
		}
	}
}

// TestJWTJWKSURL: keys fetched from a JWKS URL; the fetcher stops with
// the proxy (the leak check sees to it), and a reload without the URL
// stops it too.
func TestJWTJWKSURL(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	doc, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "OKP", "crv": "Ed25519", "kid": "k1",
		"x": base64.RawURLEncoding.EncodeToString(pub)}}})
	var fetches atomic.Int32
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Write(doc)
	}))
	defer jwks.Close()
	origin, _ := newOrigin(t, "o")
	cfg := oneDomain(origin.URL, rules.RuleConfig{Name: "per-user", Limit: 1, Period: time.Minute, Key: []string{"jwt:sub"}})
	cfg.Domains[0].JWT = &rules.JWTConfig{JWKSURL: jwks.URL, Invalid: "refuse"}
	e := newEnv(t, cfg)
	defer e.proxy.Close()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"sub": "alice", "exp": e.clock.Now().Add(time.Hour).Unix()})
	tok.Header["kid"] = "k1"
	s, _ := tok.SignedString(key)
	for i, want := range []int{200, 429} {
		if resp, _ := e.do("GET", "api.example.com", "/", map[string]string{"Authorization": "Bearer " + s}, ""); resp.StatusCode != want {
			t.Fatalf("request %d: got %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("fetches: got %d, want 1", n)
	}
	// A reload keeps the fetcher (and its keys); one without jwt stops it.
	table, _ := rules.Compile(cfg)
	if _, err := e.proxy.Reload(table, "again"); err != nil {
		t.Fatal(err)
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("after a reload: %d fetches, want 1 (the fetcher kept)", n)
	}
	cfg.Domains[0].JWT = nil
	cfg.Domains[0].Rules[0].Key = []string{"ip"}
	table, _ = rules.Compile(cfg)
	if _, err := e.proxy.Reload(table, "none"); err != nil {
		t.Fatal(err)
	}
	e.proxy.reloadMu.Lock()
	left := len(e.proxy.jwks)
	e.proxy.reloadMu.Unlock()
	if left != 0 {
		t.Errorf("%d fetchers left after a reload without jwt", left)
	}
}

// TestJWTSecretNeverInMessages: a short secret fails naming the variable
// and the length only.
func TestJWTSecretNeverInMessages(t *testing.T) {
	t.Setenv(testSecretEnv, "short-secret-value")
	table, err := rules.Compile(jwtConfig("http://127.0.0.1:9", ""))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(Options{Table: table, Version: "test"})
	if err == nil || strings.Contains(err.Error(), "short-secret-value") || !strings.Contains(err.Error(), testSecretEnv) {
		t.Errorf("got %v, want an error naming %s and not the secret", err, testSecretEnv)
	}
}
