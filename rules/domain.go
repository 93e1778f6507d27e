package rules

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/internal/wire"
)

// This file compiles a config's domains: their hosts (each claimed by one
// domain), names, origins and shared max_keys. Each domain's rules are
// rule.go's.

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
	topJWT := compileJWT(p, "jwt", cfg.JWT)
	for i, dc := range cfg.Domains {
		path := fmt.Sprintf("domains[%d]", i)
		d := &Domain{Index: i, byName: make(map[string]*Rule), JWT: topJWT}
		if dc.JWT != nil {
			d.JWT = compileJWT(p, path+".jwt", dc.JWT)
		}
		t.Domains = append(t.Domains, d)

		first := claimHosts(p, t, d, path, dc.Hosts, claims)
		nameDomain(p, t, d, path, dc.Name, first, names)

		compileServe(p, d, path, dc, t.Check != nil)
		compileDomainTLS(p, d, path, dc, t)
		if dc.AccessLog != nil {
			if *dc.AccessLog {
				p.add(path+".access_log", "accepts only false (the access_log section at the top level turns the log on), got true")
			}
			d.NoAccessLog = true
		}
		uc, at := upstreamSource(dc, cfg.UpstreamConfig, path)
		all := -1 // the first route that matches every request (route.go)
		if d.Proxied && dc.Respond == nil {
			all = compileRoutes(p, d, path, dc, uc, at)
		}
		switch {
		case !d.Proxied: // compileServe reported an origin or respond
		case dc.Origin != "" && len(dc.Origins) > 0:
			p.add(path, "set origin or origins, not both")
		case dc.Origin != "" && dc.Respond != nil:
			p.add(path, "set origin or respond, not both")
		case len(dc.Origins) > 0 && dc.Respond != nil:
			p.add(path, "set origins or respond, not both")
		case all >= 0 && (dc.Origin != "" || len(dc.Origins) > 0):
			p.add(path+".origin"+map[bool]string{true: "s"}[len(dc.Origins) > 0],
				"is never used: routes[%d] (%s) matches every request (remove it, or give that route a match)", all, d.Routes[all].Name)
		case all >= 0: // the top level's origins take no request of the domain
		case dc.Origin != "":
			if u := parseOrigin(p, path+".origin", dc.Origin); u != nil {
				d.Upstream = compileUpstream(p, uc, at, []OriginServer{{URL: u, Name: u.Redacted(), Weight: 1}}, firstExactHost(d.Hosts))
			}
		case len(dc.Origins) > 0:
			if servers := compileOrigins(p, path+".origins", dc.Origins); len(servers) == len(dc.Origins) {
				d.Upstream = compileUpstream(p, uc, at, servers, firstExactHost(d.Hosts))
			}
		case dc.Respond != nil:
			d.Respond = compileResponse(p, path+".respond", *dc.Respond, 200, 599, DefaultRespondStatus, true)
		case cfg.Origin != "" || len(cfg.Origins) > 0:
			if t.topServers != nil { // nil when invalid; that error is already reported
				// Copies: a domain's URLs are its own.
				servers := make([]OriginServer, len(t.topServers))
				for k, s := range t.topServers {
					u := *s.URL
					servers[k], servers[k].URL = s, &u
				}
				d.Upstream = compileUpstream(p, uc, at, servers, firstExactHost(d.Hosts))
			}
		case len(dc.Routes) > 0:
			p.add(path+".routes", "a request no route matches goes to the domain's origins, and it has none: set origin or origins here or at the top level, or end routes with a route that matches every request (one without match)")
		default:
			p.add(path, "no upstream: set origin, origins or respond here, or origin or origins at the top level (or serve check, to answer only the check listener)")
		}
		if d.Upstream != nil {
			d.Origin = d.Upstream.Servers[0].URL
			d.OriginQueue = t.topQueue
			if dc.OriginQueue != nil {
				d.OriginQueue = compileOriginQueue(p, path, dc.OriginQueue)
			}
		}
		if !d.Proxied || d.Respond != nil {
			for _, k := range []struct {
				key string
				set bool
			}{{"balance", dc.Balance != ""}, {"hash_key", dc.HashKey != nil}, {"health", dc.Health != nil},
				{"passive", dc.Passive != nil}, {"retries", dc.Retries != nil}, {"when_down", dc.WhenDown != nil},
				{"origin_tls", dc.OriginTLS != nil}, {"routes", len(dc.Routes) > 0}, {"origin_queue", dc.OriginQueue != nil}} {
				if k.set {
					p.add(path+"."+k.key, "applies only to a domain forwarded to origins")
				}
			}
		}

		if len(dc.Rules) > MaxRulesPerDomain {
			p.add(path+".rules", "must have at most %d rules, got %d", MaxRulesPerDomain, len(dc.Rules))
		}
		ruleNames := make(map[string]int)
		compileAPIKeys(p, path, dc, d) // plans.go
		for j, rc := range dc.Rules {
			r := compileRule(p, path, j, rc, ruleNames)
			compilePlans(p, fmt.Sprintf("%s.rules[%d]", path, j), rc, r, d.APIKeys != nil) // plans.go
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
			if d.JWT == nil {
				for k, kp := range r.Key {
					if kp.Kind == KeyJWT {
						p.add(fmt.Sprintf("%s.rules[%d].key[%d]", path, j, k), "reads a verified token's claim, but the domain has no jwt section (nor the top level), got %q", kp.String())
					}
				}
			}
			if d.Checked {
				checkCheckedRule(p, fmt.Sprintf("%s.rules[%d]", path, j), r)
				checkCostFromChecked(p, fmt.Sprintf("%s.rules[%d]", path, j), r) // costfrom.go
			}
			if !d.Proxied && rc.BlockResponse != nil {
				// The check listener answers every refusal alike.
				p.add(fmt.Sprintf("%s.rules[%d].block_response", path, j),
					"does not apply to a domain with serve check, whose refusals answer with check.deny_status")
			}
			d.Rules = append(d.Rules, r)
			if _, dup := d.byName[r.Name]; !dup && r.Name != "" {
				d.byName[r.Name] = r
			}
		}
		compileGraphQL(p, path, dc, d) // costfrom.go
		d.PlanNames = planNames(d)
		checkPlanCount(p, path, d) // plans.go
		if d.JWT != nil && d.JWT.Refuse && len(dc.Rules) == 0 {
			// Tokens are verified where rules decide: without rules a
			// request would go on unverified, the opposite of refuse.
			p.add(path+".rules", "jwt with invalid: refuse needs at least one rule in the domain (a domain without rules verifies no token)")
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
	if strings.Contains(raw, "://") {
		p.add(path, "%s", urlForHost(raw))
		return "", 0, false
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

// urlForHost words the problem of raw, a URL written where a host name is
// wanted: it names the host to write instead, when raw has one, and shows
// no password raw holds.
func urlForHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return fmt.Sprintf("must be a host name, not a URL, got %q", raw)
	}
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return fmt.Sprintf("must be a host name, not a URL: write %q, got %q", host, u.Redacted())
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
