package rules

import (
	"bytes"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// fakeClaims are a verified token's claims, by path.
type fakeClaims map[string]any

func (c fakeClaims) Claim(path string) (string, ClaimState) {
	switch v := c[path].(type) {
	case nil:
		return "", ClaimAbsent
	case string:
		return v, ClaimScalar
	}
	return "", ClaimNotScalar
}

func TestValueKeysRoundTrip(t *testing.T) {
	v4 := ClientPrefix(netip.MustParseAddr("203.0.113.9"), 64)
	cookie := KeyPart{Kind: KeyCookie, Name: "session"}
	query := KeyPart{Kind: KeyQuery, Name: "api key"}
	sub := KeyPart{Kind: KeyJWT, Name: "sub"}
	org := KeyPart{Kind: KeyJWT, Name: "org\x00id"}
	ip := KeyPart{Kind: KeyIP}
	hdr := http.Header{"Cookie": {`a=1; session=s1; session=s2`, "session=s3"}}
	claims := fakeClaims{"sub": "alice", "org\x00id": "-42", "roles": []any{"a"}}
	tests := []struct {
		name string
		ks   []KeyPart
		src  KeySource
		want string // KeyText
	}{
		{"cookie: the first", []KeyPart{cookie}, KeySource{Client: v4, Header: hdr}, "s1"},
		{"cookie in quotes", []KeyPart{cookie}, KeySource{Client: v4, Header: http.Header{"Cookie": {`session="q|1"`}}}, "q%7C1"},
		{"no cookie", []KeyPart{cookie, ip}, KeySource{Client: v4, Header: http.Header{"Cookie": {"other=1"}}}, "-203.0.113.9|203.0.113.9"},
		{"empty cookie", []KeyPart{cookie}, KeySource{Client: v4, Header: http.Header{"Cookie": {"session="}}}, "-203.0.113.9"},
		{"query decoded", []KeyPart{query}, KeySource{Client: v4, Query: "x=1&api+key=a%2Cb"}, "a%2Cb"},
		{"query: all, in order", []KeyPart{query}, KeySource{Client: v4, Query: "api%20key=2&api+key=1&api key=-3"}, "2, 1, -3"},
		{"query value spelling a missing one", []KeyPart{query}, KeySource{Client: v4, Query: "api+key=-1.2.3.4"}, "%2D1.2.3.4"},
		{"query: bad escape left out", []KeyPart{query}, KeySource{Client: v4, Query: "api+key=%zz&api+key=ok"}, "ok"},
		{"query: ; left out", []KeyPart{query}, KeySource{Client: v4, Query: "api+key=a;b"}, "-203.0.113.9"},
		{"query: empty", []KeyPart{query}, KeySource{Client: v4, Query: "api+key="}, "-203.0.113.9"},
		{"no query", []KeyPart{query}, KeySource{Client: v4}, "-203.0.113.9"},
		{"claim", []KeyPart{sub, ip}, KeySource{Client: v4, Claims: claims}, "alice|203.0.113.9"},
		{"nested claim", []KeyPart{org}, KeySource{Client: v4, Claims: claims}, "%2D42"},
		{"no token", []KeyPart{sub}, KeySource{Client: v4}, "-203.0.113.9"},
		{"claim not scalar", []KeyPart{{Kind: KeyJWT, Name: "roles"}}, KeySource{Client: v4, Claims: claims}, "-203.0.113.9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkKeyFaces(t, tt.ks, &tt.src, tt.want) })
	}
}

// TestValueKeysDistinct: the parts of one value are tagged apart from each
// other and from a missing value.
func TestValueKeysDistinct(t *testing.T) {
	a := ClientPrefix(netip.MustParseAddr("192.0.2.1"), 64)
	q := KeyPart{Kind: KeyQuery, Name: "k"}
	tests := []struct {
		name   string
		kx, ky []KeyPart
		x, y   KeySource
	}{
		{"cookie vs claim of the same text", []KeyPart{{Kind: KeyCookie, Name: "k"}}, []KeyPart{{Kind: KeyJWT, Name: "k"}},
			KeySource{Header: http.Header{"Cookie": {"k=v"}}}, KeySource{Claims: fakeClaims{"k": "v"}}},
		{"query vs header", []KeyPart{q}, []KeyPart{{Kind: KeyHeader, Header: "K"}},
			KeySource{Query: "k=v"}, KeySource{Header: http.Header{"K": {"v"}}}},
		{"one value vs two", []KeyPart{q}, []KeyPart{q}, KeySource{Query: "k=a%2C+b"}, KeySource{Query: "k=a&k=b"}},
		{"missing vs the address as a value", []KeyPart{q}, []KeyPart{q}, KeySource{Client: a}, KeySource{Client: a, Query: "k=192.0.2.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if x, y := AppendKey(nil, tt.kx, &tt.x), AppendKey(nil, tt.ky, &tt.y); bytes.Equal(x, y) {
				t.Errorf("got the same key %x for both, want two", x)
			}
		})
	}
}

func TestValueKeysAllocs(t *testing.T) {
	src := KeySource{Client: ClientPrefix(netip.MustParseAddr("192.0.2.1"), 64),
		Header: http.Header{"Cookie": {"a=1; session=abc"}}, Query: "x=1&key=a%20b&key=c", Claims: fakeClaims{"sub": "alice"}}
	ks := []KeyPart{{Kind: KeyCookie, Name: "session"}, {Kind: KeyQuery, Name: "key"}, {Kind: KeyJWT, Name: "sub"}}
	buf := make([]byte, 0, 128)
	if n := testing.AllocsPerRun(100, func() { AppendKey(buf[:0], ks, &src) }); n != 0 {
		t.Errorf("AppendKey allocates %v times, want 0", n)
	}
}

func TestParseValueKeyParts(t *testing.T) {
	tests := []struct {
		in      string
		want    KeyPart
		wantErr string
	}{
		{"cookie:session", KeyPart{Kind: KeyCookie, Name: "session"}, ""},
		{"cookie:a b", KeyPart{}, `cookie name must be an HTTP token, got "cookie:a b"`},
		{"query:api key", KeyPart{Kind: KeyQuery, Name: "api key"}, ""},
		{"query:", KeyPart{}, `query parameter name must be written decoded, not empty and without control bytes, got "query:"`},
		{"jwt:sub", KeyPart{Kind: KeyJWT, Name: "sub"}, ""},
		{"jwt:org.id", KeyPart{Kind: KeyJWT, Name: "org\x00id"}, ""},
		{`jwt:"https://example.com/plan"`, KeyPart{Kind: KeyJWT, Name: "https://example.com/plan"}, ""},
		{`jwt:a."b.c".d`, KeyPart{Kind: KeyJWT, Name: "a\x00b.c\x00d"}, ""},
		{`jwt:"a`, KeyPart{}, `a claim name in quotes needs its closing quote, got "jwt:\"a"`},
		{`jwt:"a"b`, KeyPart{}, `a quoted claim name must be followed by '.' or the end, got "jwt:\"a\"b"`},
		{`jwt:a.`, KeyPart{}, `a claim path must not end with '.', got "jwt:a."`},
		{`jwt:a..b`, KeyPart{}, `claim names must not be empty nor hold control bytes, got "jwt:a..b"`},
		{`jwt:`, KeyPart{}, `claim names must not be empty nor hold control bytes, got "jwt:"`},
		{`jwt:a"b`, KeyPart{}, `a claim name holding '"' must be quoted whole, got "jwt:a\"b"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseKeyPart(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("got %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v, want %+v", got, err, tt.want)
			}
			if back, err := ParseKeyPart(got.String()); err != nil || back != got {
				t.Errorf("String %q reads back as %+v, %v", got.String(), back, err)
			}
		})
	}
}

// FuzzQueryValues checks query parts against net/url: QueryValues finds
// what url.ParseQuery finds for the name, and a key's text reads back.
func FuzzQueryValues(f *testing.F) {
	f.Add("a=1&b=2&a=%41+x", "a")
	f.Add("a;b=1&%zz=1&a=%", "a")
	f.Add("k&k=&=k&k=v=w", "k")
	f.Fuzz(func(t *testing.T, query, name string) {
		if name == "" {
			return
		}
		got := QueryValues(query, name)
		vals, _ := url.ParseQuery(query)
		if want := vals[name]; !slices.Equal(got, want) {
			t.Fatalf("QueryValues(%q, %q) = %q, url.ParseQuery gives %q", query, name, got, want)
		}
		ks := []KeyPart{{Kind: KeyQuery, Name: name}}
		src := KeySource{Client: ClientPrefix(netip.MustParseAddr("192.0.2.1"), 64), Query: query}
		text := KeyText(ks, &src)
		if !utf8.ValidString(text) || strings.Count(text, "|") != 0 {
			t.Fatalf("KeyText = %q", text)
		}
		back, err := ParseKey(ks, text, 64)
		if want := AppendKey(nil, ks, &src); err != nil || !bytes.Equal(back, want) {
			t.Fatalf("ParseKey(KeyText = %q): got %x, %v, want %x", text, back, err, want)
		}
	})
}

// FuzzCookie: Cookie never panics and returns a value that was in a line.
func FuzzCookie(f *testing.F) {
	f.Add("a=1; session=\"x\"; session=2", "session")
	f.Add(";;=;session", "session")
	f.Fuzz(func(t *testing.T, line, name string) {
		if v := Cookie([]string{line}, name); !strings.Contains(line, v) {
			t.Fatalf("Cookie(%q, %q) = %q, not in the line", line, name, v)
		}
	})
}

func TestRuleApplies(t *testing.T) {
	cfg := validConfig()
	rs := cfg.Domains[0].Rules
	rs[0] = RuleConfig{Name: "per-key", Limit: 10, Period: time.Minute, Key: []string{"header:X-Api-Key", "ip"}, WhenMissing: "skip"}
	rs[1] = RuleConfig{Name: "mobile", Limit: 10, Period: time.Minute, Key: []string{"cookie:s"},
		Match: &MatchConfig{PathPrefix: "/v1/", Headers: map[string]string{"x-client": "mobile", "x-app": ""}}}
	tab, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	perKey, mobile := tab.Domains[0].Rules[0], tab.Domains[0].Rules[1]
	tests := []struct {
		name string
		r    *Rule
		src  KeySource
		want bool
	}{
		{"skip: with the key", perKey, KeySource{Path: "/", Header: http.Header{"X-Api-Key": {"k"}}}, true},
		{"skip: without it", perKey, KeySource{Path: "/"}, false},
		{"skip: blank", perKey, KeySource{Path: "/", Header: http.Header{"X-Api-Key": {" "}}}, false},
		{"headers match", mobile, KeySource{Path: "/v1/x", Header: http.Header{"X-Client": {"web", "mobile"}, "X-App": {"1"}}}, true},
		{"ip by default: without the cookie", mobile, KeySource{Path: "/v1/x", Header: http.Header{"X-Client": {"mobile"}, "X-App": {""}}}, true},
		{"header value differs", mobile, KeySource{Path: "/v1/x", Header: http.Header{"X-Client": {"Mobile"}, "X-App": {"1"}}}, false},
		{"header absent", mobile, KeySource{Path: "/v1/x", Header: http.Header{"X-Client": {"mobile"}}}, false},
		{"no headers", mobile, KeySource{Path: "/v1/x"}, false},
		{"path differs", mobile, KeySource{Path: "/v2/x", Header: http.Header{"X-Client": {"mobile"}, "X-App": {"1"}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.Applies("GET", &tt.src); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestValueKeyCompileErrors(t *testing.T) {
	rule := func(c *Config) *RuleConfig { return &c.Domains[0].Rules[0] }
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		{"when_missing spelling", func(c *Config) { rule(c).WhenMissing = "never" },
			`domains[0] (api).rules[0] (all).when_missing: must be ip or skip, got "never"`},
		{"skip without a part to miss", func(c *Config) { rule(c).WhenMissing = "skip"; rule(c).Key = []string{"ip", "path"} },
			`domains[0] (api).rules[0] (all).when_missing: skip applies only to a key with a part a request may lack (header, cookie, query, jwt or ja4), got key [ip path]`},
		{"match.headers not a token", func(c *Config) { rule(c).Match = &MatchConfig{Headers: map[string]string{"a b": "x"}} },
			`domains[0] (api).rules[0] (all).match.headers: must name headers (tokens), got "a b"`},
		{"match.headers Host", func(c *Config) { rule(c).Match = &MatchConfig{Headers: map[string]string{"host": "x"}} },
			`domains[0] (api).rules[0] (all).match.headers: must not name Host (match by host instead), got "host"`},
		{"refuse without rules", func(c *Config) { c.JWT = &JWTConfig{KeysFile: "k.json", Invalid: "refuse"} },
			`domains[1] (www).rules: jwt with invalid: refuse needs at least one rule in the domain (a domain without rules verifies no token)`},
		{"jwks_url plain http", func(c *Config) { c.JWT = &JWTConfig{JWKSURL: "http://id.example/jwks"} },
			`jwt.jwks_url: must be an https URL (or http to a loopback address), got "http://id.example/jwks"`},
		{"HS256 without a secret", func(c *Config) { c.JWT = &JWTConfig{KeysFile: "k.json", Algorithms: []string{"HS256"}} },
			`jwt.algorithms: HS256, HS384 and HS512 need hmac_secret_env (an RSA or EC key is never an HMAC secret)`},
		{"none", func(c *Config) { c.JWT = &JWTConfig{KeysFile: "k.json", Algorithms: []string{"none"}} },
			`jwt.algorithms[0]: must be one of RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA, HS256, HS384, HS512, got "none"`},
		{"no keys", func(c *Config) { c.JWT = &JWTConfig{Issuer: "x"} }, `jwt: needs keys: keys_file, jwks_url or hmac_secret_env`},
		{"invalid spelling", func(c *Config) { c.JWT = &JWTConfig{KeysFile: "k.json", Invalid: "deny"} }, `jwt.invalid: must be anonymous or refuse, got "deny"`},
		{"duplicate claim", func(c *Config) { rule(c).Key = []string{"jwt:a.b", `jwt:a."b"`} },
			`domains[0] (api).rules[0] (all).key[1]: "jwt:a.\"b\"" duplicates key[0]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			tt.mutate(&cfg)
			_, err := Compile(cfg)
			if err == nil {
				t.Fatalf("got no error, want %q", tt.want)
			}
			if lines := errorLines(t, err); !slices.Contains(lines, tt.want) {
				t.Errorf("got %q, want %q among them", lines, tt.want)
			}
		})
	}
}
