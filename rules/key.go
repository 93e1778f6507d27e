package rules

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"net/textproto"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/edgerate/edge/internal/wire"
)

// A client key is what a rule counts requests by: the request's parts named
// by the rule's []KeyPart, in order. The proxy and the replay lab build a
// [KeySource] from a request (or a log record) and compose the key with
// [AppendKey]; people see it as [KeyText] writes it (admin API, top
// talkers, logs, replay reports) and name it back in an admin URL, which
// [ParseKey] turns into the same bytes.

// KeySource holds the parts of one request a client key may use, each
// already normalised. Build it once per request; a KeySource is read,
// never changed, by the functions here.
type KeySource struct {
	// Client is the address the client is counted by, from
	// [ClientPrefix]: an IPv4 address as a /32, an IPv6 address masked
	// to the configured prefix.
	Client netip.Prefix
	// Addr is the client's full address, unmapped, which a rule's allow
	// list is compared with ([Rule.Exempt]); the zero Addr, exempt from
	// nothing, when the client is known by no address. Keys never use it.
	Addr netip.Addr
	// ClientName names a client known by no address, such as a host name
	// in an access log. It is used only when Client is not valid.
	ClientName string
	// Path is the request path cleaned with [CleanPath].
	Path string
	// Host is the request host normalised with [wire.NormalizeHost]; "" if
	// the host is invalid.
	Host string
	// Header gives the request's header field values by canonical name;
	// nil when the request has none.
	Header HeaderValues
	// JA4 is the JA4 fingerprint of the client's TLS ClientHello; "" on a
	// connection without TLS (or a record that has none).
	JA4 string
	// Query is the request's query as it came, the target after its '?'
	// (net/http's URL.RawQuery); "" without one. Query parts read it
	// with [QueryValues]'s rules.
	Query string
	// Claims are the claims of the request's verified token; nil when it
	// has none (no token, or one that is not valid).
	Claims Claims
}

// Claims gives the claims of a verified token to the key parts jwt:CLAIM.
type Claims interface {
	// Claim returns the claim at path, its names joined by NUL
	// ([KeyPart.Name]): a string as it is, a number in its canonical
	// decimal form, with ClaimScalar; ClaimAbsent when the token has no
	// such claim (or something on the path is not an object);
	// ClaimNotScalar for an array, an object, true, false or null.
	Claim(path string) (string, ClaimState)
}

// ClaimState says what [Claims.Claim] found.
type ClaimState uint8

const (
	ClaimAbsent    ClaimState = iota // no such claim
	ClaimScalar                      // a string or a number
	ClaimNotScalar                   // an array, an object, a boolean or null: keyed as missing
)

// HeaderValues gives a request's header field values by canonical name, as
// net/http's Header does.
type HeaderValues interface {
	Values(name string) []string
}

// ClientPrefix returns the prefix a client address is counted by: an IPv4
// address (IPv4-mapped ones unmapped) as a /32, an IPv6 address as its
// first ipv6Bits bits (32 to 128), without its zone. It does not allocate.
func ClientPrefix(a netip.Addr, ipv6Bits int) netip.Prefix {
	if a = a.Unmap(); a.Is4() {
		return netip.PrefixFrom(a, 32) // all its bits: nothing to mask
	}
	a = a.WithZone("")
	if !a.Is6() || ipv6Bits <= 0 || ipv6Bits > 128 {
		ipv6Bits = a.BitLen()
	}
	p, _ := a.Prefix(ipv6Bits) // cannot fail: bits is within the address's length
	return p
}

// AppendKey appends the key of src under the key parts ks to b. Each part
// is tagged and length-prefixed, so that no two different keys encode the
// same bytes. It does not allocate beyond growing b.
//
// A rule keyed by a part the request lacks (a header it lacks or sends
// empty, a cookie or query parameter without a value, a claim of a token
// it does not have, ja4 on a connection without TLS) keys that part by
// the client instead, under its own tag: clients without it are limited
// one by one, never together in one bucket shared by everyone (nor can
// they collide with a client whose value happens to spell an address).
// A rule with when_missing: skip does not apply to such a request at all
// ([Rule.Applies]).
func AppendKey(b []byte, ks []KeyPart, src *KeySource) []byte {
	for _, k := range ks {
		switch k.Kind {
		case KeyIP:
			b = src.appendClient(b, 'i')
		case KeyPath:
			b = appendString(append(b, 'p'), src.Path)
		case KeyHost:
			b = appendString(append(b, 'o'), src.Host)
		case KeyHeader:
			vals := src.headerValues(k.Header)
			if blankValues(vals) {
				b = src.appendClient(b, 'm')
				continue
			}
			b = appendValues(b, 'h', vals)
		case KeyQuery:
			n := queryCount(src.Query, k.Name)
			if n == 0 {
				b = src.appendClient(b, 'm')
				continue
			}
			b = binary.AppendUvarint(append(b, 'q'), uint64(n))
			for q := src.Query; ; {
				raw, ok := nextQuery(&q, k.Name)
				if !ok {
					break
				}
				b = appendUnescaped(binary.AppendUvarint(b, uint64(unescapedLen(raw))), raw)
			}
		default: // one value: ja4, cookie, jwt
			v, ok := src.value(k)
			if !ok {
				b = src.appendClient(b, 'm')
				continue
			}
			b = appendString(append(b, singleTag[k.Kind]), v)
		}
	}
	return b
}

// missingWhat names what a request lacks when a part of kind is missing.
var missingWhat = [...]string{KeyHeader: "the header", KeyJA4: "TLS", KeyCookie: "the cookie",
	KeyQuery: "the query parameter", KeyJWT: "the claim"}

// singleTag tags the parts of one value in a key.
var singleTag = [...]byte{KeyJA4: 'j', KeyCookie: 'c', KeyJWT: 'w'}

// MissingPart reports whether the request src describes lacks the value of
// one of the parts of ks, which a rule with when_missing: skip then does
// not apply to.
func MissingPart(ks []KeyPart, src *KeySource) bool {
	for _, k := range ks {
		switch k.Kind {
		case KeyIP, KeyPath, KeyHost:
		case KeyHeader:
			if blankValues(src.headerValues(k.Header)) {
				return true
			}
		case KeyQuery:
			if queryCount(src.Query, k.Name) == 0 {
				return true
			}
		default:
			if _, ok := src.value(k); !ok {
				return true
			}
		}
	}
	return false
}

// value returns the value of a part of one value (ja4, cookie, jwt) and
// whether the request has one: a cookie sent empty, an empty claim, a claim
// that is an array or an object have none.
func (src *KeySource) value(k KeyPart) (string, bool) {
	var v string
	switch k.Kind {
	case KeyJA4:
		v = src.JA4
	case KeyCookie:
		v = Cookie(src.headerValues("Cookie"), k.Name)
	case KeyJWT:
		if src.Claims == nil {
			return "", false
		}
		var st ClaimState
		if v, st = src.Claims.Claim(k.Name); st != ClaimScalar {
			return "", false
		}
	}
	return v, v != ""
}

// appendClient appends the client under tag: its address's 16 bytes, or,
// for a client known by name, its name under the upper-case tag.
func (src *KeySource) appendClient(b []byte, tag byte) []byte {
	if !src.Client.IsValid() {
		return appendString(append(b, tag-'a'+'A'), src.ClientName)
	}
	a := src.Client.Addr().As16()
	return append(append(b, tag), a[:]...)
}

func (src *KeySource) headerValues(name string) []string {
	if src.Header == nil {
		return nil
	}
	return src.Header.Values(name)
}

// blankValues reports whether a field is absent or has only empty values.
func blankValues(vals []string) bool {
	for _, v := range vals {
		if strings.TrimSpace(v) != "" {
			return false
		}
	}
	return true
}

// appendValues appends a part of several values under tag: the values,
// counted.
func appendValues(b []byte, tag byte, vals []string) []byte {
	b = binary.AppendUvarint(append(b, tag), uint64(len(vals)))
	for _, v := range vals {
		b = appendString(b, v)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// KeyText writes the key of src under ks for people: the parts in order,
// joined by "|". The client is its address (an IPv6 client by its prefix,
// e.g. 2001:db8:1:2::/64) or its name, a header part the header's values
// joined by ", ", a query part the parameter's values decoded and joined
// by ", ", a path or host part the cleaned path or normalised host, a
// cookie, claim or ja4 part its value. A request that lacked a keyed value
// shows that part as "-" followed by its client ("-203.0.113.9").
// [ParseKey] reads the text back.
//
// The text is one-to-one: within a part, the bytes that would read as
// structure ('|', ',', '%' itself, and a value's leading '-') are
// written %XX, as are control bytes and bytes that are not UTF-8 (a JSON
// answer would turn those into U+FFFD, two keys into one text). A key
// without them reads as it always has.
func KeyText(ks []KeyPart, src *KeySource) string {
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteByte('|')
		}
		switch k.Kind {
		case KeyIP:
			writeEscaped(&b, src.clientText())
		case KeyPath:
			writeEscaped(&b, src.Path)
		case KeyHost:
			writeEscaped(&b, src.Host)
		case KeyHeader:
			vals := src.headerValues(k.Header)
			if blankValues(vals) {
				src.writeMissing(&b)
				continue
			}
			for j, v := range vals {
				if j > 0 {
					b.WriteString(", ")
				}
				writeValue(&b, v, j == 0)
			}
		case KeyQuery:
			if queryCount(src.Query, k.Name) == 0 {
				src.writeMissing(&b)
				continue
			}
			for q, j := src.Query, 0; ; j++ {
				raw, ok := nextQuery(&q, k.Name)
				if !ok {
					break
				}
				if j > 0 {
					b.WriteString(", ")
				}
				writeValue(&b, string(appendUnescaped(nil, raw)), j == 0)
			}
		default:
			v, ok := src.value(k)
			if !ok {
				src.writeMissing(&b)
				continue
			}
			writeValue(&b, v, true)
		}
	}
	return b.String()
}

// writeMissing writes the part of a request that lacks its value: "-" and
// the client.
func (src *KeySource) writeMissing(b *strings.Builder) {
	b.WriteByte('-')
	writeEscaped(b, src.clientText())
}

// writeValue writes a value of a part escaped, its leading '-' as %2D when
// it starts the part, so that it cannot read as a missing value's "-".
func writeValue(b *strings.Builder, v string, first bool) {
	if first && strings.HasPrefix(v, "-") {
		b.WriteString("%2D")
		v = v[1:]
	}
	writeEscaped(b, v)
}

// writeEscaped writes s with the bytes KeyText escapes as %XX.
func writeEscaped(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); {
		c := s[i]
		n := 1
		escape := c < 0x20 || c == 0x7f || c == '|' || c == ',' || c == '%'
		if c >= utf8.RuneSelf {
			var r rune
			r, n = utf8.DecodeRuneInString(s[i:])
			escape = r == utf8.RuneError && n == 1
		}
		if escape {
			b.Write([]byte{'%', hex[c>>4], hex[c&15]})
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
}

// clientText writes the client: an address, a masked IPv6 client as its
// prefix, or its name.
func (src *KeySource) clientText() string {
	p := src.Client
	switch {
	case !p.IsValid():
		return src.ClientName
	case p.Bits() < p.Addr().BitLen():
		return p.String()
	}
	return p.Addr().String()
}

// ParseKey turns the text of a key under ks, as [KeyText] writes it, back
// into the bytes [AppendKey] composes for it: %XX within a part is the
// byte it names, escaped by KeyText or not. A client may be written as
// any address inside its prefix; it is keyed by its first ipv6Bits bits as
// [ClientPrefix] keys it. A host is normalised. A client known by name
// has no text that ParseKey reads (only the replay lab knows clients by
// name, and it names no key back).
func ParseKey(ks []KeyPart, text string, ipv6Bits int) ([]byte, error) {
	parts := strings.Split(text, "|")
	if len(parts) != len(ks) {
		return nil, fmt.Errorf("keyed by %d parts (%v), got %d", len(ks), ks, len(parts))
	}
	var b []byte
	for i, k := range ks {
		part := parts[i]
		switch k.Kind {
		case KeyIP:
			src, err := parseClient(part, ipv6Bits)
			if err != nil {
				return nil, err
			}
			b = src.appendClient(b, 'i')
			continue
		case KeyPath:
			p, err := unescapePart(part)
			if err != nil {
				return nil, err
			}
			b = appendString(append(b, 'p'), p)
			continue
		case KeyHost:
			host, err := unescapePart(part)
			if err != nil {
				return nil, err
			}
			// "" is the key part of a request whose host was invalid.
			if host != "" {
				var ok bool
				if host, ok = wire.NormalizeHost(host); !ok {
					return nil, fmt.Errorf("invalid host %q", part)
				}
			}
			b = appendString(append(b, 'o'), host)
			continue
		}
		// A leading "-" is a request without the value; a value's own is
		// %2D.
		if rest, ok := strings.CutPrefix(part, "-"); ok {
			src, err := parseClient(rest, ipv6Bits)
			if err != nil {
				return nil, fmt.Errorf("a part starting with - names the client of a request without %s: %w", missingWhat[k.Kind], err)
			}
			b = src.appendClient(b, 'm')
			continue
		}
		if k.Kind != KeyHeader && k.Kind != KeyQuery {
			v, err := unescapePart(part)
			if err != nil {
				return nil, err
			}
			b = appendString(append(b, singleTag[k.Kind]), v)
			continue
		}
		vals := strings.Split(part, ", ")
		for j, v := range vals {
			var err error
			if vals[j], err = unescapePart(v); err != nil {
				return nil, err
			}
		}
		tag := byte('h')
		if k.Kind == KeyQuery {
			tag = 'q'
		}
		b = appendValues(b, tag, vals)
	}
	return b, nil
}

// unescapePart turns a part's %XX back into the bytes they name.
func unescapePart(s string) (string, error) {
	u, err := url.PathUnescape(s)
	if err != nil {
		return "", fmt.Errorf("part %q: %w", s, err)
	}
	return u, nil
}

// parseClient reads an address or a prefix as a client keyed by ipv6Bits.
func parseClient(s string, ipv6Bits int) (KeySource, error) {
	u, err := unescapePart(s)
	if err != nil {
		return KeySource{}, err
	}
	var a netip.Addr
	if p, err := netip.ParsePrefix(u); err == nil {
		a = p.Addr()
	} else if a, err = netip.ParseAddr(u); err != nil {
		return KeySource{}, fmt.Errorf("invalid address %q", s)
	}
	return KeySource{Client: ClientPrefix(a, ipv6Bits)}, nil
}

// CleanPath returns the path rules match against and keys use: p with "//"
// runs and dot segments resolved, so that "/a/../v1/x" and "//v1/x" cannot
// slip past a "/v1/" prefix, and ";params" cut from each segment (see
// stripParams), so that "/v1;x/y" cannot either; a trailing slash is kept
// and "" is "/". It allocates only for paths that need cleaning.
func CleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] == '/' && !needsCleaning(p) {
		return p
	}
	p = stripParams(p)
	clean := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean
}

// needsCleaning reports whether p holds "//", "/." or ';': one pass where
// three searches would each call out for a path of a few bytes.
func needsCleaning(p string) bool {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case ';':
			return true
		case '/':
			if i+1 < len(p) && (p[i+1] == '/' || p[i+1] == '.') {
				return true
			}
		}
	}
	return false
}

// stripParams cuts the ";params" part off every segment of a path, as
// servlet containers do before they route ("/admin;x=1/y" is "/admin/y"
// to Tomcat). Matching on the stripped path can only make more rules
// match: for a prefix without ';', the stripped path has the prefix
// whenever the path does.
func stripParams(p string) string {
	if strings.IndexByte(p, ';') < 0 {
		return p
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i], _, _ = strings.Cut(s, ";")
	}
	return strings.Join(segs, "/")
}

// ParseKeyPart reads one key part in the config's spelling: ip, path,
// host, ja4, header:NAME (NAME an HTTP token other than Host, returned in
// canonical form), cookie:NAME (NAME a cookie name, an HTTP token),
// query:NAME (NAME the parameter's name decoded, without control bytes) or
// jwt:CLAIM (CLAIM a claim's name, or the names of nested claims joined
// by '.', a name that holds a '.' written in double quotes:
// jwt:"https://example.com/plan").
func ParseKeyPart(s string) (KeyPart, error) {
	switch {
	case s == "ip":
		return KeyPart{Kind: KeyIP}, nil
	case s == "path":
		return KeyPart{Kind: KeyPath}, nil
	case s == "host":
		return KeyPart{Kind: KeyHost}, nil
	case s == "ja4":
		return KeyPart{Kind: KeyJA4}, nil
	case strings.HasPrefix(s, "header:"):
		name := s[len("header:"):]
		if !wire.IsToken(name) {
			return KeyPart{}, fmt.Errorf("header name must be an HTTP token, got %q", s)
		}
		kp := KeyPart{Kind: KeyHeader, Header: textproto.CanonicalMIMEHeaderKey(name)}
		if kp.Header == "Host" {
			// Go's server moves Host out of Request.Header, so this key
			// would be empty for every request: one shared bucket.
			return KeyPart{}, fmt.Errorf("must be host rather than a header, got %q", s)
		}
		return kp, nil
	case strings.HasPrefix(s, "cookie:"):
		name := s[len("cookie:"):]
		if !wire.IsToken(name) {
			return KeyPart{}, fmt.Errorf("cookie name must be an HTTP token, got %q", s)
		}
		return KeyPart{Kind: KeyCookie, Name: name}, nil
	case strings.HasPrefix(s, "query:"):
		name := s[len("query:"):]
		if name == "" || hasControl(name) {
			return KeyPart{}, fmt.Errorf("query parameter name must be written decoded, not empty and without control bytes, got %q", s)
		}
		return KeyPart{Kind: KeyQuery, Name: name}, nil
	case strings.HasPrefix(s, "jwt:"):
		path, err := parseClaimPath(s[len("jwt:"):])
		if err != nil {
			return KeyPart{}, fmt.Errorf("%w, got %q", err, s)
		}
		return KeyPart{Kind: KeyJWT, Name: path}, nil
	}
	return KeyPart{}, fmt.Errorf("must be ip, path, host, ja4, header:NAME, cookie:NAME, query:NAME or jwt:CLAIM, got %q", s)
}

// parseClaimPath reads a claim's path as jwt:CLAIM writes it and returns
// its names joined by NUL.
func parseClaimPath(s string) (string, error) {
	var names []string
	for rest := s; ; {
		var name string
		if q, ok := strings.CutPrefix(rest, `"`); ok {
			end := strings.IndexByte(q, '"')
			if end < 0 {
				return "", fmt.Errorf("a claim name in quotes needs its closing quote")
			}
			name, rest = q[:end], q[end+1:]
			if rest != "" && rest[0] != '.' {
				return "", fmt.Errorf("a quoted claim name must be followed by '.' or the end")
			}
		} else {
			end := strings.IndexByte(rest, '.')
			if end < 0 {
				end = len(rest)
			}
			name, rest = rest[:end], rest[end:]
			if strings.IndexByte(name, '"') >= 0 {
				return "", fmt.Errorf("a claim name holding '\"' must be quoted whole")
			}
		}
		if name == "" || hasControl(name) {
			return "", fmt.Errorf("claim names must not be empty nor hold control bytes")
		}
		names = append(names, name)
		if rest == "" {
			return strings.Join(names, "\x00"), nil
		}
		rest = rest[1:] // the '.'
		if rest == "" {
			return "", fmt.Errorf("a claim path must not end with '.'")
		}
	}
}

// claimSpelling writes a claim path as jwt:CLAIM names it: a name that
// holds a '.' in quotes.
func claimSpelling(path string) string {
	names := strings.Split(path, "\x00")
	for i, n := range names {
		if strings.IndexByte(n, '.') >= 0 {
			names[i] = `"` + n + `"`
		}
	}
	return strings.Join(names, ".")
}

// hasControl reports whether s holds a control byte (NUL included).
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// Cookie returns the value of the first cookie named name in a request's
// Cookie field lines, as browsers send the most specific first (RFC 6265
// §5.4): pairs separated by ';', spaces around them ignored, a value in
// double quotes without them; "" when there is none. Names are compared
// exactly. Cookie does not allocate.
func Cookie(lines []string, name string) string {
	for _, line := range lines {
		for line != "" {
			var pair string
			pair, line, _ = strings.Cut(line, ";")
			k, v, ok := strings.Cut(wire.TrimOWS(pair), "=")
			if !ok || wire.TrimOWS(k) != name {
				continue
			}
			v = wire.TrimOWS(v)
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v
		}
	}
	return ""
}

// QueryValues returns the values of the query parameter name in query
// (decoded, the target after '?'), in order, as query parts key them: the
// query is split at '&', each pair at its first '=', and both sides
// decoded as [net/url.QueryUnescape] does ('+' is a space); a pair that
// holds ';' or an invalid escape is left out, as [net/url.ParseQuery]
// leaves it out. A part keys a request as missing the parameter when every
// value is empty.
func QueryValues(query, name string) []string {
	var out []string
	for q := query; ; {
		raw, ok := nextQuery(&q, name)
		if !ok {
			return out
		}
		out = append(out, string(appendUnescaped(nil, raw)))
	}
}

// queryCount counts the values of parameter name in query, 0 when every
// one is empty (the request is keyed as missing it).
func queryCount(query, name string) int {
	n, blank := 0, true
	for q := query; ; {
		raw, ok := nextQuery(&q, name)
		if !ok {
			break
		}
		n++
		blank = blank && raw == ""
	}
	if blank {
		return 0
	}
	return n
}

// nextQuery returns the next value, still escaped, of parameter name in
// *q, and moves *q past it.
func nextQuery(q *string, name string) (string, bool) {
	for *q != "" {
		var pair string
		pair, *q, _ = strings.Cut(*q, "&")
		if strings.IndexByte(pair, ';') >= 0 {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if unescapedLen(k) < 0 || unescapedLen(v) < 0 || !unescapedEqual(k, name) {
			continue
		}
		return v, true
	}
	return "", false
}

// unescapedLen returns the length of s decoded, or -1 when s holds an
// invalid escape.
func unescapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			if i+2 >= len(s) || !wire.IsHexDigit(s[i+1]) || !wire.IsHexDigit(s[i+2]) {
				return -1
			}
			n -= 2
			i += 2
		}
	}
	return n
}

// appendUnescaped appends s, whose escapes are valid, decoded.
func appendUnescaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b = append(b, wire.Unhex(s[i+1])<<4|wire.Unhex(s[i+2]))
			i += 2
		case '+':
			b = append(b, ' ')
		default:
			b = append(b, c)
		}
	}
	return b
}

// unescapedEqual reports whether s, whose escapes are valid, decodes to
// name.
func unescapedEqual(s, name string) bool {
	j := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '%':
			c = wire.Unhex(s[i+1])<<4 | wire.Unhex(s[i+2])
			i += 2
		case '+':
			c = ' '
		}
		if j >= len(name) || name[j] != c {
			return false
		}
		j++
	}
	return j == len(name)
}

// PartValue returns the value of the key part k in the request src
// describes, as the request sent it (a header's value, a query
// parameter's decoded), and whether it has one: what api_keys reads a key
// or a plan from. It reads any part AppendKey keys by, through KeyText.
func PartValue(k KeyPart, src *KeySource) (string, bool) {
	ks := []KeyPart{k}
	var buf [64]byte
	if b := AppendKey(buf[:0], ks, src); len(b) == 0 || b[0] == 'm' || b[0] == 'M' {
		return "", false // keyed by the client: the request lacks the part
	}
	v, err := unescapePart(KeyText(ks, src))
	return v, err == nil
}
