package rules

import (
	"fmt"
	"log/slog"
	"math"
	"mime"
	"net"
	"net/netip"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/internal/wire"
)

// Bounds of a rule, enforced by [Compile]: a compiled rule is counted as
// it is, so they must stay within what the counters can hold (the proxy,
// which hands rules to the counters, checks that at compile time).
const (
	// MaxRulesPerDomain is the most rules one domain may have.
	MaxRulesPerDomain = 255
	// MaxLimit is the largest limit of a rule.
	MaxLimit = 1_000_000_000
	// MaxPeriod is the longest period of a rule.
	MaxPeriod = 720 * time.Hour
	// MaxMitigation is the longest mitigation_timeout of a rule.
	MaxMitigation = 24 * time.Hour
	// MaxCost is the largest cost of one request, configured or sent in
	// a rule's cost_header.
	MaxCost = 1_000_000
	// MaxFill is the longest an empty bucket may take to fill again,
	// burst × period / limit: it bounds a bucket's burst.
	MaxFill = 1192 * time.Hour
	// MaxQueueDelay is the longest max_delay of a leaky_bucket queue.
	MaxQueueDelay = time.Hour
	// MaxQueued is the largest max_queued of a domain.
	MaxQueued = 1_000_000
)

// Bounds enforced by [Compile].
const (
	minPeriod      = time.Second
	minMitigation  = time.Second
	minQueueDelay  = time.Millisecond
	minTimeout     = time.Millisecond
	maxBodyBytes   = 32 << 10
	maxLabelBytes  = 64
	minHeaderBytes = 1 << 10
	maxHeaderBytes = 1 << 20
	minIPv6Prefix  = 32
	maxIPv6Prefix  = 128
	// maxConnections is Linux's default ceiling on open files per
	// process (fs.nr_open): a cap above it could never be reached.
	maxConnections = 1 << 20
	// maxAccuracySample is the sparsest accuracy sample: one key in a
	// billion.
	maxAccuracySample = 1_000_000_000
)

// Compile applies defaults to the zero fields of cfg, validates it and
// returns the immutable [Table] the proxy matches requests against.
//
// On failure it returns a nil Table and an error that joins (errors.Join)
// one [*FieldError] per problem, in config order, each reading
// "path: message" with the offending value, for example
//
//	domains[0].rules[1].period: must be at least 1s, got 500ms
//
// A required key whose value is zero is reported as "required" unless
// cfg.Given says the file wrote it. Values at a secret's path ([IsSecret])
// are never shown.
//
// Compile never panics, whatever cfg holds, does not retain cfg, and is safe
// to call from several goroutines at once (it touches no shared state).
//
// Compile is longer than most functions because it walks the file in its
// own order, top-level keys and then each section, so that problems are
// reported in the order a reader meets them; each section's checks are
// functions of their own.
func Compile(cfg Config) (*Table, error) {
	p := problems{given: cfg.Given}
	t := &Table{
		Listen:      cfg.Listen,
		AdminListen: cfg.AdminListen,
		Pop:         cfg.Pop,
		AdminToken:  cfg.AdminToken,
		Secrets:     cfg.Secrets,
		exact:       make(map[string]*Domain),
		wildcard:    make(map[string]*Domain),
		byName:      make(map[string]*Domain),
	}

	if t.AdminListen == "" {
		t.AdminListen = DefaultAdminListen
	}
	switch {
	case !rlsOnly(cfg) && t.Listen == "":
		t.Listen = DefaultListen
		checkListeners(&p, t.Listen, t.AdminListen)
	case !rlsOnly(cfg):
		checkListeners(&p, t.Listen, t.AdminListen)
	case t.Listen != "":
		// Only the rate limit service: there is nothing for a public
		// listener to serve, so edge binds none (Table.Listen "").
		p.add("listen", "has no domain to serve: with rls and no domains edge binds no public listener; remove listen or add a domain, got %q", t.Listen)
		t.Listen = ""
	default:
		checkAddr(&p, "admin_listen", t.AdminListen)
	}
	t.AdminHosts = compileAdminHosts(&p, cfg.AdminHosts)
	t.Check = compileCheck(&p, cfg.Check, t.Listen, t.AdminListen)

	if t.Pop == "" {
		t.Pop = DefaultPop
	}
	checkLabel(&p, "pop", t.Pop)

	if cfg.Origin != "" {
		t.Origin = parseOrigin(&p, "origin", cfg.Origin)
	}

	t.MaxKeys = cfg.MaxKeys
	if t.MaxKeys == 0 {
		t.MaxKeys = DefaultMaxKeys
	}
	maxKeysOK := t.MaxKeys >= 1 && t.MaxKeys <= math.MaxInt32
	if !maxKeysOK {
		p.add("max_keys", "must be between 1 and %d, got %d", math.MaxInt32, t.MaxKeys)
	}

	t.AccuracySample = cfg.AccuracySample
	if t.AccuracySample == 0 && !cfg.Given["accuracy_sample"] {
		t.AccuracySample = DefaultAccuracySample
	}
	if t.AccuracySample < 0 || t.AccuracySample > maxAccuracySample {
		p.add("accuracy_sample", "must be between 0 (off) and %d, got %d", maxAccuracySample, t.AccuracySample)
	}

	t.TrustedProxies = compileTrustedProxies(&p, cfg.ClientIP.TrustedProxies)
	t.IPv6Prefix = cfg.ClientIP.IPv6Prefix
	if t.IPv6Prefix == 0 {
		t.IPv6Prefix = DefaultIPv6Prefix
	}
	if t.IPv6Prefix < minIPv6Prefix || t.IPv6Prefix > maxIPv6Prefix {
		p.add("client_ip.ipv6_prefix", "must be between %d and %d, got %d",
			minIPv6Prefix, maxIPv6Prefix, t.IPv6Prefix)
	}

	t.Timeouts = compileTimeouts(&p, cfg.Timeouts)

	t.MaxHeaderBytes = cfg.MaxHeaderBytes
	if t.MaxHeaderBytes == 0 {
		t.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if t.MaxHeaderBytes < minHeaderBytes || t.MaxHeaderBytes > maxHeaderBytes {
		p.add("max_header_bytes", "must be between %d and %d, got %d",
			minHeaderBytes, maxHeaderBytes, t.MaxHeaderBytes)
	}

	t.MaxConnections = cfg.MaxConnections
	t.FastPath = cfg.FastPath == nil || *cfg.FastPath
	if cfg.MaxConnections < 0 || cfg.MaxConnections > maxConnections {
		p.add("max_connections", "must be between 1 and %d, got %d", maxConnections, cfg.MaxConnections)
	}

	t.LogLevel, t.LogFormat = compileLog(&p, cfg.Log)
	t.Cluster = compileCluster(&p, cfg.Cluster)
	t.RLS = compileRLS(&p, cfg.RLS, t)

	compileDomains(&p, t, cfg)
	compileBodies(&p, t, cfg)
	if maxKeysOK {
		shareMaxKeys(&p, t, cfg.Domains)
	} else {
		// Still report domain values that are wrong whatever the total.
		for i, dc := range cfg.Domains {
			if dc.MaxKeys < 0 {
				p.add(fmt.Sprintf("domains[%d].max_keys", i), "must be at least 1, got %d", dc.MaxKeys)
			}
		}
	}

	if err := p.err(); err != nil {
		return nil, err
	}
	return t, nil
}

// checkListeners validates both listen addresses and that they cannot
// collide: equal strings, or the same non-zero port where either host is
// unspecified (it binds every address) or both hosts are equal.
func checkListeners(p *problems, listen, admin string) {
	lh, lp, lok := checkAddr(p, "listen", listen)
	ah, ap, aok := checkAddr(p, "admin_listen", admin)
	if !lok || !aok {
		return
	}
	if collide(listen, lh, lp, admin, ah, ap) {
		p.add("admin_listen", "must differ from listen (%q), got %q", listen, admin)
	}
}

func checkAddr(p *problems, path, addr string) (host string, port uint64, ok bool) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		p.add(path, "must be host:port, got %q", addr)
		return "", 0, false
	}
	port, err = strconv.ParseUint(ps, 10, 16)
	if err != nil {
		p.add(path, "port must be a number from 0 to 65535, got %q", addr)
		return "", 0, false
	}
	return host, port, true
}

// compileAdminHosts validates admin_hosts: exact host names or addresses,
// as a domain's hosts are written, without wildcards or duplicates.
func compileAdminHosts(p *problems, hosts []string) []string {
	var out []string
	seen := make(map[string]int)
	for i, raw := range hosts {
		path := fmt.Sprintf("admin_hosts[%d]", i)
		h, kind, ok := parseConfigHost(p, path, raw)
		switch {
		case !ok:
			continue
		case kind != hostExact:
			p.add(path, "must be a host name, not a wildcard, got %q", raw)
			continue
		}
		if prev, dup := seen[h]; dup {
			p.add(path, "%q duplicates admin_hosts[%d]", raw, prev)
			continue
		}
		seen[h] = i
		out = append(out, h)
	}
	return out
}

// parseOrigin validates an upstream URL. It returns nil when raw is invalid.
func parseOrigin(p *problems, path, raw string) *url.URL {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Opaque != "" {
		p.add(path, "must be an absolute http or https URL, got %q", raw)
		return nil
	}
	if u.User != nil {
		// Redacted, so that a password in the config does not reach logs.
		p.add(path, "must not contain user info, got %q", u.Redacted())
		return nil
	}
	ok := true
	if u.RawQuery != "" || u.ForceQuery {
		p.add(path, "must not contain a query, got %q", raw)
		ok = false
	}
	if strings.Contains(raw, "#") {
		p.add(path, "must not contain a fragment, got %q", raw)
		ok = false
	}
	if !ok {
		return nil
	}
	return u
}

// checkLabel validates a value used as a metric label: pop, domain and rule
// names.
func checkLabel(p *problems, path, v string) bool {
	switch {
	case v == "":
		p.add(path, "must not be empty")
	case len(v) > maxLabelBytes:
		p.add(path, "must be at most %d bytes, got %q (%d bytes)", maxLabelBytes, v, len(v))
	case !isLabel(v):
		p.add(path, "must contain only [A-Za-z0-9_.-], got %q", v)
	default:
		return true
	}
	return false
}

func isLabel(v string) bool {
	for i := 0; i < len(v); i++ {
		if !isLabelByte(v[i]) {
			return false
		}
	}
	return true
}

func isLabelByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '_' || c == '.' || c == '-'
}

func compileTrustedProxies(p *problems, list []string) []netip.Prefix {
	return compilePrefixes(p, "client_ip.trusted_proxies", list)
}

// compilePrefixes compiles the list at path of CIDR prefixes or bare IPs
// (a bare IP is a /32 or /128) that client addresses are compared with:
// masked, and IPv4-mapped ones unmapped.
func compilePrefixes(p *problems, path string, list []string) []netip.Prefix {
	var out []netip.Prefix
	for i, s := range list {
		path := fmt.Sprintf("%s[%d]", path, i)
		var pfx netip.Prefix
		if strings.Contains(s, "/") {
			var err error
			pfx, err = netip.ParsePrefix(s)
			if err != nil {
				p.add(path, "must be an IP address or CIDR prefix, got %q", s)
				continue
			}
		} else {
			addr, err := netip.ParseAddr(s)
			if err != nil {
				p.add(path, "must be an IP address or CIDR prefix, got %q", s)
				continue
			}
			if addr.Zone() != "" {
				p.add(path, "must not have a zone, got %q", s)
				continue
			}
			pfx = netip.PrefixFrom(addr, addr.BitLen())
		}
		pfx = pfx.Masked()
		// Client addresses are unmapped before they are compared, so a
		// mapped prefix must be too or it would never match. Masking a
		// prefix shorter than /96 clears the ::ffff: marker, so a mapped
		// address here always has at least 96 bits.
		if pfx.Addr().Is4In6() {
			pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
		}
		out = append(out, pfx)
	}
	return out
}

func compileTimeouts(p *problems, c TimeoutsConfig) Timeouts {
	t := Timeouts{
		ReadHeader: c.ReadHeader,
		Read:       c.Read,
		Write:      c.Write,
		Idle:       c.Idle,
		Upstream:   c.Upstream,
		Shutdown:   c.Shutdown,
		DrainDelay: c.DrainDelay,
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration // 0: zero means off
		max  time.Duration
	}{
		{"read_header", &t.ReadHeader, DefaultReadHeaderTimeout, time.Hour},
		{"read", &t.Read, DefaultReadTimeout, 24 * time.Hour},
		{"write", &t.Write, 0, 24 * time.Hour},
		{"idle", &t.Idle, DefaultIdleTimeout, 24 * time.Hour},
		{"upstream", &t.Upstream, DefaultUpstreamTimeout, 24 * time.Hour},
		{"shutdown", &t.Shutdown, DefaultShutdownTimeout, time.Hour},
		{"drain_delay", &t.DrainDelay, 0, time.Hour},
	} {
		checkDuration(p, "timeouts."+f.name, *f.v, minTimeout, f.max, f.def == 0)
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	return t
}

// checkDuration reports a non-zero duration outside min..max. off says
// whether 0 means off for this key (else 0 means its default, or, for a
// required key, is reported by the caller).
func checkDuration(p *problems, path string, v, min, max time.Duration, off bool) {
	switch {
	case v == 0 || (v >= min && v <= max):
	case off:
		p.add(path, "must be 0 (off) or between %s and %s, got %s", fmtDuration(min), fmtDuration(max), fmtDuration(v))
	default:
		p.add(path, "must be between %s and %s, got %s", fmtDuration(min), fmtDuration(max), fmtDuration(v))
	}
}

// fmtDuration writes d as a config file would: "1h" and "1m" rather than
// Go's "1h0m0s" and "1m0s".
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func compileLog(p *problems, c LogConfig) (slog.Level, string) {
	var level slog.Level
	switch c.Level {
	case "", "info":
		level = slog.LevelInfo
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		p.add("log.level", "must be debug, info, warn or error, got %q", c.Level)
	}
	format := c.Format
	switch format {
	case "":
		format = "text"
	case "text", "json":
	default:
		p.add("log.format", "must be text or json, got %q", c.Format)
	}
	return level, format
}

// hostClaim records where a normalised host was first listed.
type hostClaim struct{ domain, host int }

// rlsOnly reports whether cfg runs edge as the rate limit service alone:
// rls.listen set, no domains and no check section (whose questions the
// domains decide). Then domains may be left out and no public listener is
// bound.
func rlsOnly(cfg Config) bool {
	return len(cfg.Domains) == 0 && cfg.RLS.Listen != "" && cfg.Check == nil
}

func compileDomains(p *problems, t *Table, cfg Config) {
	if len(cfg.Domains) == 0 {
		if !rlsOnly(cfg) {
			p.missing("domains", "", "must list at least one domain")
		}
		return
	}
	claims := make(map[string]hostClaim)
	names := make(map[string]int)
	for i, dc := range cfg.Domains {
		path := fmt.Sprintf("domains[%d]", i)
		d := &Domain{Index: i, byName: make(map[string]*Rule)}
		t.Domains = append(t.Domains, d)

		first := claimHosts(p, t, d, path, dc.Hosts, claims)
		nameDomain(p, t, d, path, dc.Name, first, names)

		compileServe(p, d, path, dc, t.Check != nil)
		switch {
		case !d.Proxied: // compileServe reported an origin or respond
		case dc.Origin != "" && dc.Respond != nil:
			p.add(path, "set origin or respond, not both")
		case dc.Origin != "":
			d.Origin = parseOrigin(p, path+".origin", dc.Origin)
		case dc.Respond != nil:
			d.Respond = compileResponse(p, path+".respond", *dc.Respond, 200, 599, DefaultRespondStatus, true)
		case cfg.Origin != "":
			if t.Origin != nil { // nil when invalid; that error is already reported
				u := *t.Origin
				d.Origin = &u
			}
		default:
			p.add(path, "no upstream: set origin or respond here, or origin at the top level (or serve check, to answer only the check listener)")
		}

		if len(dc.Rules) > MaxRulesPerDomain {
			p.add(path+".rules", "must have at most %d rules, got %d", MaxRulesPerDomain, len(dc.Rules))
		}
		ruleNames := make(map[string]int)
		for j, rc := range dc.Rules {
			r := compileRule(p, path, j, rc, ruleNames)
			if r.MaxDelay > 0 && t.Cluster.Store == StoreRedis && t.Cluster.Sync == SyncBatched {
				// A queue's turns need the one shared level: each node's
				// own level would let every node queue its own requests.
				p.add(fmt.Sprintf("%s.rules[%d].max_delay", path, j),
					"a leaky_bucket queue (max_delay above 0) is not supported with cluster.sync batched (use exact), got %s", fmtDuration(r.MaxDelay))
			}
			if r.Algorithm.Bucket() && t.Cluster.Sync == SyncShare {
				p.add(fmt.Sprintf("%s.rules[%d].algorithm", path, j),
					"is not supported yet with cluster.sync share (windows, quotas and concurrency are; a bucket's rate and burst are not split), got %q", r.Algorithm.String())
			}
			if r.Precision == algorithm.Fine && (t.Cluster.Store == StoreRedis || t.Cluster.Sync == SyncShare) {
				// Redis holds a key's count as two counters, which every
				// node reads and writes; a log of a key's last requests
				// would have to live there too, for each request.
				p.add(fmt.Sprintf("%s.rules[%d].precision", path, j),
					"fine is not supported with a cluster that shares counters (cluster.store redis, or cluster.sync share): the log of a key near its limit is one node's, while the PoP's count is two counters; use standard")
			}
			if r.Algorithm == algorithm.Concurrency && t.Cluster.Store == StoreRedis && t.Cluster.Sync == SyncBatched {
				// Slots are leases in Redis, taken and given back by
				// each request: a batch of counts cannot hold them.
				p.add(fmt.Sprintf("%s.rules[%d].algorithm", path, j),
					"concurrency with cluster.store redis needs cluster.sync exact (slots are leases taken in Redis per request), got sync %s", t.Cluster.Sync)
			}
			checkCountsAfter(p, fmt.Sprintf("%s.rules[%d]", path, j), r, dc.Respond != nil)
			if d.Checked {
				checkCheckedRule(p, fmt.Sprintf("%s.rules[%d]", path, j), r)
			}
			d.Rules = append(d.Rules, r)
			if _, dup := d.byName[r.Name]; !dup && r.Name != "" {
				d.byName[r.Name] = r
			}
		}
		d.Shed = compileShed(p, path, dc)
		if d.Shed != nil && d.Checked {
			p.add(path+".shed", "sheds by the requests in flight to the origin, which the check listener never sees (set serve to proxy)")
		}
		switch q := dc.MaxQueued; {
		case q == 0:
			d.MaxQueued = DefaultMaxQueued
		case q < 1 || q > MaxQueued:
			p.add(path+".max_queued", "must be between 1 and %d, got %d", MaxQueued, q)
		default:
			d.MaxQueued = q
		}
	}
}

// claimHosts validates the hosts of domain d and enters them in t's lookup
// maps. claims maps each host seen so far, in any domain, to where it was
// listed, so that a host is never silently served by two domains. It
// returns hosts[0] normalised, or "" when hosts[0] is in error.
func claimHosts(p *problems, t *Table, d *Domain, path string, hosts []string, claims map[string]hostClaim) (first string) {
	if len(hosts) == 0 {
		p.missing(path+".hosts", "", "must list at least one host")
	}
	for j, raw := range hosts {
		hpath := fmt.Sprintf("%s.hosts[%d]", path, j)
		h, kind, ok := parseConfigHost(p, hpath, raw)
		if !ok {
			continue
		}
		if prev, dup := claims[h]; dup {
			if prev.domain == d.Index {
				p.add(hpath, "%q is already claimed by domains[%d].hosts[%d]", h, prev.domain, prev.host)
			} else {
				p.add(hpath, "%q is already claimed by domains[%d]", h, prev.domain)
			}
			continue
		}
		claims[h] = hostClaim{d.Index, j}
		d.Hosts = append(d.Hosts, h)
		if j == 0 {
			first = h
		}
		switch kind {
		case hostCatchAll:
			t.catchAll = d
		case hostWildcard:
			t.wildcard[h[1:]] = d // "*.example.com" → ".example.com"
		default:
			t.exact[h] = d
		}
	}
	return first
}

// nameDomain sets d.Name to name or, when that is empty, to a default
// derived from first, the normalised hosts[0], and checks it is unique.
// names maps the names seen so far to their domain's index.
func nameDomain(p *problems, t *Table, d *Domain, path, name, first string, names map[string]int) {
	d.Name = name
	if d.Name == "" {
		if first == "" {
			return // hosts[0] is in error, and that error says what to fix
		}
		d.Name = defaultDomainName(first)
		if len(d.Name) > maxLabelBytes {
			p.add(path+".name", "must be set: the default from hosts[0], %q, is longer than %d bytes",
				d.Name, maxLabelBytes)
			return
		}
	} else if !checkLabel(p, path+".name", d.Name) {
		return
	}
	if prev, dup := names[d.Name]; dup {
		if name == "" {
			p.add(path+".name", "%q, the default from hosts[0], is used by domains[%d]; set name", d.Name, prev)
		} else {
			p.add(path+".name", "%q is used by domains[%d]", d.Name, prev)
		}
		return
	}
	names[d.Name] = d.Index
	t.byName[d.Name] = d
}

// defaultDomainName derives a label-safe name from a normalised host:
// "*.example.com" becomes "_.example.com", "[::1]" becomes "___1_".
func defaultDomainName(host string) string {
	if isLabel(host) {
		return host
	}
	b := []byte(host)
	for i, c := range b {
		if !isLabelByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

// shareMaxKeys resolves each domain's share of t.MaxKeys: an explicit
// max_keys is kept, and what the explicit ones leave over is split equally
// (rounding down) among the rest.
func shareMaxKeys(p *problems, t *Table, domains []DomainConfig) {
	var explicit int64
	var implicit []int
	ok := true
	for i, dc := range domains {
		switch {
		case dc.MaxKeys == 0 && len(dc.Rules) == 0:
			// A domain without rules holds no counters: it takes no share.
		case dc.MaxKeys == 0:
			implicit = append(implicit, i)
		case dc.MaxKeys < 0:
			p.add(fmt.Sprintf("domains[%d].max_keys", i), "must be at least 1, got %d", dc.MaxKeys)
			ok = false
		case dc.MaxKeys > t.MaxKeys:
			p.add(fmt.Sprintf("domains[%d].max_keys", i), "must be at most max_keys (%d), got %d",
				t.MaxKeys, dc.MaxKeys)
			ok = false
		default:
			explicit += int64(dc.MaxKeys)
			if i < len(t.Domains) {
				t.Domains[i].MaxKeys = dc.MaxKeys
			}
		}
	}
	if !ok {
		return
	}
	if explicit > int64(t.MaxKeys) {
		p.add("max_keys", "must be at least the sum of the domains' max_keys, %d, got %d", explicit, t.MaxKeys)
		return
	}
	if len(implicit) == 0 {
		return
	}
	left := int64(t.MaxKeys) - explicit
	share := int(left / int64(len(implicit)))
	for _, i := range implicit {
		if share < 1 {
			p.add(fmt.Sprintf("domains[%d].max_keys", i),
				"must resolve to at least 1, got 0 (%d keys left over / %d domains without max_keys)",
				left, len(implicit))
			continue
		}
		if i < len(t.Domains) {
			t.Domains[i].MaxKeys = share
		}
	}
}

type hostKind uint8

const (
	hostExact hostKind = iota
	hostWildcard
	hostCatchAll
)

// parseConfigHost normalises and validates one configured host. It reports
// the problem itself and returns ok false when the host is invalid.
func parseConfigHost(p *problems, path, raw string) (string, hostKind, bool) {
	for i := 0; i < len(raw); i++ {
		if raw[i] >= 0x80 {
			// Request Host headers are ASCII (Go answers 400 otherwise), so
			// an internationalised name must be configured as its A-label.
			p.add(path, "must be ASCII (write an internationalised name in its xn-- form), got %q", raw)
			return "", 0, false
		}
	}
	h := strings.ToLower(raw)
	h = strings.TrimSuffix(h, ".")
	switch {
	case h == "":
		p.add(path, "must not be empty, got %q", raw)
		return "", 0, false
	case h == "*":
		return h, hostCatchAll, true
	case strings.HasPrefix(h, "*."):
		if strings.Contains(h[2:], "*") {
			break
		}
		if msg := checkDNSName(h[2:], raw); msg != "" {
			p.add(path, "%s", msg)
			return "", 0, false
		}
		return h, hostWildcard, true
	case h[0] == '[':
		end := strings.IndexByte(h, ']')
		if end < 0 {
			p.add(path, "must close its IPv6 literal with ']', got %q", raw)
			return "", 0, false
		}
		if end != len(h)-1 {
			p.add(path, "must not include a port, got %q", raw)
			return "", 0, false
		}
		addr, err := netip.ParseAddr(h[1:end])
		if err != nil || !addr.Is6() || addr.Zone() != "" {
			p.add(path, "must hold an IPv6 address without a zone inside brackets, got %q", raw)
			return "", 0, false
		}
		return "[" + addr.String() + "]", hostExact, true
	}
	if strings.Contains(h, "*") {
		p.add(path, "must be \"*\" or start with \"*.\" to be a wildcard, got %q", raw)
		return "", 0, false
	}
	if addr, err := netip.ParseAddr(h); err == nil && addr.Is6() {
		p.add(path, "must write an IPv6 address in brackets, like \"[::1]\", got %q", raw)
		return "", 0, false
	}
	if strings.Contains(h, ":") {
		p.add(path, "must not include a port, got %q", raw)
		return "", 0, false
	}
	if msg := checkDNSName(h, raw); msg != "" {
		p.add(path, "%s", msg)
		return "", 0, false
	}
	return h, hostExact, true
}

// checkDNSName validates h, a lower-case host name (an IPv4 literal passes
// as one) configured as raw, and returns what is wrong with it, or "".
func checkDNSName(h, raw string) string {
	if len(h) > wire.MaxHostLen {
		return fmt.Sprintf("must be at most %d bytes, got %d bytes: %q", wire.MaxHostLen, len(h), raw)
	}
	label := 0
	for i := 0; i <= len(h); i++ {
		if i == len(h) || h[i] == '.' {
			if label == 0 {
				return fmt.Sprintf("must not have an empty label, got %q", raw)
			}
			if label > wire.MaxLabelLen {
				return fmt.Sprintf("must not have a label longer than %d bytes, got %q", wire.MaxLabelLen, raw)
			}
			label = 0
			continue
		}
		c := h[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Sprintf("must contain only letters, digits, '-' and '.', got %q", raw)
		}
		label++
	}
	return ""
}

// compileRule compiles rule j of the domain at domainPath. names maps the
// rule names seen so far in that domain to their index.
func compileRule(p *problems, domainPath string, j int, rc RuleConfig, names map[string]int) *Rule {
	path := fmt.Sprintf("%s.rules[%d]", domainPath, j)
	r := &Rule{
		Index:             j,
		Name:              rc.Name,
		Limit:             int64(rc.Limit),
		Period:            rc.Period,
		MitigationTimeout: rc.MitigationTimeout,
		CountBlocked:      rc.CountBlocked,
	}

	if rc.Name == "" {
		p.missing(path+".name", "", "must not be empty")
	} else if checkLabel(p, path+".name", rc.Name) {
		if prev, dup := names[rc.Name]; dup {
			p.add(path+".name", "%q is used by %s.rules[%d]", rc.Name, domainPath, prev)
		} else {
			names[rc.Name] = j
		}
	}

	switch {
	case rc.Limit == 0:
		p.missing(path+".limit", "", "must be at least 1, got 0")
	case rc.Limit < 1:
		p.add(path+".limit", "must be at least 1, got %d", rc.Limit)
	case rc.Limit > MaxLimit:
		p.add(path+".limit", "must be at most %d, got %d", MaxLimit, rc.Limit)
	}

	cal, byPeriod := compileCalendar(p, path, rc)
	r.Reset, r.Location = cal.reset, cal.location
	if rc.Algorithm == algorithm.Concurrency.String() {
		byPeriod = false
		checkConcurrency(p, path, rc)
	}
	switch {
	case !byPeriod:
	case rc.Period == 0:
		p.missing(path+".period", "", "must be at least %s, got 0s", fmtDuration(minPeriod))
	case rc.Period < minPeriod:
		p.add(path+".period", "must be at least %s, got %s", fmtDuration(minPeriod), fmtDuration(rc.Period))
	case rc.Period > MaxPeriod:
		p.add(path+".period", "must be at most %s, got %s", fmtDuration(MaxPeriod), fmtDuration(rc.Period))
	case rc.Period%time.Second != 0:
		p.add(path+".period", "must be a whole number of seconds, got %s", fmtDuration(rc.Period))
	}

	r.Key = compileKey(p, path+".key", rc.Key)

	r.Action = actionSpelling.parse(p, path+".action", rc.Action)

	checkDuration(p, path+".mitigation_timeout", rc.MitigationTimeout, minMitigation, MaxMitigation, true)

	r.Headers = headerSpelling.parse(p, path+".headers", rc.Headers)

	if m := rc.Match; m != nil {
		if m.PathPrefix != "" && m.PathPrefix[0] != '/' {
			p.add(path+".match.path_prefix", "must start with \"/\", got %q", m.PathPrefix)
		} else if reason := unmatchablePrefix(m.PathPrefix); reason != "" {
			// Rules match the decoded, cleaned path: such a prefix could
			// never match, and the rule would silently never apply.
			p.add(path+".match.path_prefix", "%s, got %q", reason, m.PathPrefix)
		}
		r.PathPrefix = m.PathPrefix
		seen := make(map[string]int)
		for k, raw := range m.Methods {
			mpath := fmt.Sprintf("%s.match.methods[%d]", path, k)
			if !wire.IsToken(raw) {
				p.add(mpath, "must be an HTTP method (a token), got %q", raw)
				continue
			}
			up := strings.ToUpper(raw)
			if prev, dup := seen[up]; dup {
				p.add(mpath, "%q duplicates match.methods[%d]", raw, prev)
				continue
			}
			seen[up] = k
			r.Methods = append(r.Methods, up)
		}
	}

	if rc.BlockResponse != nil {
		r.BlockResponse = compileResponse(p, path+".block_response", *rc.BlockResponse, 400, 499, DefaultBlockStatus, false)
	}

	if compileAlgorithm(p, path, rc, r) {
		compileCost(p, path, rc, r)
	}
	compileWhatCounts(p, path, rc, r)
	compileMode(p, path, rc, r)
	compilePrecision(p, path, rc, r)
	return r
}

// compilePrecision compiles the rule's precision, once its algorithm,
// limit and mode are known.
func compilePrecision(p *problems, path string, rc RuleConfig, r *Rule) {
	if parseAt(p, path+".precision", rc.Precision, algorithm.ParsePrecision) != algorithm.Fine {
		return
	}
	switch {
	case r.Algorithm != algorithm.SlidingWindow:
		p.add(path+".precision", "fine applies only to algorithm sliding_window, got %s", r.Algorithm)
	case r.Soft:
		p.add(path+".precision", "fine counts a hard limit exactly: not valid with mode soft, which decides by the offered rate")
	case r.Limit > MaxFineLimit:
		p.add(path+".precision", "fine keeps a log of a key's last limit requests: limit must be at most %d, got %d", MaxFineLimit, r.Limit)
	default:
		r.Precision = algorithm.Fine
	}
}

// compileMode compiles the rule's mode: a soft window counts every request
// offered, so it implies count_blocked and takes nothing that counts only
// some requests (count_status, response_cost_header) or blocks outright
// (mitigation_timeout).
func compileMode(p *problems, path string, rc RuleConfig, r *Rule) {
	switch rc.Mode {
	case "", "hard":
		return
	case "soft":
	default:
		p.add(path+".mode", "must be hard or soft, got %q", rc.Mode)
		return
	}
	switch {
	case r.Algorithm != algorithm.SlidingWindow && r.Algorithm != algorithm.FixedWindow:
		p.add(path+".mode", "soft applies only to algorithm sliding_window or fixed_window, got %s", r.Algorithm)
	case len(rc.CountStatus) > 0:
		p.add(path+".mode", "soft counts every request offered: not valid with count_status")
	case rc.ResponseCostHeader != "":
		p.add(path+".mode", "soft counts every request offered: not valid with response_cost_header")
	case rc.MitigationTimeout != 0:
		p.add(path+".mode", "soft never blocks a key outright: not valid with mitigation_timeout, got %s", fmtDuration(rc.MitigationTimeout))
	default:
		r.Soft = true
		r.CountBlocked = true
	}
}

// compileAlgorithm compiles how the rule at path counts into r: its
// algorithm, burst and max_delay. It reports whether r.Algorithm is the
// one configured (when not, the keys that depend on it are not judged).
// Counters shared through Redis take every algorithm, a leaky bucket queue
// in exact mode only (compileDomains refuses it batched). A quota's reset
// and timezone are compileCalendar's.
func compileAlgorithm(p *problems, path string, rc RuleConfig, r *Rule) bool {
	before := len(p.list)
	r.Algorithm = parseAt(p, path+".algorithm", rc.Algorithm, algorithm.ParseAlgorithm)
	if len(p.list) > before {
		return false
	}

	switch {
	case rc.Burst == 0:
	case !r.Algorithm.Bucket():
		p.add(path+".burst", "applies only to algorithm token_bucket or leaky_bucket, got %d with %s", rc.Burst, r.Algorithm)
	case rc.Burst < 1 || rc.Burst > MaxLimit:
		p.add(path+".burst", "must be between 1 and %d, got %d", MaxLimit, rc.Burst)
	case r.Limit >= 1 && r.Limit <= MaxLimit && r.Period >= minPeriod && r.Period <= MaxPeriod &&
		int64(rc.Burst)*int64(r.Period/time.Second) > int64(MaxFill/time.Second)*r.Limit:
		// Both products stay below 2⁵³: burst and limit ≤ 10⁹, the
		// periods below 5·10⁶ s.
		most := int64(MaxFill/time.Second) * r.Limit / int64(r.Period/time.Second)
		p.add(path+".burst", "must be at most %d with limit %d per %s (an empty bucket must fill within %s), got %d",
			most, r.Limit, fmtDuration(r.Period), fmtDuration(MaxFill), rc.Burst)
	default:
		r.Burst = int64(rc.Burst)
	}

	switch d := rc.MaxDelay; {
	case d == 0:
	case d < 0:
		p.add(path+".max_delay", "must not be negative, got %s", fmtDuration(d))
	case r.Algorithm != algorithm.LeakyBucket:
		p.add(path+".max_delay", "applies only to algorithm leaky_bucket, got %s with %s", fmtDuration(d), r.Algorithm)
	case d < minQueueDelay || d > MaxQueueDelay:
		p.add(path+".max_delay", "must be 0 (a meter) or between %s and %s, got %s",
			fmtDuration(minQueueDelay), fmtDuration(MaxQueueDelay), fmtDuration(d))
	default:
		r.MaxDelay = d
	}

	switch l := rc.Lease; {
	case r.Algorithm != algorithm.Concurrency:
		if l != 0 {
			p.add(path+".lease", "applies only to algorithm concurrency, got %s with %s", fmtDuration(l), r.Algorithm)
		}
	case l == 0:
		r.Lease = DefaultLease
	case l < MinLease || l > MaxLease:
		p.add(path+".lease", "must be between %s and %s, got %s", fmtDuration(MinLease), fmtDuration(MaxLease), fmtDuration(l))
	case l%time.Millisecond != 0:
		p.add(path+".lease", "must be a whole number of milliseconds, got %s", fmtDuration(l))
	default:
		r.Lease = l
	}
	return true
}

// A concurrency rule's lease on a slot held in Redis. The shortest is one
// second: the node renews a lease every third of it, and a renewal must
// arrive with a budget (at most 1s) to spare; the longest an hour, the
// longest a dead node's slots stay taken.
const (
	DefaultLease = 30 * time.Second
	MinLease     = time.Second
	MaxLease     = time.Hour
)

// compileCost compiles what a request of the rule at path costs into r,
// once r's algorithm and burst are known: a cost (or a cost_header and its
// max_cost) that the rule can hold.
func compileCost(p *problems, path string, rc RuleConfig, r *Rule) {
	// What the rule can hold is known only when its limit and burst are
	// valid (an invalid burst is left 0 in r).
	capacity, holds := r.Capacity(), "limit"
	if r.Burst > 0 {
		holds = "burst"
	}
	known := r.Limit >= 1 && r.Limit <= MaxLimit && (rc.Burst == 0 || r.Burst > 0)

	r.Cost = 1
	if rc.Cost != nil {
		r.Cost = int64(*rc.Cost)
	}
	switch {
	case r.Cost < 0 || r.Cost > MaxCost:
		p.add(path+".cost", "must be between 0 and %d, got %d", MaxCost, r.Cost)
	case known && r.Cost > capacity:
		p.add(path+".cost", "must be at most the rule's %s (%d), got %d", holds, capacity, r.Cost)
	}

	if h := rc.CostHeader; h != "" {
		canon := textproto.CanonicalMIMEHeaderKey(h)
		switch {
		case !wire.IsToken(h):
			p.add(path+".cost_header", "must be a header name (an HTTP token), got %q", h)
		case canon == "Host":
			// Go's server moves Host out of Request.Header: the header
			// would never be seen.
			p.add(path+".cost_header", "must not be Host, got %q", h)
		default:
			r.CostHeader = canon
		}
	}

	switch m := rc.MaxCost; {
	case m == 0 && rc.CostHeader != "":
		p.missing(path+".max_cost", "with cost_header", "must be between 1 and %d, got 0", MaxCost)
	case m == 0:
	case rc.CostHeader == "":
		p.add(path+".max_cost", "applies only with cost_header, got %d", m)
	case m < 1 || m > MaxCost:
		p.add(path+".max_cost", "must be between 1 and %d, got %d", MaxCost, m)
	case known && int64(m) > capacity:
		p.add(path+".max_cost", "must be at most the rule's %s (%d), got %d", holds, capacity, m)
	default:
		r.MaxCost = int64(m)
	}
}

// compileWhatCounts compiles the keys that say which requests a rule
// counts, and when: allow, count_status and response_cost_header.
func compileWhatCounts(p *problems, path string, rc RuleConfig, r *Rule) {
	if rc.Allow != nil {
		if len(rc.Allow.CIDRs) == 0 {
			p.add(path+".allow.cidrs", "must list at least one IP address or CIDR prefix")
		}
		r.Allow = compilePrefixes(p, path+".allow.cidrs", rc.Allow.CIDRs)
	}

	seen := make(map[int]int)
	for i, status := range rc.CountStatus {
		spath := fmt.Sprintf("%s.count_status[%d]", path, i)
		if status < 100 || status > 599 {
			p.add(spath, "must be an HTTP status from 100 to 599, got %d", status)
			continue
		}
		if prev, dup := seen[status]; dup {
			p.add(spath, "%d duplicates count_status[%d]", status, prev)
		} else {
			seen[status] = i
			r.CountStatus = append(r.CountStatus, status)
		}
	}
	if len(rc.CountStatus) > 0 && rc.CountBlocked {
		// A refused request never reaches the origin: it has no status
		// that could say whether it counts.
		p.add(path+".count_blocked", "must be false with count_status (a refused request gets no status from the origin), got true")
	}

	if h := rc.ResponseCostHeader; h != "" {
		name := textproto.CanonicalMIMEHeaderKey(h)
		switch {
		case !wire.IsToken(h):
			p.add(path+".response_cost_header", "must be a header field name, got %q", h)
		case reservedResponseFields[name]:
			p.add(path+".response_cost_header", "must not be a field that HTTP or edge itself uses, got %q", h)
		default:
			r.ResponseCostHeader = name
		}
	}
}

// reservedResponseFields are response fields that HTTP framing, the
// proxy's hop-by-hop handling or edge's own rate-limit answers need:
// response_cost_header removes its field from responses, so it must not
// name one of them.
var reservedResponseFields = map[string]bool{
	"Connection": true, "Content-Length": true, "Content-Type": true, "Keep-Alive": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true,
	"Upgrade": true, "Retry-After": true, "Ratelimit": true, "Ratelimit-Policy": true,
	"X-Ratelimit-Limit": true, "X-Ratelimit-Remaining": true, "X-Ratelimit-Reset": true,
}

// checkCountsAfter refuses a rule r, at path, that counts after the
// origin's response where there is none (its domain answers with respond).
// checkConcurrency reports the keys of the concurrency rule rc at path that
// mean nothing to a count of requests in flight: a period, a cost (every
// request holds one slot), a mitigation, counting refused requests or
// counting after the response.
func checkConcurrency(p *problems, path string, rc RuleConfig) {
	for _, k := range []struct {
		key string
		set bool
	}{
		{"period", rc.Period != 0},
		{"cost", rc.Cost != nil},
		{"cost_header", rc.CostHeader != ""},
		{"max_cost", rc.MaxCost != 0},
		{"mitigation_timeout", rc.MitigationTimeout != 0},
		{"count_blocked", rc.CountBlocked},
		{"count_status", len(rc.CountStatus) > 0},
		{"response_cost_header", rc.ResponseCostHeader != ""},
	} {
		if k.set {
			p.add(path+"."+k.key, "does not apply to algorithm concurrency, which counts the requests in flight")
		}
	}
}

func checkCountsAfter(p *problems, path string, r *Rule, respond bool) {
	for _, k := range []struct {
		key string
		set bool
	}{{"count_status", r.CountStatus != nil}, {"response_cost_header", r.ResponseCostHeader != ""}} {
		if k.set && respond {
			p.add(path+"."+k.key, "needs an origin's response, but the domain answers with respond")
		}
	}
}

func compileKey(p *problems, path string, keys []string) []KeyPart {
	if len(keys) == 0 {
		return []KeyPart{{Kind: KeyIP}}
	}
	var out []KeyPart
	seen := make(map[KeyPart]int)
	for i, raw := range keys {
		kpath := fmt.Sprintf("%s[%d]", path, i)
		kp, err := ParseKeyPart(raw)
		if err != nil {
			p.add(kpath, "%s", err)
			continue
		}
		if prev, dup := seen[kp]; dup {
			p.add(kpath, "%q duplicates key[%d]", raw, prev)
			continue
		}
		seen[kp] = i
		out = append(out, kp)
	}
	return out
}

// compileResponse validates a static response. alwaysType says whether the
// default content type applies even without a body.
func compileResponse(p *problems, path string, rc ResponseConfig, minStatus, maxStatus, defStatus int, alwaysType bool) *Response {
	r := &Response{Status: rc.Status, Body: rc.Body, ContentType: rc.ContentType}
	if r.Status == 0 {
		r.Status = defStatus
	}
	if r.Status < minStatus || r.Status > maxStatus {
		p.add(path+".status", "must be between %d and %d, got %d", minStatus, maxStatus, r.Status)
	}
	if len(r.Body) > maxBodyBytes {
		p.add(path+".body", "must be at most %d bytes, got %d bytes", maxBodyBytes, len(r.Body))
	}
	switch {
	case r.ContentType == "":
		if alwaysType || r.Body != "" {
			r.ContentType = DefaultContentType
		}
	default:
		// ParseMediaType also rejects CR and LF, which would otherwise
		// let the config split the response header.
		// A bare token such as "json" parses too, but is not a media type.
		if mt, _, err := mime.ParseMediaType(r.ContentType); err != nil || !strings.Contains(mt, "/") {
			p.add(path+".content_type", "must be a media type such as %q, got %q", DefaultContentType, r.ContentType)
		}
	}
	return r
}

// unmatchablePrefix says why a path prefix can never match the normalised
// path rules see (percent-decoded, "//" merged, dot segments refused,
// ";params" cut), or "".
func unmatchablePrefix(p string) string {
	switch {
	case strings.Contains(p, "//"):
		return `must not contain "//" (paths are matched with slashes merged)`
	case strings.Contains(p, "%"):
		return "must be written decoded, without %-escapes (paths are matched decoded)"
	case strings.Contains(p, ";"):
		return `must not contain ";" (path parameters are cut before matching)`
	case p == "/." || p == "/.." || strings.Contains(p, "/./") || strings.Contains(p, "/../") ||
		strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/.."):
		return "must not contain dot segments (requests with them are refused)"
	}
	return ""
}
