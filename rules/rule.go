package rules

import (
	"fmt"
	"mime"
	"net/textproto"
	"slices"
	"strings"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/internal/wire"
)

// This file compiles one rule: compileRule and the steps it takes, how the
// rule counts (algorithm, mode, precision), what a request costs and which
// requests count, its key and its block response.

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
	switch rc.WhenMissing {
	case "", "ip":
	case "skip":
		if !slices.ContainsFunc(r.Key, KeyPart.Missable) {
			p.add(path+".when_missing", "skip applies only to a key with a part a request may lack (header, cookie, query, jwt or ja4), got key %v", rc.Key)
		}
		r.SkipMissing = true
	default:
		p.add(path+".when_missing", "must be ip or skip, got %q", rc.WhenMissing)
	}

	r.Action = actionSpelling.parse(p, path+".action", rc.Action)

	checkDuration(p, path+".mitigation_timeout", rc.MitigationTimeout, minMitigation, MaxMitigation, true)

	r.Headers = headerSpelling.parse(p, path+".headers", rc.Headers)

	if m := rc.Match; m != nil {
		r.PathPrefix = compilePathPrefix(p, path+".match.path_prefix", m.PathPrefix)
		r.Methods = compileMethods(p, path+".match.methods", m.Methods)
		r.MatchHeaders = compileHeaderMatch(p, path+".match.headers", m.Headers)
	}

	if rc.BlockResponse != nil {
		r.BlockResponse = compileResponse(p, path+".block_response", *rc.BlockResponse, 400, 499, DefaultBlockStatus, false)
		if r.Action == ActionLog {
			// The response would never be sent.
			p.add(path+".block_response", "applies only with action block: a rule with action log never refuses a request")
		}
	}

	if compileAlgorithm(p, path, rc, r) {
		compileCost(p, path, rc, r)
	}
	compileCostFrom(p, path, rc, r) // costfrom.go
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
// offered, so it implies count_blocked (refusing it written false) and
// takes nothing that counts only
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
	case !rc.CountBlocked && p.given[path+".count_blocked"]:
		// Written false, it would be run as true: say so rather than
		// do other than the file says.
		p.add(path+".count_blocked", "false is not allowed with mode: soft, which counts every request offered (leave count_blocked out)")
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
		{"cost_from", rc.CostFrom != ""},
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
	}{{"count_status", r.CountStatus != nil}, {"response_cost_header", r.ResponseCostHeader != ""},
		{"cost_from", r.CostFrom == CostFromOriginTime}} {
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
	seen := make(map[KeyPart]int) // comparable: a claim's path is one string
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
// ";params" cut), or is written as a pattern, or "".
// compilePathPrefix checks a match's path_prefix (at path): rules,
// routes and priorities match the decoded, cleaned path, which a prefix
// unmatchablePrefix refuses could never match, and what it selects
// would silently never apply.
func compilePathPrefix(p *problems, path, prefix string) string {
	if prefix != "" && prefix[0] != '/' {
		p.add(path, "must start with \"/\", got %q", prefix)
	} else if reason := unmatchablePrefix(prefix); reason != "" {
		p.add(path, "%s, got %q", reason, prefix)
	}
	return prefix
}

// compileMethods checks a match's methods (at path) and returns them
// upper-cased, nil for none.
func compileMethods(p *problems, path string, methods []string) []string {
	var out []string
	seen := make(map[string]int)
	for k, raw := range methods {
		mpath := fmt.Sprintf("%s[%d]", path, k)
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
		out = append(out, up)
	}
	return out
}

func unmatchablePrefix(p string) string {
	switch {
	case strings.Contains(p, "//"):
		return `must not contain "//" (paths are matched with slashes merged)`
	case strings.Contains(p, "%"):
		return "must be written decoded, without %-escapes (paths are matched decoded)"
	case strings.ContainsAny(p, "*?"):
		// A glob here would be compared byte for byte: "/api/*" matches
		// only paths that start with a literal "*".
		return `is a prefix, not a pattern: "*" and "?" are not wildcards ("/api/" matches every path under /api/)`
	case strings.Contains(p, ";"):
		return `must not contain ";" (path parameters are cut before matching)`
	case p == "/." || p == "/.." || strings.Contains(p, "/./") || strings.Contains(p, "/../") ||
		strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/.."):
		return "must not contain dot segments (requests with them are refused)"
	}
	return ""
}
