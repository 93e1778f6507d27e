package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
)

// identify derives what r's rules may key it by, in one step: the client's
// address as rules count it (from the peer, or X-Forwarded-For from a
// trusted proxy; see ClientIP), the cleaned path, host (normalised by
// route), header fields and query. It returns the client's identity too, which
// the check listener inspects. An untrusted peer's X-Forwarded-For goes to
// the forwarder detection (forwarders.go), at now.
func (p *Proxy) identify(r *http.Request, st *state, host string, now time.Time) (rules.KeySource, Identity) {
	xff := r.Header.Values("X-Forwarded-For")
	id := st.clientIP.Resolve(r.RemoteAddr, xff)
	if id.XFFMalformed {
		p.metrics.xffMalformed.Inc()
	}
	p.noteForwarder(st, id, xff, now)
	return rules.KeySource{
		Client: rules.ClientPrefix(id.Key, st.table.IPv6Prefix),
		Addr:   id.Client,
		Path:   rules.CleanPath(r.URL.Path),
		Host:   host,
		Header: r.Header,
		Query:  r.URL.RawQuery,
	}, id
}

// Limits on the X-Forwarded-For work done for one request from a trusted
// peer. A header over either limit is treated like a malformed one: Client
// falls back to the peer. A client can use the limits only to be keyed by
// its proxy's address, which it then shares with every other request that
// fell back there; it cannot pick an address of its own.
const (
	// xffMaxBytes bounds the header as if its lines were joined with one
	// comma each.
	xffMaxBytes = 8 << 10
	// xffMaxElements bounds the elements examined right to left, empty
	// ones included, so that a list of commas costs no more than a list of
	// addresses.
	xffMaxElements = 64
)

// ClientIP derives the address a request is keyed by. Client identity is a
// trust decision that fails closed: X-Forwarded-For is read only when the
// TCP peer is inside a configured trusted prefix, and any doubt about the
// header gives the peer's address, never a value the client chose.
// X-Real-IP, Forwarded, True-Client-IP and similar headers are never read.
//
// Addresses are normalised with net/netip before every trust check and in
// every result: an IPv4-mapped IPv6 address (::ffff:192.0.2.1) is the IPv4
// address, and an IPv6 zone is dropped from the peer. Otherwise either
// notation would alias one client to two keys, or slip a trusted address
// past [netip.Prefix.Contains], which matches neither form (the bug class
// of express-rate-limit CVE-2026-30827 and Go CVE-2024-24790).
//
// A ClientIP is immutable after [NewClientIP] and safe for concurrent use.
// The zero value trusts no proxy and keys each IPv6 address by all 128 bits;
// use NewClientIP to configure it.
type ClientIP struct {
	trusted    []netip.Prefix // masked; IPv4 proxies as IPv4 prefixes
	ipv6Prefix int            // bits of an IPv6 client kept in Key; 0 means 128
}

// Identity is the result of [ClientIP.Resolve].
//
// For a remoteAddr that is not an IP address (a unix socket, say) Peer and
// Client are the zero Addr, which callers must not write into headers, and
// Key is 0.0.0.0: every such request shares that one key. No TCP peer can
// have the unspecified address, and X-Forwarded-For elements naming it are
// rejected, so the key is shared by non-IP transports only.
type Identity struct {
	Peer    netip.Addr // TCP peer, unmapped, without zone
	Client  netip.Addr // derived client (full address, unmapped); goes to the origin in X-Forwarded-For
	Key     netip.Addr // what rate limits count: IPv4 as 4 bytes; IPv6 masked to the configured prefix
	FromXFF bool       // Client came from X-Forwarded-For

	// XFFMalformed reports that a trusted peer sent an X-Forwarded-For that
	// was rejected (a malformed element on the walk, more than 8 KiB, or
	// more than 64 elements before the client) and Client fell back to
	// Peer. It is for the edge_client_ip_xff_malformed_total counter.
	XFFMalformed bool
}

// NewClientIP returns a ClientIP that believes X-Forwarded-For only from
// peers inside trusted (which may be empty: then the peer is always the
// client) and keys IPv6 clients by their first ipv6Prefix bits, 32 to 128;
// /64 is the usual choice, since one host commonly holds a whole /64.
//
// Prefixes are masked. An IPv4-mapped prefix (::ffff:10.0.0.0/104) is
// stored as the IPv4 prefix it names (10.0.0.0/8). An IPv6 prefix never
// matches an IPv4 address, even one that covers ::ffff:0:0/96 such as ::/0:
// write IPv4 proxies as IPv4 prefixes. The trusted slice is copied.
//
// All problems are reported at once, joined.
func NewClientIP(trusted []netip.Prefix, ipv6Prefix int) (*ClientIP, error) {
	var errs []error
	if ipv6Prefix < 32 || ipv6Prefix > 128 {
		errs = append(errs, fmt.Errorf("client ip: ipv6 prefix: must be between 32 and 128, got %d", ipv6Prefix))
	}
	ps := make([]netip.Prefix, 0, len(trusted))
	for i, p := range trusted {
		switch {
		case !p.IsValid():
			errs = append(errs, fmt.Errorf("client ip: trusted[%d]: not a valid prefix", i))
		case p.Addr().Is4In6() && p.Bits() < 96:
			errs = append(errs, fmt.Errorf("client ip: trusted[%d]: IPv4-mapped prefix must be at least /96, got %s", i, p))
		case p.Addr().Is4In6():
			ps = append(ps, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked())
		default:
			ps = append(ps, p.Masked())
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &ClientIP{trusted: ps, ipv6Prefix: ipv6Prefix}, nil
}

// Trusted reports whether addr is inside a trusted proxy prefix. An
// IPv4-mapped addr is checked as IPv4 and a zone is ignored. The zero Addr
// is never trusted.
func (c *ClientIP) Trusted(addr netip.Addr) bool {
	addr = addr.Unmap().WithZone("")
	for _, p := range c.trusted {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// Resolve returns the identity of a request whose TCP peer is remoteAddr, in
// the form of [net/http.Request.RemoteAddr] ("192.0.2.1:1234",
// "[2001:db8::1]:1234", "[fe80::1%eth0]:1234"; a bare address is accepted
// too), and whose X-Forwarded-For header lines are xff, as returned by
// Header.Values. Several lines are one list, in order (RFC 9110 §5.3).
//
// If the peer is not trusted, Client is the peer and xff is not read.
//
// If the peer is trusted, xff is walked right to left: trusted elements are
// skipped and the first untrusted one is the client; if every element is
// trusted, the left-most is. Elements are separated by commas with optional
// spaces and tabs (RFC 9110 §5.6.3 OWS). Empty elements are skipped, as RFC
// 9110 §5.6.1.2 asks of a recipient, but count towards the 64-element
// limit. An element is well-formed only if it is
//   - a bare IPv4 address in dotted decimal without leading zeros, or
//   - a bare IPv6 address, with or without square brackets,
//
// as [netip.ParseAddr] reads them. Everything else is malformed, notably
//   - a port ("192.0.2.1:80", "[2001:db8::1]:80"): X-Forwarded-For carries
//     addresses only, and a proxy that appends ports makes every request
//     through it fall back to that proxy's address, which is safe but
//     coarse;
//   - a zone ("fe80::1%eth0"): it only means something on the host that
//     wrote it, and parsing it would intern a string the client chose;
//   - the unspecified address (0.0.0.0, ::), which is no client's address.
//
// If a malformed element is met before the client is found, or xff is more
// than 8 KiB in all, or more than 64 elements are examined without finding
// the client, or xff has no elements, Client is the peer: nothing left of a
// bad element can be believed. Elements left of the client are never
// examined, so whatever a client prepends is ignored.
//
// Resolve does not allocate, except for the error of an address that
// consists of hex digits, dots and colons and still fails to parse.
func (c *ClientIP) Resolve(remoteAddr string, xff []string) Identity {
	peer, ok := parsePeerAddr(remoteAddr)
	if !ok {
		return Identity{Key: netip.IPv4Unspecified()}
	}
	return c.resolvePeer(peer, xff)
}

// resolvePeer is Resolve for a peer address already parsed (unmapped,
// without zone).
func (c *ClientIP) resolvePeer(peer netip.Addr, xff []string) Identity {
	id := Identity{Peer: peer, Client: peer}
	if c.Trusted(peer) {
		client, malformed := c.walkXFF(xff)
		switch {
		case malformed:
			id.XFFMalformed = true
		case client.IsValid():
			id.Client, id.FromXFF = client, true
		}
	}
	id.Key = c.key(id.Client)
	return id
}

// key returns the rate-limit key of a normalised client address
// (ipv6Prefix 0 keeps all 128 bits, as rules.ClientPrefix does).
func (c *ClientIP) key(a netip.Addr) netip.Addr {
	return rules.ClientPrefix(a, c.ipv6Prefix).Addr()
}

// walkXFF finds the client in the X-Forwarded-For lines of a trusted peer.
// It returns the zero Addr and malformed false when the header has no
// elements, and the zero Addr and malformed true when it must not be
// believed.
func (c *ClientIP) walkXFF(xff []string) (client netip.Addr, malformed bool) {
	n := 0
	for i, line := range xff {
		n += len(line)
		if i > 0 {
			n++ // the comma the lines are joined with
		}
		if n > xffMaxBytes {
			return netip.Addr{}, true
		}
	}

	var leftmost netip.Addr // left-most trusted element so far
	examined := 0
	for li := len(xff) - 1; li >= 0; li-- {
		line := xff[li]
		for {
			i := strings.LastIndexByte(line, ',')
			elem := wire.TrimOWS(line[i+1:]) // i == -1: the whole line
			examined++
			if examined > xffMaxElements {
				return netip.Addr{}, true
			}
			if elem != "" {
				a, ok := parseXFFElement(elem)
				if !ok {
					return netip.Addr{}, true
				}
				if !c.Trusted(a) {
					return a, false
				}
				leftmost = a
			}
			if i < 0 {
				break
			}
			line = line[:i]
		}
	}
	return leftmost, false
}

// parseXFFElement parses one trimmed, non-empty X-Forwarded-For element as
// documented on Resolve and returns it unmapped.
func parseXFFElement(s string) (netip.Addr, bool) {
	bracketed := len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']'
	if bracketed {
		s = s[1 : len(s)-1]
	}
	// Reject a zone before netip sees it: ParseAddr would intern it.
	if strings.IndexByte(s, '%') >= 0 {
		return netip.Addr{}, false
	}
	a, ok := parseZonedAddr(s)
	if !ok || (bracketed && !a.Is6()) {
		return netip.Addr{}, false
	}
	a = a.Unmap()
	if a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a, true
}

// parsePeerAddr parses a Request.RemoteAddr. It accepts exactly what
// netip.ParseAddrPort accepts and, failing that, what netip.ParseAddr
// accepts, and returns the address unmapped and without its zone. The zone
// is cut off before parsing, so a link-local peer neither allocates nor
// gets a key apart from the same address written without it.
func parsePeerAddr(s string) (netip.Addr, bool) {
	// "ip:port" and "[ipv6]:port", split as netip.ParseAddrPort splits.
	if i := strings.LastIndexByte(s, ':'); i > 0 && validPort(s[i+1:]) {
		host := s[:i]
		bracketed := host[0] == '['
		ok := true
		if bracketed {
			ok = len(host) >= 2 && host[len(host)-1] == ']'
			if ok {
				host = host[1 : len(host)-1]
			}
		}
		if ok {
			if a, ok := parseZonedAddr(host); ok && a.Is6() == bracketed {
				return a.Unmap(), true
			}
		}
	}
	// A bare address, as tests and some non-net/http servers set.
	a, ok := parseZonedAddr(s)
	return a.Unmap(), ok
}

// parseZonedAddr parses s as netip.ParseAddr does, and returns the address
// without its zone.
func parseZonedAddr(s string) (netip.Addr, bool) {
	zoned := false
	if i := strings.IndexByte(s, '%'); i >= 0 {
		if i == len(s)-1 {
			return netip.Addr{}, false // an empty zone, as ParseAddr rejects
		}
		s, zoned = s[:i], true
	}
	// Screen out what cannot be an address ("unknown", a unix socket's "@")
	// without paying for ParseAddr's error, which is allocated.
	if s == "" {
		return netip.Addr{}, false
	}
	for i := 0; i < len(s); i++ {
		if d := s[i]; !wire.IsHexDigit(d) && d != '.' && d != ':' {
			return netip.Addr{}, false
		}
	}
	a, err := netip.ParseAddr(s)
	if err != nil || (zoned && !a.Is6()) {
		return netip.Addr{}, false
	}
	return a, true
}

// validPort reports whether s is a port as strconv.ParseUint(s, 10, 16)
// accepts it: one or more decimal digits with a value of at most 65535.
func validPort(s string) bool {
	if s == "" {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		d := s[i]
		if d < '0' || d > '9' {
			return false
		}
		n = n*10 + int(d-'0')
		if n > 65535 {
			return false
		}
	}
	return true
}
