package rules

import (
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
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
//	domains[0] (api).rules[1] (login).period: must be at least 1s, got 500ms
//
// (the names of the domain and rule a path passes through beside their
// indexes, see [Config.NameProblems]).
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
	p := problems{given: cfg.Given, readFile: cfg.ReadFile}
	t := &Table{
		Listen:      cfg.Listen,
		AdminListen: cfg.AdminListen,
		Pop:         cfg.Pop,
		AdminToken:  cfg.AdminToken,
		Secrets:     cfg.Secrets,
		Sources:     maps.Clone(cfg.Sources),
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

	switch {
	case cfg.Origin != "" && len(cfg.Origins) > 0:
		p.add("origin", "set origin or origins, not both")
	case cfg.Origin != "":
		if t.Origin = parseOrigin(&p, "origin", cfg.Origin); t.Origin != nil {
			t.topServers = []OriginServer{{URL: t.Origin, Name: t.Origin.Redacted(), Weight: 1}}
		}
	case len(cfg.Origins) > 0:
		if servers := compileOrigins(&p, "origins", cfg.Origins); len(servers) == len(cfg.Origins) {
			t.topServers, t.Origin = servers, servers[0].URL
		}
	}
	if cfg.OriginTLS != nil && len(t.topServers) > 0 && t.topServers[0].URL.Scheme != "https" {
		p.add("origin_tls", "applies only to https servers, got %s servers", t.topServers[0].URL.Scheme)
	}
	t.topQueue = compileOriginQueue(&p, "", cfg.OriginQueue)

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
	t.TLS = compileTLS(&p, cfg.TLS)
	checkTLSListener(&p, t)
	t.HTTP2 = compileHTTP2(&p, cfg.HTTP2, cfg.H2C, t)
	t.HTTP3 = compileHTTP3(&p, cfg.HTTP3, t)
	t.ProxyProtocol = compileProxyProtocol(&p, cfg.ProxyProtocol, t)
	t.Connections = compileConnections(&p, cfg.Connections)
	t.AccessLog = compileAccessLog(&p, cfg.AccessLog)

	compileDomains(&p, t, cfg)
	checkOriginLoops(&p, t, cfg)
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
		return nil, cfg.NameProblems(err)
	}
	return t, nil
}

// checkOriginLoops refuses an origin that is one of edge's own listeners,
// to which every forwarded request would come back: its port is the
// listener's, and its host is the listener's own address, or (for a
// listener on every address, or on a loopback one) localhost, a loopback
// or an unspecified literal. A listener on port 0 takes a port the system
// chooses, which no origin can name.
func checkOriginLoops(p *problems, t *Table, cfg Config) {
	type listener struct{ key, addr string }
	ls := []listener{{"listen", t.Listen}, {"admin_listen", t.AdminListen}}
	if t.Check != nil {
		ls = append(ls, listener{"check.listen", t.Check.Listen})
	}
	if t.RLS.Listen != "" {
		ls = append(ls, listener{"rls.listen", t.RLS.Listen})
	}
	if t.TLS.Listen != "" {
		ls = append(ls, listener{"tls.listen", t.TLS.Listen})
	}
	check := func(path string, u *url.URL) {
		if u == nil {
			return
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443", "h2c": "80"}[u.Scheme]
		}
		for _, l := range ls {
			lh, lp, err := net.SplitHostPort(l.addr)
			if err != nil || lp == "0" || lp != port || !listensAt(lh, u.Hostname()) {
				continue
			}
			p.add(path, "is edge's own %s (%q): every request would come back to edge, got %q", l.key, l.addr, u.Redacted())
			return
		}
	}
	servers := func(path string, list []OriginServer, many bool) {
		for i, s := range list {
			if many {
				check(fmt.Sprintf("%s[%d].url", path, i), s.URL)
			} else {
				check(path, s.URL)
			}
		}
	}
	servers(map[bool]string{false: "origin", true: "origins"}[len(cfg.Origins) > 0], t.topServers, len(cfg.Origins) > 0)
	for i, d := range t.Domains {
		if i >= len(cfg.Domains) {
			continue
		}
		for j, r := range d.Routes {
			if r.Upstream != nil {
				servers(fmt.Sprintf("domains[%d].routes[%d].origins", i, j), r.Upstream.Servers, true)
			}
		}
		if d.Upstream == nil {
			continue
		}
		switch dc := cfg.Domains[i]; {
		case dc.Origin != "":
			servers(fmt.Sprintf("domains[%d].origin", i), d.Upstream.Servers, false)
		case len(dc.Origins) > 0:
			servers(fmt.Sprintf("domains[%d].origins", i), d.Upstream.Servers, true)
		}
	}
}

// listensAt reports whether a listener on listenHost ("" or an
// unspecified address: every address) takes connections to host.
func listensAt(listenHost, host string) bool {
	if strings.EqualFold(listenHost, host) {
		return true
	}
	la, lerr := netip.ParseAddr(listenHost)
	every := listenHost == "" || lerr == nil && la.IsUnspecified()
	loopback := lerr == nil && la.Unmap().IsLoopback()
	if !every && !loopback {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap()
	if every {
		return a.IsLoopback() || a.IsUnspecified()
	}
	return a == la.Unmap() || a.IsUnspecified()
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
	if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "h2c") || u.Hostname() == "" || u.Opaque != "" {
		p.add(path, "must be an absolute http, https or h2c URL, got %q", raw)
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
