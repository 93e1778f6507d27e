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
}

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
// A rule keyed by a header the request lacks (or sends empty) keys that
// part by the client instead, under its own tag: clients without the
// header are limited one by one, never together in one bucket shared by
// everyone (nor can they collide with a client whose header value happens
// to spell an address). A rule keyed by ja4 keys a request without TLS the
// same way: by its client, under the tag of a missing part.
func AppendKey(b []byte, ks []KeyPart, src *KeySource) []byte {
	for _, k := range ks {
		switch k.Kind {
		case KeyIP:
			b = src.appendClient(b, 'i')
		case KeyHeader:
			vals := src.headerValues(k.Header)
			if blankValues(vals) {
				b = src.appendClient(b, 'm')
				continue
			}
			b = appendHeaderPart(b, vals)
		case KeyPath:
			b = appendString(append(b, 'p'), src.Path)
		case KeyHost:
			b = appendString(append(b, 'o'), src.Host)
		case KeyJA4:
			if src.JA4 == "" {
				b = src.appendClient(b, 'm')
				continue
			}
			b = appendString(append(b, 'j'), src.JA4)
		}
	}
	return b
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

// appendHeaderPart appends a header key part: its values, counted.
func appendHeaderPart(b []byte, vals []string) []byte {
	b = binary.AppendUvarint(append(b, 'h'), uint64(len(vals)))
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
// joined by ", ", a path or host part the cleaned path or normalised host.
// A request that lacked a keyed header shows that part as "-" followed by
// its client ("-203.0.113.9"). [ParseKey] reads the text back.
//
// The text is one-to-one: within a part, the bytes that would read as
// structure ('|', ',', '%' itself, and a header part's leading '-') are
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
		case KeyHeader:
			vals := src.headerValues(k.Header)
			if blankValues(vals) {
				b.WriteByte('-')
				writeEscaped(&b, src.clientText())
				continue
			}
			for j, v := range vals {
				switch {
				case j > 0:
					b.WriteString(", ")
				case strings.HasPrefix(v, "-"):
					b.WriteString("%2D") // not the "-" of a missing header
					v = v[1:]
				}
				writeEscaped(&b, v)
			}
		case KeyPath:
			writeEscaped(&b, src.Path)
		case KeyHost:
			writeEscaped(&b, src.Host)
		case KeyJA4:
			if src.JA4 == "" {
				b.WriteByte('-')
				writeEscaped(&b, src.clientText())
				continue
			}
			fp := src.JA4
			if strings.HasPrefix(fp, "-") {
				b.WriteString("%2D") // not the "-" of a request without TLS
				fp = fp[1:]
			}
			writeEscaped(&b, fp)
		}
	}
	return b.String()
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
		case KeyHeader:
			// A leading "-" is a missing header; a value's own is %2D.
			if rest, ok := strings.CutPrefix(part, "-"); ok {
				src, err := parseClient(rest, ipv6Bits)
				if err != nil {
					return nil, fmt.Errorf("a part starting with - names the client of a request without the header: %w", err)
				}
				b = src.appendClient(b, 'm')
				continue
			}
			vals := strings.Split(part, ", ")
			for j, v := range vals {
				var err error
				if vals[j], err = unescapePart(v); err != nil {
					return nil, err
				}
			}
			b = appendHeaderPart(b, vals)
		case KeyPath:
			p, err := unescapePart(part)
			if err != nil {
				return nil, err
			}
			b = appendString(append(b, 'p'), p)
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
		case KeyJA4:
			if rest, ok := strings.CutPrefix(part, "-"); ok {
				src, err := parseClient(rest, ipv6Bits)
				if err != nil {
					return nil, fmt.Errorf("a part starting with - names the client of a request without TLS: %w", err)
				}
				b = src.appendClient(b, 'm')
				continue
			}
			fp, err := unescapePart(part)
			if err != nil {
				return nil, err
			}
			b = appendString(append(b, 'j'), fp)
		}
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
// host, ja4 or header:NAME (NAME an HTTP token other than Host, returned
// in canonical form).
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
	}
	return KeyPart{}, fmt.Errorf("must be ip, path, host, ja4 or header:NAME, got %q", s)
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
