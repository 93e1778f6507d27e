package token

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/edgerate/edge/rules"
)

var (
	keysOnce sync.Once
	rsaKey   *rsa.PrivateKey
	ecKey    *ecdsa.PrivateKey
	edPub    ed25519.PublicKey
	edKey    ed25519.PrivateKey
)

func testKeys(t testing.TB) {
	keysOnce.Do(func() {
		var err error
		if rsaKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if ecKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			panic(err)
		}
		if edPub, edKey, err = ed25519.GenerateKey(rand.Reader); err != nil {
			panic(err)
		}
	})
}

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// jwk writes a public key as a JWK.
func jwk(kid string, pub any) map[string]string {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return map[string]string{"kty": "RSA", "kid": kid, "n": b64u(k.N.Bytes()), "e": b64u(big.NewInt(int64(k.E)).Bytes())}
	case *ecdsa.PublicKey:
		b, _ := k.Bytes()
		return map[string]string{"kty": "EC", "kid": kid, "crv": "P-256", "x": b64u(b[1:33]), "y": b64u(b[33:])}
	case ed25519.PublicKey:
		return map[string]string{"kty": "OKP", "kid": kid, "crv": "Ed25519", "x": b64u(k)}
	}
	panic(fmt.Sprintf("%T", pub))
}

func jwks(keys ...map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

// sign makes a token of claims signed by key with method, kid in its
// header unless "".
func sign(t testing.TB, m jwt.SigningMethod, kid string, key any, claims jwt.MapClaims) string {
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func claims(extra jwt.MapClaims) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "alice", "iss": "https://id.example", "aud": "api", "exp": now.Add(time.Hour).Unix()}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

func TestVerify(t *testing.T) {
	testKeys(t)
	ks, err := ParseKeys(jwks(jwk("r1", &rsaKey.PublicKey), jwk("e1", &ecKey.PublicKey), jwk("d1", edPub)))
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("0123456789abcdef0123456789abcdef")
	hmacSet := &KeySet{byKid: map[string]*Key{}, plain: []*Key{{Pub: secret}}}
	all := ks.with(hmacSet)
	rsaPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: must(x509.MarshalPKIXPublicKey(&rsaKey.PublicKey))})
	pemSet, err := ParseKeys(rsaPEM)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Keys: all, Algorithms: []string{"RS256", "ES256", "EdDSA", "HS256"}, Issuer: "https://id.example",
		Audiences: []string{"web", "api"}, Leeway: 30 * time.Second}
	tests := []struct {
		name  string
		opts  *Options
		token string
		want  Result
	}{
		{"RS256", nil, sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims(nil)), Valid},
		{"ES256", nil, sign(t, jwt.SigningMethodES256, "e1", ecKey, claims(nil)), Valid},
		{"EdDSA", nil, sign(t, jwt.SigningMethodEdDSA, "d1", edKey, claims(nil)), Valid},
		{"HS256", nil, sign(t, jwt.SigningMethodHS256, "", secret, claims(nil)), Valid},
		{"RS256 from PEM, no kid", &Options{Keys: pemSet}, sign(t, jwt.SigningMethodRS256, "", rsaKey, claims(nil)), Valid},
		{"no kid, one key of its kind", nil, sign(t, jwt.SigningMethodES256, "", ecKey, claims(nil)), Valid},
		{"expired", nil, sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims(jwt.MapClaims{"exp": now.Add(-31 * time.Second).Unix()})), Expired},
		{"expired within the leeway", nil, sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims(jwt.MapClaims{"exp": now.Add(-29 * time.Second).Unix()})), Valid},
		{"not yet valid", nil, sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims(jwt.MapClaims{"nbf": now.Add(time.Minute).Unix()})), NotYetValid},
		{"nbf within the leeway", nil, sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims(jwt.MapClaims{"nbf": now.Add(20 * time.Second).Unix()})), Valid},
		{"wrong issuer", nil, sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims(jwt.MapClaims{"iss": "https://evil.example"})), Issuer},
		{"no issuer", nil, sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims(jwt.MapClaims{"iss": nil})), Issuer},
		{"wrong audience", nil, sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims(jwt.MapClaims{"aud": []string{"admin"}})), Audience},
		{"one audience of several", nil, sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims(jwt.MapClaims{"aud": []string{"admin", "web"}})), Valid},
		{"alg none", nil, sign(t, jwt.SigningMethodNone, "r1", jwt.UnsafeAllowNoneSignatureType, claims(nil)), Algorithm},
		{"HS256 signed with the RSA public key", nil,
			sign(t, jwt.SigningMethodHS256, "r1", rsaPEM, claims(nil)), Algorithm},
		{"HS256 with the public key, no kid, PEM keys", &Options{Keys: pemSet, Algorithms: []string{"RS256", "HS256"}},
			sign(t, jwt.SigningMethodHS256, "", rsaPEM, claims(nil)), UnknownKey},
		{"algorithm not allowed", &Options{Keys: all}, sign(t, jwt.SigningMethodHS256, "", secret, claims(nil)), Algorithm},
		{"RS512 not allowed", nil, sign(t, jwt.SigningMethodRS512, "r1", rsaKey, claims(nil)), Algorithm},
		{"ES256 with the RSA kid", nil, sign(t, jwt.SigningMethodES256, "r1", ecKey, claims(nil)), Algorithm},
		{"unknown kid", nil, sign(t, jwt.SigningMethodRS256, "r9", rsaKey, claims(nil)), UnknownKey},
		{"signed by another key", nil, sign(t, jwt.SigningMethodEdDSA, "d1", ed25519.NewKeyFromSeed(make([]byte, 32)), claims(nil)), Signature},
		{"malformed", nil, "a.b", Malformed},
		{"malformed base64", nil, "!!.!!.!!", Malformed},
		{"missing", nil, "", Missing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := opts
			if tt.opts != nil {
				o = *tt.opts
			}
			v, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			c, got := v.Verify(tt.token, now)
			if got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
			if got == Valid {
				if sub, st := c.Claim("sub"); sub != "alice" || st != rules.ClaimScalar {
					t.Errorf("sub: got %q, %d, want alice", sub, st)
				}
				if c2, again := v.Verify(tt.token, now); again != Valid || c2 != c {
					t.Errorf("again: got %p %s, want the cached %p", c2, again, c)
				}
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

const (
	absent    = rules.ClaimAbsent
	scalar    = rules.ClaimScalar
	notScalar = rules.ClaimNotScalar
)

func TestClaims(t *testing.T) {
	testKeys(t)
	ks := must(ParseKeys(jwks(jwk("d1", edPub))))
	v := must(New(Options{Keys: ks}))
	tok := sign(t, jwt.SigningMethodEdDSA, "d1", edKey, claims(jwt.MapClaims{
		"org": map[string]any{"id": 42, "tier": "gold", "x": 1.50e1}, "https://example.com/plan": "pro",
		"roles": []string{"a"}, "big": json.Number("12345678901234567890"), "exp1": json.Number("1e3"), "neg0": json.Number("-0"),
		"admin": true,
	}))
	c, r := v.Verify(tok, now)
	if r != Valid {
		t.Fatal(r)
	}
	tests := []struct {
		path string
		want string
		st   rules.ClaimState
	}{
		{"sub", "alice", scalar}, {"org\x00id", "42", scalar}, {"org\x00x", "15", scalar}, {"org\x00tier", "gold", scalar},
		{"https://example.com/plan", "pro", scalar}, {"big", "12345678901234567890", scalar}, {"exp1", "1000", scalar},
		{"neg0", "0", scalar}, {"roles", "", notScalar}, {"org", "", notScalar}, {"admin", "", notScalar}, {"nobody", "", absent},
		{"sub\x00x", "", absent}, {"org\x00none", "", absent},
	}
	for _, tt := range tests {
		if got, st := c.Claim(tt.path); got != tt.want || st != tt.st {
			t.Errorf("Claim(%q): got %q, %d, want %q, %d", tt.path, got, st, tt.want, tt.st)
		}
	}
}

// TestCacheUntilExp: a cached token stops being valid at its exp (with
// the leeway), and when its kid leaves the key set.
func TestCacheUntilExp(t *testing.T) {
	testKeys(t)
	var doc atomic.Value
	doc.Store(jwks(jwk("d1", edPub)))
	r := NewRemote(RemoteOptions{URL: "test", Fetch: func(string) ([]byte, error) { return doc.Load().([]byte), nil }})
	r.Fetch()
	v := must(New(Options{Remote: r, Leeway: 30 * time.Second}))
	tok := sign(t, jwt.SigningMethodEdDSA, "d1", edKey, claims(jwt.MapClaims{"exp": now.Add(time.Minute).Unix()}))
	if _, res := v.Verify(tok, now); res != Valid {
		t.Fatal(res)
	}
	if _, res := v.Verify(tok, now.Add(89*time.Second)); res != Valid {
		t.Errorf("within exp+leeway: got %s", res)
	}
	if _, res := v.Verify(tok, now.Add(91*time.Second)); res != Expired {
		t.Errorf("after exp+leeway: got %s, want expired", res)
	}
	if _, res := v.Verify(tok, now); res != Valid {
		t.Fatal(res)
	}
	r.Fetch() // the same keys: the cache stays good
	if e, _ := v.cache.Get(tok); e == nil || !r.Keys().has(e.key) {
		t.Error("a fetch of the same keys dropped the cached token")
	}
	doc.Store(jwks(jwk("e1", &ecKey.PublicKey)))
	r.Fetch()
	if _, res := v.Verify(tok, now); res != UnknownKey {
		t.Errorf("after its kid left: got %s, want unknown_kid", res)
	}
}

// TestRotation: a JWKS served by an httptest server rotates to a new key;
// a token with the new kid is unknown until the Remote fetches again,
// which the unknown kid itself triggers (at most once a minute).
func TestRotation(t *testing.T) {
	testKeys(t)
	var doc atomic.Value
	doc.Store(jwks(jwk("old", edPub)))
	var fetches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Write(doc.Load().([]byte))
	}))
	defer srv.Close()
	var fails atomic.Int32
	fetched := make(chan struct{}, 10)
	r := NewRemote(RemoteOptions{URL: srv.URL, Refresh: time.Hour, Fetch: httpFetch, Report: func(err error) {
		if err != nil {
			fails.Add(1)
		}
		fetched <- struct{}{}
	}})
	r.Start()
	defer r.Stop()
	<-fetched
	v := must(New(Options{Remote: r}))
	oldTok := sign(t, jwt.SigningMethodEdDSA, "old", edKey, claims(nil))
	newTok := sign(t, jwt.SigningMethodES256, "new", ecKey, claims(nil))
	if _, res := v.Verify(oldTok, now); res != Valid {
		t.Fatalf("old key: %s", res)
	}
	doc.Store(jwks(jwk("new", &ecKey.PublicKey)))
	if _, res := v.Verify(newTok, now); res != UnknownKey {
		t.Fatalf("new kid before a fetch: got %s, want unknown_kid", res)
	}
	<-fetched // the unknown kid's fetch
	if _, res := v.Verify(newTok, now); res != Valid {
		t.Errorf("new kid after the fetch: got %s", res)
	}
	if _, res := v.Verify(oldTok, now); res != UnknownKey {
		t.Errorf("old kid after rotation: got %s, want unknown_kid", res)
	}
	// Another unknown kid within the minute fetches nothing.
	v.Verify(sign(t, jwt.SigningMethodES256, "other", ecKey, claims(nil)), now.Add(30*time.Second))
	v.Verify(sign(t, jwt.SigningMethodES256, "other", ecKey, claims(nil)), now.Add(61*time.Second))
	<-fetched
	if n := fetches.Load(); n != 3 {
		t.Errorf("fetches: got %d, want 3 (start, two unknown kids a minute apart)", n)
	}
	// A failed fetch keeps the keys.
	doc.Store([]byte("not json"))
	r.Fetch()
	<-fetched
	if _, res := v.Verify(newTok, now); res != Valid || fails.Load() != 1 {
		t.Errorf("after a failed fetch: got %s, %d failures, want valid, 1", res, fails.Load())
	}
}

func httpFetch(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func TestParseKeysErrors(t *testing.T) {
	testKeys(t)
	small := must(rsa.GenerateKey(rand.Reader, 1024))
	tests := []struct {
		name, data, want string
	}{
		{"neither", "hello", "neither a JWKS document nor PEM public keys"},
		{"bad json", "{", "jwks: unexpected end of JSON input"},
		{"small RSA", string(jwks(jwk("s", &small.PublicKey))), "jwks: keys[0]: an RSA key must have at least 2048 bits, got 1024"},
		{"kty", `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`, `jwks: keys[0]: kty "oct" is not RSA, EC or OKP`},
		{"alg of another kind", `{"keys":[{"kty":"OKP","crv":"Ed25519","alg":"HS256","x":"` + b64u(edPub) + `"}]}`,
			`jwks: keys[0]: alg "HS256" does not go with a OKP key`},
		{"duplicate kid", string(jwks(jwk("a", edPub), jwk("a", edPub))), `jwks: keys[1]: kid "a" is used twice`},
		{"private key PEM", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "pem: key 1: a PRIVATE KEY block is not a public key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseKeys([]byte(tt.data)); err == nil || err.Error() != tt.want {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}

// FuzzVerify: any token string is a Result, never a panic, and only a
// token signed by the key is valid.
func FuzzVerify(f *testing.F) {
	testKeys(f)
	ks := must(ParseKeys(jwks(jwk("d1", edPub))))
	v := must(New(Options{Keys: ks}))
	f.Add(sign(f, jwt.SigningMethodEdDSA, "d1", edKey, claims(nil)))
	f.Add(sign(f, jwt.SigningMethodNone, "d1", jwt.UnsafeAllowNoneSignatureType, claims(nil)))
	f.Add("eyJhbGciOiJFZERTQSJ9.e30.")
	f.Fuzz(func(t *testing.T, tok string) {
		c, r := v.Verify(tok, now)
		if (r == Valid) != (c != nil) {
			t.Fatalf("%s with claims %v", r, c)
		}
		if r == Valid {
			if _, err := jwt.Parse(tok, func(*jwt.Token) (any, error) { return edPub, nil }, jwt.WithTimeFunc(func() time.Time { return now })); err != nil {
				t.Fatalf("valid here, jwt says %v", err)
			}
		}
	})
}

// FuzzParseKeys: any document is keys or an error, never a panic.
func FuzzParseKeys(f *testing.F) {
	testKeys(f)
	f.Add(jwks(jwk("r", &rsaKey.PublicKey), jwk("e", &ecKey.PublicKey), jwk("d", edPub)))
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: must(x509.MarshalPKIXPublicKey(edPub))}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if ks, err := ParseKeys(data); (err == nil) != (ks.Len() > 0) {
			t.Fatalf("%d keys, error %v", ks.Len(), err)
		}
	})
}
