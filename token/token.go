// Package token verifies the bearer tokens (JSON Web Tokens, RFC 7519)
// that rules key clients by: the signature, with the keys of a JWKS or PEM
// file, a JWKS URL or an HMAC secret, the algorithm against an allowed
// list before any cryptography, and the issuer, audience and times. A
// verified token's claims are what a rule's jwt:CLAIM key part reads.
//
// The JWS and claims checks are github.com/golang-jwt/jwt/v5's; this
// package chooses the key (never an RSA key as an HMAC secret), reads JWKS
// documents, fetches them, and caches results per token string.
package token

import (
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/edgerate/edge/rules"
)

// Result is what verifying one token found: Valid, or why not. The values
// are the result label of edge_jwt_total.
type Result uint8

const (
	Valid          Result = iota // verified: Claims are set
	Missing                      // the request carries no token
	Malformed                    // not a JWS compact token, or its JSON is bad
	Algorithm                    // an algorithm not allowed (none included), or one its key cannot verify
	UnknownKey                   // no key with the token's kid (or none of its kind)
	Signature                    // the signature does not verify
	Expired                      // exp is past, beyond the leeway
	NotYetValid                  // nbf is ahead, beyond the leeway
	Issuer                       // iss is not the issuer
	Audience                     // aud holds none of the audiences
	BadClaims                    // another registered claim is malformed
	ClaimNotScalar               // a keyed claim is an array or object (counted by the proxy)
	nResults
)

var resultNames = [nResults]string{"valid", "missing", "malformed", "algorithm", "unknown_kid", "signature",
	"expired", "not_yet_valid", "issuer", "audience", "bad_claims", "claim_not_scalar"}

// String is the result's metric label value, such as "unknown_kid".
func (r Result) String() string {
	if r < nResults {
		return resultNames[r]
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}

// Results lists every Result, for metrics made ahead.
func Results() []Result {
	out := make([]Result, nResults)
	for i := range out {
		out[i] = Result(i)
	}
	return out
}

// DefaultAlgorithms are allowed when Options.Algorithms is empty.
var DefaultAlgorithms = []string{"RS256", "ES256", "EdDSA"}

// DefaultLeeway is the clock skew allowed on exp and nbf by default.
const DefaultLeeway = 30 * time.Second

// DefaultCacheSize is how many verified tokens a Verifier remembers.
const DefaultCacheSize = 4096

// Options configure a Verifier. Keys come from Keys (a keys_file's, the
// HMAC secret's) and from Remote, if set; at least one of them.
type Options struct {
	Keys   *KeySet
	Remote *Remote
	// Algorithms allowed; DefaultAlgorithms if empty. "none" never is.
	Algorithms []string
	Issuer     string   // "" accepts any
	Audiences  []string // empty accepts any; else aud must hold one
	Leeway     time.Duration
	CacheSize  int // 0 means DefaultCacheSize
}

// Verifier verifies tokens. It is safe for concurrent use.
type Verifier struct {
	keys   *KeySet
	remote *Remote
	algs   []string
	opts   Options
	cache  *lru.Cache[string, *entry]
	merged atomic.Pointer[mergedKeys]
}

// entry is a cached verification: its claims, the key that verified them
// and the token's exp (zero for none).
type entry struct {
	claims *Claims
	key    *Key
	exp    time.Time
}

// New returns a Verifier for opts.
func New(opts Options) (*Verifier, error) {
	if opts.Keys == nil && opts.Remote == nil {
		return nil, errors.New("token: no keys: a key file, a JWKS URL or an HMAC secret is needed")
	}
	algs := opts.Algorithms
	if len(algs) == 0 {
		algs = DefaultAlgorithms
	}
	for _, a := range algs {
		if family(a) == "" {
			return nil, fmt.Errorf("token: algorithm %q is not one edge verifies", a)
		}
	}
	if opts.CacheSize == 0 {
		opts.CacheSize = DefaultCacheSize
	}
	cache, err := lru.New[string, *entry](opts.CacheSize)
	if err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	return &Verifier{keys: opts.Keys, remote: opts.Remote, algs: slices.Clone(algs), opts: opts, cache: cache}, nil
}

// keySet returns the keys in use now: the fixed ones with the remote's.
func (v *Verifier) keySet() *KeySet {
	if v.remote == nil {
		return v.keys
	}
	rk := v.remote.Keys()
	if v.keys == nil {
		return rk
	}
	// Rare: a key file beside a JWKS URL. Merged once per fetch.
	if m := v.merged.Load(); m != nil && m.from == rk {
		return m.set
	}
	m := &mergedKeys{from: rk, set: v.keys.with(rk)}
	v.merged.Store(m)
	return m.set
}

// mergedKeys are a Verifier's own keys with a remote's set from.
type mergedKeys struct {
	from, set *KeySet
}

// Verify verifies raw at now and returns its claims when it is Valid. A
// token verified before is looked up, not checked again, while its exp
// has not passed and its key is still in the key set.
func (v *Verifier) Verify(raw string, now time.Time) (*Claims, Result) {
	if raw == "" {
		return nil, Missing
	}
	keys := v.keySet()
	// Peek takes the cache's read lock only: a hit does not move the
	// entry up, so the cache forgets the oldest verified first, which for
	// tokens that expire is nearly the least recently used.
	if e, ok := v.cache.Peek(raw); ok {
		if keys.has(e.key) && (e.exp.IsZero() || now.Before(e.exp.Add(v.opts.Leeway))) {
			return e.claims, Valid
		}
		v.cache.Remove(raw)
	}
	var used *Key
	var unknownKid string
	parser := jwt.NewParser(jwt.WithJSONNumber(), jwt.WithLeeway(v.opts.Leeway), jwt.WithTimeFunc(func() time.Time { return now }))
	mc := jwt.MapClaims{}
	_, err := parser.ParseWithClaims(raw, mc, func(t *jwt.Token) (any, error) {
		k, err := v.choose(keys, t)
		if errors.Is(err, errUnknownKey) {
			unknownKid, _ = t.Header["kid"].(string)
		}
		used = k
		return k.verifyKey(), err
	})
	if err == nil {
		err = v.checkClaims(mc)
	}
	if err != nil {
		r := classify(err)
		if r == UnknownKey && unknownKid != "" && v.remote != nil {
			v.remote.Unknown(now) // a rotation, maybe: fetch again soon
		}
		return nil, r
	}
	e := &entry{key: used}
	if exp, err := mc.GetExpirationTime(); err == nil && exp != nil {
		e.exp = exp.Time
	}
	c := newClaims(mc) // after exp is read: it rewrites mc's numbers
	e.claims = c
	v.cache.Add(raw, e)
	return c, Valid
}

// checkClaims checks iss and aud, which the parser's options would fix
// for the life of the parser.
func (v *Verifier) checkClaims(mc jwt.MapClaims) error {
	if v.opts.Issuer != "" {
		if iss, _ := mc.GetIssuer(); iss != v.opts.Issuer {
			return jwt.ErrTokenInvalidIssuer
		}
	}
	if len(v.opts.Audiences) > 0 {
		aud, err := mc.GetAudience()
		if err != nil || !slices.ContainsFunc(aud, func(a string) bool { return slices.Contains(v.opts.Audiences, a) }) {
			return jwt.ErrTokenInvalidAudience
		}
	}
	return nil
}

var (
	errAlgorithm  = errors.New("algorithm not allowed")
	errUnknownKey = errors.New("no such key")
)

// choose picks the key a token is verified with, before any
// cryptography: its algorithm must be allowed and go with the key's kind
// (an HMAC algorithm only ever with the HMAC secret, an ES one only on its
// curve), and its kid name a key of the set; a token without a kid takes
// the first key of its kind.
func (v *Verifier) choose(keys *KeySet, t *jwt.Token) (*Key, error) {
	alg, _ := t.Header["alg"].(string)
	if !slices.Contains(v.algs, alg) {
		return nil, errAlgorithm
	}
	kid, hasKid := t.Header["kid"].(string)
	if keys == nil {
		return nil, errUnknownKey
	}
	var k *Key
	if hasKid {
		k = keys.byKid[kid]
	}
	if k == nil {
		// A kid-less key (a PEM file's, the HMAC secret) verifies any
		// token of its kind.
		for _, p := range keys.plain {
			if kindOf(p.Pub) == family(alg) {
				k = p
				break
			}
		}
	}
	if k == nil && !hasKid {
		for _, c := range keys.byKid {
			if kindOf(c.Pub) == family(alg) && (c.Alg == "" || c.Alg == alg) {
				if k != nil {
					return nil, errUnknownKey // several could: a kid must say which
				}
				k = c
			}
		}
	}
	switch {
	case k == nil:
		return nil, errUnknownKey
	case kindOf(k.Pub) != family(alg), k.Alg != "" && k.Alg != alg:
		return nil, errAlgorithm // the algorithm-confusion forgery, among others
	}
	if ec, ok := k.Pub.(*ecdsa.PublicKey); ok && ec.Curve != curveOf(alg) {
		return nil, errAlgorithm
	}
	return k, nil
}

// verifyKey is what jwt's SigningMethod.Verify takes for k.
func (k *Key) verifyKey() any {
	if k == nil {
		return nil
	}
	return k.Pub
}

// classify names why jwt refused a token.
func classify(err error) Result {
	switch {
	case errors.Is(err, errAlgorithm):
		return Algorithm
	case errors.Is(err, errUnknownKey):
		return UnknownKey
	case errors.Is(err, jwt.ErrTokenMalformed):
		return Malformed
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return Signature
	case errors.Is(err, jwt.ErrTokenExpired):
		return Expired
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return NotYetValid
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return Issuer
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return Audience
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return Algorithm // an alg jwt does not know
	}
	return BadClaims
}

// Claims are a verified token's claims, read by rules' jwt:CLAIM parts
// (rules.Claims). Numbers are held in their canonical decimal form.
type Claims struct {
	m map[string]any
}

// number is a JSON number in canonical decimal form.
type number string

// newClaims keeps mc, its numbers made canonical once.
func newClaims(mc jwt.MapClaims) *Claims {
	return &Claims{m: canonical(map[string]any(mc)).(map[string]any)}
}

func canonical(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = canonical(e)
		}
	case []any:
		for i, e := range x {
			x[i] = canonical(e)
		}
	case json.Number:
		return number(Canonical(string(x)))
	}
	return v
}

// Canonical returns the canonical decimal form of a JSON number: an
// integer written without fraction or exponent as it is ("-0" is "0"),
// any other number by the shortest decimal that reads back as the same
// float64, without an exponent below 10²¹ ("1e3" and "1000.0" are
// "1000", "1.50" is "1.5").
func Canonical(n string) string {
	if isInteger(n) {
		if n == "-0" {
			return "0"
		}
		return n
	}
	f, err := strconv.ParseFloat(n, 64)
	if err != nil {
		return n // out of range: as written
	}
	if f == 0 {
		return "0"
	}
	if f > -1e21 && f < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func isInteger(n string) bool {
	s := strings.TrimPrefix(n, "-")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Claim returns the claim at path, names joined by NUL, as
// [rules.Claims] has it: a string or a number (ClaimScalar); an array,
// object, boolean or null (ClaimNotScalar); or none (ClaimAbsent).
func (c *Claims) Claim(path string) (string, rules.ClaimState) {
	var v any = c.m
	for {
		m, ok := v.(map[string]any)
		if !ok {
			return "", rules.ClaimAbsent
		}
		name, rest, more := strings.Cut(path, "\x00")
		if v, ok = m[name]; !ok {
			return "", rules.ClaimAbsent
		}
		if !more {
			break
		}
		path = rest
	}
	switch x := v.(type) {
	case string:
		return x, rules.ClaimScalar
	case number:
		return string(x), rules.ClaimScalar
	}
	return "", rules.ClaimNotScalar
}

// Remote is a JWKS fetched from a URL: at Start and every refresh, and
// again, at most once a minute, when a token names a kid the set lacks. A
// failed fetch keeps the last keys (none before the first success).
//
// Remote's goroutine is owned by whoever calls Start; Stop ends it.
type Remote struct {
	url     string
	refresh time.Duration
	fetch   func(url string) ([]byte, error)
	report  func(err error) // each fetch's outcome, for metrics and logs
	keys    atomic.Pointer[KeySet]
	lastUnk atomic.Int64 // unix nanos of the last fetch for an unknown kid
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

// RemoteOptions configure a Remote.
type RemoteOptions struct {
	URL     string
	Refresh time.Duration // 0 means 5m
	// Fetch gets the document at URL (the caller's HTTP client, with its
	// timeouts and size limit).
	Fetch func(url string) ([]byte, error)
	// Report hears every fetch's outcome: nil error for keys read.
	Report func(err error)
}

// unknownEvery bounds the fetches for unknown kids.
const unknownEvery = time.Minute

// NewRemote returns a Remote, not yet fetching.
func NewRemote(o RemoteOptions) *Remote {
	if o.Refresh <= 0 {
		o.Refresh = 5 * time.Minute
	}
	if o.Report == nil {
		o.Report = func(error) {}
	}
	return &Remote{url: o.URL, refresh: o.Refresh, fetch: o.Fetch, report: o.Report,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// URL is the JWKS URL.
func (r *Remote) URL() string { return r.url }

// Keys returns the keys of the last successful fetch; nil before one.
func (r *Remote) Keys() *KeySet { return r.keys.Load() }

// Start fetches once, then keeps fetching in a goroutine until Stop.
func (r *Remote) Start() {
	r.Fetch()
	go r.loop()
}

// Fetch fetches the JWKS now and keeps its keys if it reads.
func (r *Remote) Fetch() {
	data, err := r.fetch(r.url)
	var ks *KeySet
	if err == nil {
		ks, err = ParseKeys(data)
	}
	if err != nil {
		r.report(fmt.Errorf("jwks %s: %w", r.url, err))
		return
	}
	ks.keep(r.keys.Load())
	r.keys.Store(ks)
	r.report(nil)
}

// Unknown notes a token with a kid the set lacks, at now: the Remote
// fetches again unless it did so for that reason within the last minute.
func (r *Remote) Unknown(now time.Time) {
	last := r.lastUnk.Load()
	if last != 0 && now.Sub(time.Unix(0, last)) < unknownEvery {
		return
	}
	if !r.lastUnk.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Remote) loop() {
	defer close(r.done)
	t := time.NewTicker(r.refresh)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		case <-r.wake:
		}
		r.Fetch()
	}
}

// Stop ends the Remote's goroutine and waits for it. Call it once, after
// Start.
func (r *Remote) Stop() {
	close(r.stop)
	<-r.done
}
