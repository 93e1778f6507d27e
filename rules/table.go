package rules

import (
	"log/slog"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/internal/wire"
)

// Table is a compiled, validated configuration. It is immutable: build one
// with [Compile], then share it freely between goroutines; a reload builds a
// new Table and swaps it in. Callers must not modify any field, nor anything
// a field points to.
type Table struct {
	Listen      string // proxy listen address, host:port; "" binds none (rls alone, no domains)
	AdminListen string // admin listen address, host:port
	AdminToken  string // bearer token for the admin API; "" = none
	Pop         string // point-of-presence label

	// Secrets are Config.Secrets: any text shown of this configuration
	// passes through Secrets.Redact. Nil holds none.
	Secrets *Secrets
	// Sources are Config.Sources: where each setting not from the file
	// came from ("listen" → "env EDGE_LISTEN"). Nil names none.
	Sources map[string]string

	// AdminHosts are the extra Host names a loopback admin listener
	// answers to, normalised like wire.NormalizeHost, in config order.
	AdminHosts []string

	// Origin is the top-level default upstream; nil when none is set.
	Origin *url.URL
	// topServers are the top level's origin or origins, compiled once;
	// nil when none is set or they are invalid.
	topServers []OriginServer
	// topQueue is the top level's origin_queue, compiled once.
	topQueue OriginQueue

	MaxKeys int // keys tracked across all domains

	// AccuracySample is the live accuracy metric's sample: one client key
	// in AccuracySample; 0 samples none.
	AccuracySample int

	// TrustedProxies are masked prefixes, IPv4-mapped IPv6 prefixes
	// unmapped to IPv4, in config order.
	TrustedProxies []netip.Prefix
	IPv6Prefix     int // prefix length (bits) IPv6 clients are keyed by

	Timeouts       Timeouts
	MaxHeaderBytes int
	// MaxConnections caps the public listener's open connections; 0
	// means [DefaultMaxConnections] of the open-file limit, which only
	// the process that listens can read.
	MaxConnections int
	// FastPath: refusals may be answered at the listener ([Config.FastPath]).
	FastPath bool

	// MaxBufferedBytes bounds the request body bytes buffered by all
	// requests together.
	MaxBufferedBytes Size

	LogLevel  slog.Level
	LogFormat string // "text" or "json"

	Cluster Cluster

	// Check is the check listener's section; nil when it is not set.
	Check *Check
	// RLS is the rate limit service's section; RLS.Listen "" means off.
	RLS RLS
	// TLS is the tls section; TLS.Listen "" means edge serves no TLS.
	TLS TLS
	// H2C: the public listener serves HTTP/2 with prior knowledge.
	H2C bool
	// HTTP2 is the http2 section, defaults applied.
	HTTP2 HTTP2
	// HTTP3 is the http3 section, defaults applied.
	HTTP3 HTTP3
	// ProxyProtocol is the proxy_protocol section; From nil means off.
	ProxyProtocol ProxyProtocol
	// Connections are the connections section's limits; the zero value
	// limits nothing.
	Connections Connections
	// AccessLog is the access_log section; nil writes no access log.
	AccessLog *AccessLog

	// Domains in config order; Domains[i].Index == i.
	Domains []*Domain

	exact    map[string]*Domain // normalised exact host → domain
	wildcard map[string]*Domain // ".suffix" → domain, for "*.suffix"
	catchAll *Domain            // the domain claiming "*", or nil
	byName   map[string]*Domain
}

// Timeouts are [TimeoutsConfig] with defaults applied. A zero duration means
// no bound (only Write may be zero after defaults).
type Timeouts struct {
	ReadHeader time.Duration
	Read       time.Duration
	Write      time.Duration
	Idle       time.Duration
	Upstream   time.Duration
	Shutdown   time.Duration
	DrainDelay time.Duration
}

// Domain is a compiled [DomainConfig]. Callers must not modify it.
type Domain struct {
	// JWT is how the domain's bearer tokens are verified (its own jwt
	// section or the top level's); nil for none.
	JWT *JWT

	Index int      // position in Table.Domains
	Name  string   // metric label, unique within the table
	Hosts []string // normalised like wire.NormalizeHost, config order, "*" and "*.suffix" included

	// Origin is the upstream (the domain's own or the top-level one);
	// nil when Respond is set, the domain is not Proxied, or its routes
	// leave no request to its origins (Routes).
	Origin *url.URL
	// Upstream is the domain's group of origin servers (the domain's own
	// or the top level's; Origin is its first server's URL); nil exactly
	// when Origin is.
	Upstream *Upstream
	// Routes are the domain's routes, in config order: a request goes
	// to the group of the first that matches it, else to Upstream. When
	// Upstream is nil the last route matches every request.
	Routes []*Route
	// OriginQueue is where the domain's requests wait for a server below
	// its max_in_flight (the domain's own or the top level's), in any of
	// its groups.
	OriginQueue OriginQueue
	Respond     *Response

	// Proxied says the public listener serves the domain; Checked, that
	// the check listener answers questions about it (serve). A domain
	// that is only Checked has neither Origin nor Respond.
	Proxied, Checked bool

	// HTTPSRedirect: the plain listener answers the domain's requests
	// with 308 to the same URL on https (https_redirect).
	HTTPSRedirect bool
	// HSTSMaxAge, when not 0, is sent in Strict-Transport-Security on
	// the domain's HTTPS responses; whole seconds.
	HSTSMaxAge time.Duration
	// ACME: tls.acme obtains a certificate for each of its exact hosts
	// (acme: true), and edge answers their ACME challenges.
	ACME bool
	// NoAccessLog: the domain's requests are not in the access log
	// (access_log: false).
	NoAccessLog bool

	MaxKeys   int     // this domain's resolved share of Table.MaxKeys; 0 when it has no rules
	MaxQueued int     // the most requests waiting at once in its rules' queues
	Rules     []*Rule // config order; Rules[i].Index == i

	// Body says how this domain's request bodies are read.
	Body BodyPolicy

	// Shed is the domain's load shedding; nil when it has none.
	Shed *Shed

	// GraphQL is the domain's GraphQL API; nil exactly when no rule has
	// cost_from: graphql.
	GraphQL *GraphQL

	// APIKeys says how the domain's clients are known by an API key and
	// their plans; nil without api_keys. PlanNames are the plans its
	// rules list, sorted.
	APIKeys   *APIKeys
	PlanNames []string

	byName map[string]*Rule
}

// Response is a static response with defaults applied. Callers must not
// modify it.
type Response struct {
	Status      int
	Body        string
	ContentType string // "" only for a block response without a body
}

// Action is what a rule does to a request over its limit. The zero value is
// ActionBlock.
type Action uint8

const (
	ActionBlock Action = iota // answer with the block response
	ActionLog                 // let the request through; report it only
)

// String returns the config spelling, "block" or "log".
func (a Action) String() string { return actionSpelling.name(a) }

// HeaderMode says when a rule's rate-limit headers are sent. The zero value
// is HeadersBlocked.
type HeaderMode uint8

const (
	HeadersBlocked HeaderMode = iota // only on blocked responses
	HeadersAlways                    // on every response the rule matched
	HeadersNone                      // never
)

// String returns the config spelling, "blocked", "always" or "none".
func (m HeaderMode) String() string { return headerSpelling.name(m) }

// KeyKind is one component of a rule's client key. The zero value is KeyIP.
type KeyKind uint8

const (
	KeyIP     KeyKind = iota // the client IP (IPv6 grouped by Table.IPv6Prefix)
	KeyHeader                // a request header's value
	KeyPath                  // the normalised request path
	KeyHost                  // the normalised request host
	KeyJA4                   // the JA4 fingerprint of the client's TLS ClientHello
	KeyCookie                // a request cookie's value
	KeyQuery                 // a query parameter's values, percent-decoded
	KeyJWT                   // a claim of the request's verified token
)

// String returns the config spelling: "ip", "header", "path", "host",
// "ja4", "cookie", "query" or "jwt".
func (k KeyKind) String() string { return keyKindSpelling.name(k) }

// KeyPart is one component of a rule's client key.
type KeyPart struct {
	Kind KeyKind
	// Header is the header name in canonical MIME form
	// ("X-Api-Key"); set only when Kind is KeyHeader.
	Header string
	// Name is the cookie's name (KeyCookie), the query parameter's name
	// decoded (KeyQuery), or the claim's path (KeyJWT): its names joined
	// by NUL, which no claim name in the config may hold ("org\x00id" for
	// jwt:org.id), as [Claims.Claim] takes it.
	Name string
}

// String returns the config spelling, such as "ip", "header:X-Api-Key",
// "cookie:session", "query:api_key" or "jwt:org.id".
func (p KeyPart) String() string {
	switch p.Kind {
	case KeyHeader:
		return "header:" + p.Header
	case KeyCookie, KeyQuery:
		return p.Kind.String() + ":" + p.Name
	case KeyJWT:
		return "jwt:" + claimSpelling(p.Name)
	}
	return p.Kind.String()
}

// Missable reports whether a request may lack the part's value: every
// part but ip, path and host.
func (p KeyPart) Missable() bool {
	return p.Kind != KeyIP && p.Kind != KeyPath && p.Kind != KeyHost
}

// Rule is a compiled [RuleConfig]. Callers must not modify it.
type Rule struct {
	Index      int      // position within its domain, 0..254
	Name       string   // unique within its domain
	PathPrefix string   // "" matches any path
	Methods    []string // nil matches any method; upper-case
	// MatchHeaders are the header fields a request must have (match.headers);
	// nil matches any request.
	MatchHeaders []HeaderMatch
	// SkipMissing is when_missing: skip: the rule does not apply to a
	// request that lacks the value of one of its key's parts
	// ([KeyPart.Missable]); false keys that part by the client instead.
	SkipMissing bool

	Limit             int64         // requests per Period, ≥ 1
	Period            time.Duration // whole seconds, 1s..720h; 0 for a quota
	Key               []KeyPart     // at least one, no duplicates
	Action            Action
	MitigationTimeout time.Duration // 0 = none
	CountBlocked      bool
	Headers           HeaderMode

	// BlockResponse is nil when the proxy's default 429 response applies.
	BlockResponse *Response

	Algorithm algorithm.Algorithm
	// Soft is mode soft: a window that admits with probability limit ÷
	// offered rate when over it (see window.Limit.Soft); CountBlocked is
	// then true and MitigationTimeout 0.
	Soft bool
	// Precision is how finely a sliding window counts: Standard (the zero
	// value) for every other algorithm (see window.Limit.Precision).
	Precision algorithm.Precision
	// Reset is a quota's calendar period; Daily (the zero value) for every
	// other algorithm, which counts by Period (0 for a quota).
	Reset algorithm.Reset
	// Location is the time zone of a quota's calendar, UTC by default;
	// nil for every other algorithm.
	Location *time.Location
	// Burst is a bucket's capacity as configured: 0 means Limit (see
	// Capacity). Always 0 for a window.
	Burst int64
	// MaxDelay, above 0 only for a leaky bucket, makes it a queue: the
	// longest a request waits for its turn.
	MaxDelay time.Duration
	// Lease is a concurrency rule's lease on a slot held in Redis
	// (DefaultLease unless configured); 0 for every other algorithm.
	Lease time.Duration
	// Cost is the units a request takes when CostHeader is "" or the
	// request does not send it: 0..Capacity().
	Cost int64
	// CostHeader names the request header whose value is the cost, in
	// canonical MIME form; "" means none.
	CostHeader string
	// MaxCost is the largest cost CostHeader may give, 1..Capacity(); 0
	// exactly when CostHeader is "".
	MaxCost int64

	// Allow are the clients the rule neither counts nor refuses: masked
	// prefixes, IPv4-mapped ones unmapped, in config order; nil for none.
	Allow []netip.Prefix
	// CountStatus lists the origin response statuses that count, in
	// config order; nil counts every request as it is decided.
	CountStatus []int
	// ResponseCostHeader is the response field the origin reports a
	// request's cost in, in canonical form ("X-Edge-Cost"); "" for none.
	ResponseCostHeader string
	// CostFrom is where the request's cost comes from besides Cost and
	// CostHeader (costfrom.go); CostFromRequest for neither.
	CostFrom CostFrom
	// Plans are the rule's plans, sorted by name; nil for none.
	Plans []Plan
}

// Exempt reports whether the rule lets the client at addr through
// uncounted (Allow). An IPv4-mapped addr is checked as IPv4 and a zone is
// ignored; the zero Addr is never exempt. Exempt does not allocate.
func (r *Rule) Exempt(addr netip.Addr) bool {
	if r.Allow == nil {
		return false
	}
	addr = addr.Unmap().WithZone("")
	for _, p := range r.Allow {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// CountsAfter reports whether the rule counts some of a request only once
// the origin has answered (CountStatus, ResponseCostHeader or cost_from
// origin_time).
func (r *Rule) CountsAfter() bool {
	return r.CountStatus != nil || r.ResponseCostHeader != "" || r.CostFrom == CostFromOriginTime
}

// Counts reports whether a response with this status counts under the
// rule: always, unless CountStatus is set and does not list it.
func (r *Rule) Counts(status int) bool {
	return r.CountStatus == nil || slices.Contains(r.CountStatus, status)
}

// Capacity is the most units the rule can ever hold for one key: a
// bucket's Burst (Limit when Burst is 0), a window's Limit. A request
// costing more could never be allowed.
func (r *Rule) Capacity() int64 {
	if r.Algorithm.Bucket() && r.Burst > 0 {
		return r.Burst
	}
	return r.Limit
}

// MaxFineLimit is the largest limit of a rule of precision fine, whose
// keys near their limit keep a log of their last limit requests.
const MaxFineLimit = 65535

// Matches reports whether the rule applies to a request. path must already
// be normalised by the caller; PathPrefix is compared as a case-sensitive
// byte prefix, and method exactly (methods are case-sensitive, RFC 9110
// §9.1). Matches does not allocate.
func (r *Rule) Matches(method, path string) bool {
	return matches(r.PathPrefix, r.Methods, method, path)
}

// matches reports whether a request with method and path has prefix and
// is of methods (nil: any), compared exactly.
func matches(prefix string, methods []string, method, path string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	if methods == nil {
		return true
	}
	for _, m := range methods {
		if m == method {
			return true
		}
	}
	return false
}

// Applies reports whether the rule applies to a request with method, as
// src describes it: [Rule.Matches] its method and path, it has every field
// of MatchHeaders, and, under when_missing: skip, every part of the key
// has a value. Exempt clients are [Rule.Exempt]'s. Applies does not
// allocate.
func (r *Rule) Applies(method string, src *KeySource) bool {
	return r.Matches(method, src.Path) && headersMatch(r.MatchHeaders, src.Header) &&
		!(r.SkipMissing && MissingPart(r.Key, src))
}

// Rule returns the domain's rule with the given name.
func (d *Domain) Rule(name string) (*Rule, bool) {
	r, ok := d.byName[name]
	return r, ok
}

// Domain returns the domain with the given name.
func (t *Table) Domain(name string) (*Domain, bool) {
	d, ok := t.byName[name]
	return d, ok
}

// Lookup returns the domain that serves host, the raw Host header value of a
// request (normalised with [wire.NormalizeHost]). An exact host beats a wildcard,
// a longer wildcard suffix beats a shorter one, and the catch-all "*" takes
// whatever is left. It reports false when the host is invalid or no domain
// claims it. Lookup does not allocate for an already-normalised host and is
// safe for concurrent use.
func (t *Table) Lookup(host string) (*Domain, bool) {
	h, ok := wire.NormalizeHost(host)
	if !ok {
		return nil, false
	}
	return t.LookupHost(h)
}

// LookupHost is [Table.Lookup] for a host already normalised with
// [wire.NormalizeHost], for a caller that keeps the normalised host (a request
// normalises its Host once). It does not allocate.
func (t *Table) LookupHost(h string) (*Domain, bool) {
	if t == nil || h == "" {
		return nil, false
	}
	if d, ok := t.exact[h]; ok {
		return d, true
	}
	if len(t.wildcard) > 0 && h[0] != '[' && !isIPv4(h) {
		// Try the suffixes from the longest down: each '.' starts one, and
		// the first match is therefore the longest wildcard. The suffix
		// keeps its leading '.', so "*.example.com" (key ".example.com")
		// never matches "example.com" itself.
		for i := 0; i < len(h); i++ {
			if h[i] == '.' {
				if d, ok := t.wildcard[h[i:]]; ok {
					return d, true
				}
			}
		}
	}
	if t.catchAll != nil {
		return t.catchAll, true
	}
	return nil, false
}

// isIPv4 reports whether h is a dotted-quad address literal. Wildcards never
// match address literals: "*.3.4" must not claim 1.2.3.4.
func isIPv4(h string) bool {
	for i := 0; i < len(h); i++ {
		if c := h[i]; c != '.' && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}
