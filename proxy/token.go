package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/token"
)

// This file is the identify step's second half: a domain with a jwt
// section verifies the request's bearer token (package token), whose
// claims its rules' jwt:CLAIM parts key by, and, under invalid: refuse,
// answers 401 for a request without a valid one (RFC 6750 §3).

// domainJWT is a domain's token verification.
type domainJWT struct {
	cfg      *rules.JWT
	verifier *token.Verifier
	results  [token.ClaimNotScalar + 1]prometheus.Counter // edge_jwt_total{domain,result}
}

// requestClaims are one request's verified claims as rules read them
// (rules.Claims); it notes a keyed claim that is not a string or number.
type requestClaims struct {
	c         *token.Claims
	notScalar bool
}

func (rc *requestClaims) Claim(path string) (string, rules.ClaimState) {
	v, st := rc.c.Claim(path)
	if st == rules.ClaimNotScalar {
		rc.notScalar = true
	}
	return v, st
}

// verifyToken verifies ex's bearer token for its domain, setting the
// claims its rules key by; it reports false when the request is refused,
// with ex.ans its 401.
func (p *Proxy) verifyToken(ex *exchange) bool {
	j := ex.d.jwt
	if j == nil {
		return true
	}
	raw, several := bearer(ex.src.Header, j.cfg.Cookie)
	c, res := j.verifier.Verify(raw, ex.now)
	if several {
		res = token.Malformed
	}
	ex.tokenResult = res
	if res == token.Valid {
		ex.claims = requestClaims{c: c}
		ex.src.Claims = &ex.claims
		return true
	}
	if !j.cfg.Refuse {
		return true
	}
	ex.ans.reset(http.StatusUnauthorized, outcomeUnauthorized)
	if res == token.Missing {
		ex.ans.set(fieldWWWAuthenticate, wwwBearer)
		ex.ans.text("unauthorized: a bearer token is required\n")
	} else {
		ex.ans.set(fieldWWWAuthenticate, wwwInvalidToken)
		ex.ans.text("unauthorized: the bearer token is not valid\n")
	}
	return false
}

// countToken counts what verifyToken found, and, once per request, a
// keyed claim that was an array or object (keyed as missing): once the
// request is answered or goes on, since the fast path may decline it
// (and net/http verify it again, from the cache).
func countToken(ex *exchange) {
	j := ex.d.jwt
	if j == nil {
		return
	}
	j.results[ex.tokenResult].Inc()
	if ex.src.Claims != nil && ex.claims.notScalar {
		j.results[token.ClaimNotScalar].Inc()
	}
}

// bearer returns the request's token: the cookie's value, or the
// Authorization field's Bearer credentials (the scheme compared without
// case, RFC 9110 §11.1); "" for none. several reports Authorization
// sent more than once, which is no token to believe (which would be the
// client's?).
func bearer(h rules.HeaderValues, cookie string) (raw string, several bool) {
	if h == nil {
		return "", false
	}
	if cookie != "" {
		return rules.Cookie(h.Values("Cookie"), cookie), false
	}
	vals := h.Values("Authorization")
	switch {
	case len(vals) > 1:
		return "", true
	case len(vals) == 0:
		return "", false
	}
	v := vals[0]
	if len(v) < 7 || !strings.EqualFold(v[:7], "bearer ") {
		return "", false
	}
	return strings.TrimLeft(v[7:], " "), false
}

// jwksMaxBytes bounds a JWKS document.
const jwksMaxBytes = 1 << 20

// newDomainJWT makes domain d's verification, its keys read now (a
// keys_file, the HMAC secret's variable) or fetched by the Proxy's remote
// for the URL.
func (p *Proxy) newDomainJWT(d *rules.Domain) (*domainJWT, error) {
	cfg := d.JWT
	opts := token.Options{Algorithms: cfg.Algorithms, Issuer: cfg.Issuer, Audiences: cfg.Audiences, Leeway: cfg.Leeway}
	var sets []*token.KeySet
	if cfg.KeysFile != "" {
		data, err := os.ReadFile(cfg.KeysFile)
		if err != nil {
			return nil, fmt.Errorf("jwt.keys_file: %w", err)
		}
		ks, err := token.ParseKeys(data)
		if err != nil {
			return nil, fmt.Errorf("jwt.keys_file %s: %w", cfg.KeysFile, err)
		}
		sets = append(sets, ks)
	}
	if cfg.HMACSecretEnv != "" {
		secret := os.Getenv(cfg.HMACSecretEnv)
		if len(secret) < 32 {
			// The secret's length only: never its bytes.
			return nil, fmt.Errorf("jwt.hmac_secret_env: the variable %s must hold a secret of at least 32 bytes, got %d bytes", cfg.HMACSecretEnv, len(secret))
		}
		sets = append(sets, token.HMACKey([]byte(secret)))
	}
	opts.Keys = token.Merge(sets...)
	if cfg.JWKSURL != "" {
		opts.Remote = p.remoteJWKS(cfg.JWKSURL, cfg.Refresh)
	}
	v, err := token.New(opts)
	if err != nil {
		return nil, err
	}
	j := &domainJWT{cfg: cfg, verifier: v}
	for _, r := range token.Results() {
		if int(r) < len(j.results) {
			j.results[r] = p.metrics.jwt.WithLabelValues(d.Name, r.String())
		}
	}
	return j, nil
}

// remoteJWKS returns the Proxy's fetcher of url, started at its first
// use; one per URL, kept across reloads while a domain uses it
// (retainJWKS). Called under reloadMu (or from New).
func (p *Proxy) remoteJWKS(url string, refresh time.Duration) *token.Remote {
	if r := p.jwks[url]; r != nil {
		return r
	}
	client := &http.Client{Timeout: 10 * time.Second}
	r := token.NewRemote(token.RemoteOptions{URL: url, Refresh: refresh,
		Fetch: func(url string) ([]byte, error) {
			resp, err := client.Get(url)
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("status %d", resp.StatusCode)
			}
			b, err := io.ReadAll(io.LimitReader(resp.Body, jwksMaxBytes+1))
			if len(b) > jwksMaxBytes {
				return nil, errors.New("document over 1 MiB")
			}
			return b, err
		},
		Report: func(err error) {
			if err != nil {
				p.metrics.jwksFetches.WithLabelValues("error").Inc()
				p.log.Warn("jwks fetch failed; the last keys stay", "error", err)
				return
			}
			p.metrics.jwksFetches.WithLabelValues("ok").Inc()
		}})
	if p.jwks == nil {
		p.jwks = make(map[string]*token.Remote)
	}
	p.jwks[url] = r
	r.Start()
	return r
}

// retainJWKS stops the fetchers no domain of st uses.
func (p *Proxy) retainJWKS(st *state) {
	used := make(map[string]bool)
	for _, d := range st.domains {
		if d.JWT != nil && d.JWT.JWKSURL != "" {
			used[d.JWT.JWKSURL] = true
		}
	}
	for url, r := range p.jwks {
		if !used[url] {
			r.Stop()
			delete(p.jwks, url)
		}
	}
}
