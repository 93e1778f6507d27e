package rules

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/edgerate/edge/internal/wire"
)

// JWTConfig is a domain's (or the top level's) jwt section: where a
// request's bearer token is, the keys it is verified with and what it must
// say. Rules read a verified token's claims with jwt:CLAIM key parts.
type JWTConfig struct {
	// From is where the token is: "header:Authorization" (default; the
	// Bearer scheme) or "cookie:NAME".
	From string `mapstructure:"from"`
	// KeysFile is a JWKS JSON file or PEM public keys, read at every load.
	KeysFile string `mapstructure:"keys_file"`
	// JWKSURL is fetched at start, every Refresh, and at most once a
	// minute when a token names a kid the keys lack: https, or http to a
	// loopback address.
	JWKSURL string `mapstructure:"jwks_url"`
	// Refresh is how often JWKSURL is fetched; default 5m, 1m..24h.
	Refresh time.Duration `mapstructure:"refresh"`
	// HMACSecretEnv names the environment variable that holds an
	// HS256/384/512 secret (at least 32 bytes).
	HMACSecretEnv string `mapstructure:"hmac_secret_env"`
	// Issuer, when set, is the iss a token must have.
	Issuer string `mapstructure:"issuer"`
	// Audiences, when set, are the aud values of which a token must have
	// one.
	Audiences []string `mapstructure:"audiences"`
	// Algorithms allowed; default [RS256, ES256, EdDSA].
	Algorithms []string `mapstructure:"algorithms"`
	// Leeway is the clock skew allowed on exp and nbf; default 30s, at
	// most 5m.
	Leeway time.Duration `mapstructure:"leeway"`
	// Invalid is what becomes of a request whose token is not valid:
	// "anonymous" (default: it goes on without claims) or "refuse" (401;
	// a request without a token too).
	Invalid string `mapstructure:"invalid"`
}

// JWT is a compiled [JWTConfig]. Callers must not modify it.
type JWT struct {
	// Cookie is the cookie the token is in; "" for the Authorization
	// field's Bearer credentials.
	Cookie        string
	KeysFile      string
	JWKSURL       string
	Refresh       time.Duration
	HMACSecretEnv string
	Issuer        string
	Audiences     []string
	Algorithms    []string
	Leeway        time.Duration
	// Refuse answers 401 for a request without a valid token.
	Refuse bool
}

// JWT defaults and bounds.
const (
	DefaultJWKSRefresh = 5 * time.Minute
	DefaultJWTLeeway   = 30 * time.Second
	maxJWTLeeway       = 5 * time.Minute
)

// jwtAlgorithms are the algorithms edge verifies.
var jwtAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "HS256", "HS384", "HS512"}

// compileJWT compiles a jwt section at path; nil for none.
func compileJWT(p *problems, path string, c *JWTConfig) *JWT {
	if c == nil {
		return nil
	}
	j := &JWT{KeysFile: c.KeysFile, HMACSecretEnv: c.HMACSecretEnv, Issuer: c.Issuer,
		Audiences: c.Audiences, Refresh: c.Refresh, Leeway: c.Leeway}
	switch from := c.From; {
	case from == "" || strings.EqualFold(from, "header:Authorization"):
	case strings.HasPrefix(from, "cookie:") && wire.IsToken(from[len("cookie:"):]):
		j.Cookie = from[len("cookie:"):]
	default:
		p.add(path+".from", "must be header:Authorization or cookie:NAME, got %q", from)
	}
	if c.KeysFile == "" && c.JWKSURL == "" && c.HMACSecretEnv == "" {
		p.add(path, "needs keys: keys_file, jwks_url or hmac_secret_env")
	}
	if c.JWKSURL != "" {
		if u, err := url.Parse(c.JWKSURL); err != nil || u.Host == "" || !(u.Scheme == "https" || u.Scheme == "http" && loopbackHost(u.Hostname())) {
			p.add(path+".jwks_url", "must be an https URL (or http to a loopback address), got %q", c.JWKSURL)
		} else {
			j.JWKSURL = c.JWKSURL
		}
	}
	switch {
	case c.Refresh == 0:
		j.Refresh = DefaultJWKSRefresh
	case c.JWKSURL == "":
		p.add(path+".refresh", "applies only with jwks_url")
	case c.Refresh < time.Minute || c.Refresh > 24*time.Hour:
		p.add(path+".refresh", "must be between 1m and 24h, got %s", fmtDuration(c.Refresh))
	}
	if !p.given[path+".leeway"] && c.Leeway == 0 {
		j.Leeway = DefaultJWTLeeway
	} else if c.Leeway < 0 || c.Leeway > maxJWTLeeway {
		p.add(path+".leeway", "must be between 0s and %s, got %s", fmtDuration(maxJWTLeeway), fmtDuration(c.Leeway))
	}
	j.Algorithms = c.Algorithms
	if len(j.Algorithms) == 0 {
		j.Algorithms = []string{"RS256", "ES256", "EdDSA"}
	}
	hmac := false
	for i, a := range c.Algorithms {
		if !slices.Contains(jwtAlgorithms, a) {
			p.add(fmt.Sprintf("%s.algorithms[%d]", path, i), "must be one of %s, got %q", strings.Join(jwtAlgorithms, ", "), a)
		}
		hmac = hmac || strings.HasPrefix(a, "HS")
	}
	switch {
	case c.HMACSecretEnv != "" && !hmac:
		p.add(path+".hmac_secret_env", "needs an HS256, HS384 or HS512 among algorithms")
	case c.HMACSecretEnv == "" && hmac:
		p.add(path+".algorithms", "HS256, HS384 and HS512 need hmac_secret_env (an RSA or EC key is never an HMAC secret)")
	}
	switch c.Invalid {
	case "", "anonymous":
	case "refuse":
		j.Refuse = true
	default:
		p.add(path+".invalid", "must be anonymous or refuse, got %q", c.Invalid)
	}
	return j
}

// loopbackHost reports whether host is localhost or a loopback address.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
