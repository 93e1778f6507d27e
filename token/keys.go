package token

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// A KeySet is the public keys tokens are verified with: a JWKS (RFC 7517)
// or PEM public keys, and an HMAC secret. It is immutable.
type KeySet struct {
	byKid map[string]*Key
	plain []*Key // keys without a kid (PEM keys, the HMAC secret), in order
}

// Key is one verification key: its kid ("" for none), the algorithm a
// JWK pins it to ("" for any of its kind) and the key itself, an
// *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey or, for HMAC, []byte.
type Key struct {
	ID  string
	Alg string
	Pub crypto.PublicKey
}

// Len is the number of keys in s.
func (s *KeySet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.byKid) + len(s.plain)
}

// has reports whether s still holds k under its kid: a cached
// verification stays good only while its key does.
func (s *KeySet) has(k *Key) bool {
	if s == nil {
		return false
	}
	if k.ID != "" {
		return s.byKid[k.ID] == k
	}
	for _, p := range s.plain {
		if p == k {
			return true
		}
	}
	return false
}

// keep makes s use old's *Key for every kid whose key is unchanged, so
// that verifications cached with it stay good across a fetch.
func (s *KeySet) keep(old *KeySet) {
	if old == nil {
		return
	}
	for kid, k := range s.byKid {
		if o := old.byKid[kid]; o != nil && o.Alg == k.Alg && samePub(o.Pub, k.Pub) {
			s.byKid[kid] = o
		}
	}
	for i, k := range s.plain {
		for _, o := range old.plain {
			if o.Alg == k.Alg && samePub(o.Pub, k.Pub) {
				s.plain[i] = o
				break
			}
		}
	}
}

func samePub(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

// with returns a set of s's keys and more's, those of more first when a
// kid is in both.
func (s *KeySet) with(more *KeySet) *KeySet {
	out := &KeySet{byKid: make(map[string]*Key)}
	for _, src := range []*KeySet{more, s} {
		if src == nil {
			continue
		}
		for kid, k := range src.byKid {
			if _, dup := out.byKid[kid]; !dup {
				out.byKid[kid] = k
			}
		}
		out.plain = append(out.plain, src.plain...)
	}
	return out
}

// maxKeys bounds the keys of one JWKS or PEM file.
const maxKeys = 100

// ParseKeys reads public keys from data: a JWKS document ({"keys": [...]})
// or PEM blocks of PUBLIC KEY (PKIX) or RSA PUBLIC KEY (PKCS #1). JWKs of
// kty RSA, EC (P-256, P-384, P-521) and OKP (Ed25519) with use "sig" or no
// use are read; others (private keys' extra members are ignored) are
// errors, so that a typo does not leave a key out unseen.
func ParseKeys(data []byte) (*KeySet, error) {
	s := &KeySet{byKid: make(map[string]*Key)}
	trimmed := strings.TrimSpace(string(data))
	if strings.HasPrefix(trimmed, "{") {
		var doc struct {
			Keys []json.RawMessage `json:"keys"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("jwks: %w", err)
		}
		if len(doc.Keys) > maxKeys {
			return nil, fmt.Errorf("jwks: more than %d keys", maxKeys)
		}
		for i, raw := range doc.Keys {
			k, err := parseJWK(raw)
			if err != nil {
				return nil, fmt.Errorf("jwks: keys[%d]: %w", i, err)
			}
			if k == nil {
				continue // an encryption key
			}
			if err := s.add(k); err != nil {
				return nil, fmt.Errorf("jwks: keys[%d]: %w", i, err)
			}
		}
		if s.Len() == 0 {
			// A fetch of it keeps the last keys rather than none.
			return nil, errors.New("jwks: no signature keys")
		}
		return s, nil
	}
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		var pub any
		var err error
		switch b.Type {
		case "PUBLIC KEY":
			pub, err = x509.ParsePKIXPublicKey(b.Bytes)
		case "RSA PUBLIC KEY":
			pub, err = x509.ParsePKCS1PublicKey(b.Bytes)
		default:
			err = fmt.Errorf("a %s block is not a public key", b.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("pem: key %d: %w", len(s.plain)+1, err)
		}
		switch pub.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
		default:
			return nil, fmt.Errorf("pem: key %d: a %T cannot verify tokens", len(s.plain)+1, pub)
		}
		if len(s.plain) == maxKeys {
			return nil, fmt.Errorf("pem: more than %d keys", maxKeys)
		}
		s.plain = append(s.plain, &Key{Pub: pub})
	}
	if s.Len() == 0 {
		return nil, errors.New("neither a JWKS document nor PEM public keys")
	}
	return s, nil
}

func (s *KeySet) add(k *Key) error {
	if k.ID == "" {
		s.plain = append(s.plain, k)
		return nil
	}
	if _, dup := s.byKid[k.ID]; dup {
		return fmt.Errorf("kid %q is used twice", k.ID)
	}
	s.byKid[k.ID] = k
	return nil
}

// parseJWK reads one JWK; nil for a key not meant for signatures.
func parseJWK(raw json.RawMessage) (*Key, error) {
	var j struct {
		Kty, Kid, Alg, Use, Crv string
		N, E, X, Y              string
	}
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, err
	}
	if j.Use != "" && j.Use != "sig" {
		return nil, nil
	}
	k := &Key{ID: j.Kid, Alg: j.Alg}
	switch j.Kty {
	case "RSA":
		n, err1 := b64int(j.N)
		e, err2 := b64int(j.E)
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		if n.BitLen() < 2048 {
			return nil, fmt.Errorf("an RSA key must have at least 2048 bits, got %d", n.BitLen())
		}
		if !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 || e.Bit(0) == 0 {
			return nil, errors.New("an RSA key's exponent must be an odd number from 3 to 2³¹−1")
		}
		k.Pub = &rsa.PublicKey{N: n, E: int(e.Int64())}
	case "EC":
		var curve elliptic.Curve
		switch j.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		case "P-521":
			curve = elliptic.P521()
		default:
			return nil, fmt.Errorf("curve %q is not P-256, P-384 or P-521", j.Crv)
		}
		x, err1 := b64(j.X)
		y, err2 := b64(j.Y)
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		size := (curve.Params().BitSize + 7) / 8
		if len(x) != size || len(y) != size {
			return nil, fmt.Errorf("x and y of a %s key must be %d bytes", j.Crv, size)
		}
		point := append(append([]byte{4}, x...), y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return nil, err
		}
		k.Pub = pub
	case "OKP":
		if j.Crv != "Ed25519" {
			return nil, fmt.Errorf("curve %q is not Ed25519", j.Crv)
		}
		x, err := b64(j.X)
		if err != nil {
			return nil, err
		}
		if len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("x of an Ed25519 key must be %d bytes", ed25519.PublicKeySize)
		}
		k.Pub = ed25519.PublicKey(x)
	default:
		return nil, fmt.Errorf("kty %q is not RSA, EC or OKP", j.Kty)
	}
	if k.Alg != "" && family(k.Alg) != kindOf(k.Pub) {
		return nil, fmt.Errorf("alg %q does not go with a %s key", k.Alg, j.Kty)
	}
	return k, nil
}

func b64(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("a key member is missing")
	}
	return base64.RawURLEncoding.DecodeString(s)
}

func b64int(s string) (*big.Int, error) {
	b, err := b64(s)
	if err != nil {
		return nil, err
	}
	return new(big.Int).SetBytes(b), nil
}

// family is the kind of key an algorithm verifies with: "RSA" (RS*, PS*),
// "EC" (ES*), "OKP" (EdDSA), "HMAC" (HS*), or "" for none.
func family(alg string) string {
	switch alg {
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
		return "RSA"
	case "ES256", "ES384", "ES512":
		return "EC"
	case "EdDSA":
		return "OKP"
	case "HS256", "HS384", "HS512":
		return "HMAC"
	}
	return ""
}

// kindOf is the family of a key.
func kindOf(pub crypto.PublicKey) string {
	switch pub.(type) {
	case *rsa.PublicKey:
		return "RSA"
	case *ecdsa.PublicKey:
		return "EC"
	case ed25519.PublicKey:
		return "OKP"
	case []byte:
		return "HMAC"
	}
	return ""
}

// curveOf is the curve an ES algorithm signs on.
func curveOf(alg string) elliptic.Curve {
	switch alg {
	case "ES256":
		return elliptic.P256()
	case "ES384":
		return elliptic.P384()
	case "ES512":
		return elliptic.P521()
	}
	return nil
}

// HMACKey is a set of one HMAC secret, for HS256, HS384 and HS512.
func HMACKey(secret []byte) *KeySet {
	return &KeySet{byKid: map[string]*Key{}, plain: []*Key{{Pub: secret}}}
}

// Merge returns one set of the keys of sets; nil for none.
func Merge(sets ...*KeySet) *KeySet {
	var out *KeySet
	for _, s := range sets {
		if out == nil {
			out = s
			continue
		}
		out = out.with(s)
	}
	return out
}
