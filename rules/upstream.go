package rules

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// This file compiles a domain's upstream group: its servers (origins, or
// origin as a list of one), how requests are spread over them (balance,
// hash_key), and how failing ones are found and avoided (health, passive,
// retries, when_down). It is pure data: package origin keeps the live
// state (docs/origins.md).

// Upstream is a compiled upstream group. It is immutable.
type Upstream struct {
	Servers []OriginServer // config order, at least one
	Balance Balance
	// HashKey is what BalanceHash hashes; nil for other policies.
	HashKey []KeyPart
	Health  *Health  // nil: no active checks
	Passive *Passive // nil: no passive ejection
	Retries Retries
	// WhenDown is the answer when no server could take a request; nil: 502.
	WhenDown *WhenDown
	// TLS is how edge speaks TLS to https servers (origintls.go); nil for
	// other schemes, and for https servers without origin_tls (the
	// system's roots, the URL's host).
	TLS *OriginTLS
}

// OriginServer is one server of an upstream group.
type OriginServer struct {
	URL *url.URL
	// Name is the URL as written (redacted), its name in metrics and the
	// admin API.
	Name   string
	Weight int
	// MaxInFlight bounds the server's requests in flight; 0: no bound.
	MaxInFlight int
}

// OriginQueue is where a domain's requests wait for a server below its
// MaxInFlight: at most Max of them, each for at most Timeout (0: none
// waits, a request finding every server at its bound is refused at once).
type OriginQueue struct {
	Max     int
	Timeout time.Duration
}

// Balance is an upstream group's balancing policy.
type Balance uint8

// The balancing policies.
const (
	BalanceRoundRobin Balance = iota
	BalanceLeastRequests
	BalanceRandomTwo
	BalanceHash
)

var balanceSpelling = spelling[Balance]{"Balance", []string{"round_robin", "least_requests", "random_two", "hash"}}

func (b Balance) String() string { return balanceSpelling.name(b) }

// Health is an upstream group's active checks.
type Health struct {
	Path, Host     string // Host "": the server's own host
	Interval       time.Duration
	Timeout        time.Duration
	HealthyAfter   int
	UnhealthyAfter int
	Expect         []StatusRange
}

// StatusRange is an inclusive range of HTTP statuses.
type StatusRange struct{ Min, Max int }

// Passive is an upstream group's ejection by real traffic's failures.
type Passive struct {
	MaxFails   int
	FailWindow time.Duration
	EjectFor   time.Duration
	On         Failures
}

// Retries says which failed requests are tried again on another server.
type Retries struct {
	Attempts int // more servers a request may try; 0: none
	On       Failures
	Budget   float64 // share of the domain's requests over 10 s, 0..1
}

// WhenDown is the answer to a request no server could take.
type WhenDown struct {
	Status     int
	RetryAfter time.Duration
}

// Failures is a set of the ways a request to a server fails.
type Failures uint8

// The failures passive and retries count.
const (
	FailConnect Failures = 1 << iota // the connection could not be made
	FailTimeout                      // no response within timeouts.upstream
	FailReset                        // the connection broke before a response
	Fail502
	Fail503
	Fail504
)

// failureNames spells each Failures bit.
var failureNames = []struct {
	name string
	f    Failures
}{
	{"connect_error", FailConnect}, {"timeout", FailTimeout}, {"reset_before_response", FailReset},
	{"502", Fail502}, {"503", Fail503}, {"504", Fail504},
}

// Names returns the config spellings of f's members.
func (f Failures) Names() []string {
	var out []string
	for _, n := range failureNames {
		if f&n.f != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// The upstream defaults and bounds.
const (
	MaxOrigins            = 64
	MaxOriginWeight       = 10000
	DefaultHealthInterval = 10 * time.Second
	DefaultHealthTimeout  = 2 * time.Second
	DefaultHealthyAfter   = 2
	DefaultUnhealthyAfter = 3
	DefaultMaxFails       = 3
	DefaultFailWindow     = 10 * time.Second
	DefaultEjectFor       = 30 * time.Second
	DefaultRetryAttempts  = 1
	DefaultRetryBudget    = 0.2
	MaxRetryAttempts      = 10
	MaxOriginInFlight     = 1_000_000
	DefaultOriginQueueMax = 1000
	MaxOriginQueue        = 1_000_000
	MaxOriginQueueTimeout = 10 * time.Minute
	DefaultWhenDownStatus = 503
	DefaultPassiveOn      = FailConnect | FailTimeout | Fail502 | Fail503 | Fail504
	DefaultRetryOn        = FailConnect | FailReset
	passiveAllowed        = DefaultPassiveOn
	retriesAllowed        = FailConnect | FailReset | Fail502 | Fail503
)

// upstreamSource is where each key of a domain's upstream comes from: the
// domain's own section, else the top level's.
func upstreamSource(dc DomainConfig, top UpstreamConfig, path string) (UpstreamConfig, map[string]string) {
	u := dc.UpstreamConfig
	at := map[string]string{"origins": path, "balance": path, "hash_key": path, "health": path, "passive": path, "retries": path, "when_down": path, "origin_tls": path}
	inherit := func(key string, own bool, set func()) {
		if !own {
			set()
			at[key] = ""
		}
	}
	inherit("origins", len(u.Origins) > 0 || dc.Origin != "", func() { u.Origins = top.Origins })
	inherit("balance", u.Balance != "", func() { u.Balance = top.Balance })
	inherit("hash_key", u.HashKey != nil, func() { u.HashKey = top.HashKey })
	inherit("health", u.Health != nil, func() { u.Health = top.Health })
	inherit("passive", u.Passive != nil, func() { u.Passive = top.Passive })
	inherit("retries", u.Retries != nil, func() { u.Retries = top.Retries })
	inherit("when_down", u.WhenDown != nil, func() { u.WhenDown = top.WhenDown })
	inherit("origin_tls", u.OriginTLS != nil, func() { u.OriginTLS = top.OriginTLS })
	return u, at
}

// keyPath joins a section's key to where it was written ("" the top
// level).
func keyPath(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}

// compileOrigins validates an origins list (at path) into servers.
func compileOrigins(p *problems, path string, list []OriginConfig) []OriginServer {
	if len(list) > MaxOrigins {
		p.add(path, "must list at most %d servers, got %d", MaxOrigins, len(list))
	}
	var out []OriginServer
	seen := make(map[string]int)
	for i, oc := range list {
		sp := fmt.Sprintf("%s[%d]", path, i)
		if oc.URL == "" {
			p.missing(sp+".url", "", "must be set")
			continue
		}
		u := parseOrigin(p, sp+".url", oc.URL)
		w := oc.Weight
		if w == 0 {
			w = 1
		}
		if w < 1 || w > MaxOriginWeight {
			p.add(sp+".weight", "must be between 1 and %d, got %d", MaxOriginWeight, oc.Weight)
		}
		if m := oc.MaxInFlight; m < 0 || m > MaxOriginInFlight {
			p.add(sp+".max_in_flight", "must be between 1 and %d (or 0 for no bound), got %d", MaxOriginInFlight, m)
		}
		if u == nil {
			continue
		}
		name := u.Redacted()
		if prev, dup := seen[name]; dup {
			p.add(sp+".url", "%q duplicates %s[%d]", name, path, prev)
			continue
		}
		seen[name] = i
		if len(out) > 0 && u.Scheme != out[0].URL.Scheme {
			p.add(sp+".url", "must have the scheme of the group's first server (%s), got %q", out[0].URL.Scheme, name)
			continue
		}
		if len(out) > 0 && u.EscapedPath() != out[0].URL.EscapedPath() {
			// Rewrite joins the request's path to one base for all tries.
			p.add(sp+".url", "must have the path of the group's first server (%q), got %q", out[0].URL.EscapedPath(), name)
			continue
		}
		out = append(out, OriginServer{URL: u, Name: name, Weight: w, MaxInFlight: oc.MaxInFlight})
	}
	return out
}

// compileUpstream compiles the rest of an upstream group around its
// servers; host is the domain's first exact host ("" for none).
func compileUpstream(p *problems, uc UpstreamConfig, at map[string]string, servers []OriginServer, host string) *Upstream {
	up := &Upstream{Servers: servers}
	up.Balance = balanceSpelling.parse(p, keyPath(at["balance"], "balance"), uc.Balance)
	switch {
	case up.Balance == BalanceHash && len(uc.HashKey) == 0:
		up.HashKey = []KeyPart{{Kind: KeyIP}}
	case up.Balance == BalanceHash:
		up.HashKey = compileKey(p, keyPath(at["hash_key"], "hash_key"), uc.HashKey)
	case len(uc.HashKey) > 0:
		p.add(keyPath(at["hash_key"], "hash_key"), "applies only with balance hash, got balance %s", up.Balance)
	}
	if uc.Health != nil {
		up.Health = compileHealth(p, keyPath(at["health"], "health"), *uc.Health, host)
	}
	up.Passive = compilePassive(p, keyPath(at["passive"], "passive"), uc.Passive, len(servers))
	up.Retries = compileRetries(p, keyPath(at["retries"], "retries"), uc.Retries)
	if wd := uc.WhenDown; wd != nil {
		path := keyPath(at["when_down"], "when_down")
		up.WhenDown = &WhenDown{Status: wd.Status, RetryAfter: wd.RetryAfter}
		if up.WhenDown.Status == 0 {
			up.WhenDown.Status = DefaultWhenDownStatus
		}
		if s := up.WhenDown.Status; s < 500 || s > 599 {
			p.add(path+".status", "must be between 500 and 599, got %d", s)
		}
		if r := wd.RetryAfter; r < 0 || r%time.Second != 0 || r > MaxPeriod {
			p.add(path+".retry_after", "must be whole seconds from 0 to %s, got %s", fmtDuration(MaxPeriod), fmtDuration(r))
		}
	}
	if uc.OriginTLS != nil {
		// Its own: written where the group's servers are (a domain's, or
		// a route's), not inherited from the top level, or from the
		// domain by a route, where a group without https servers
		// ignores it.
		own := at["origin_tls"] != "" && (at["origin_tls"] == at["origins"] || at["origins"] == "")
		up.TLS = compileOriginTLS(p, keyPath(at["origin_tls"], "origin_tls"), *uc.OriginTLS, servers, own)
	}
	return up
}

func compileHealth(p *problems, path string, hc HealthConfig, host string) *Health {
	h := &Health{Path: hc.Path, Host: hc.Host, Interval: hc.Interval, Timeout: hc.Timeout,
		HealthyAfter: hc.HealthyAfter, UnhealthyAfter: hc.UnhealthyAfter}
	if !strings.HasPrefix(h.Path, "/") || strings.ContainsAny(h.Path, " \t\r\n#") {
		p.add(path+".path", "must be a path starting with /, got %q", h.Path)
	}
	if h.Host == "" {
		h.Host = host
	} else if _, err := url.Parse("http://" + h.Host + "/"); err != nil || strings.ContainsAny(h.Host, "/ \t\r\n@") {
		p.add(path+".host", "must be a host name, got %q", h.Host)
	}
	if h.Interval == 0 {
		h.Interval = DefaultHealthInterval
	}
	if h.Interval < 100*time.Millisecond || h.Interval > time.Hour {
		p.add(path+".interval", "must be between 100ms and 1h, got %s", fmtDuration(h.Interval))
	}
	if h.Timeout == 0 {
		h.Timeout = min(DefaultHealthTimeout, h.Interval)
	}
	if h.Timeout <= 0 || h.Timeout > h.Interval {
		p.add(path+".timeout", "must be above 0 and at most interval (%s), got %s", fmtDuration(h.Interval), fmtDuration(h.Timeout))
	}
	counts := []struct {
		key string
		v   *int
		def int
	}{{"healthy_after", &h.HealthyAfter, DefaultHealthyAfter}, {"unhealthy_after", &h.UnhealthyAfter, DefaultUnhealthyAfter}}
	for _, c := range counts {
		if *c.v == 0 {
			*c.v = c.def
		}
		if *c.v < 1 || *c.v > 100 {
			p.add(path+"."+c.key, "must be between 1 and 100, got %d", *c.v)
		}
	}
	if len(hc.ExpectStatus) == 0 {
		h.Expect = []StatusRange{{200, 399}}
	}
	for i, raw := range hc.ExpectStatus {
		r, ok := parseStatusRange(string(raw))
		if !ok {
			p.add(fmt.Sprintf("%s.expect_status[%d]", path, i), "must be a status from 100 to 599 or a range such as 200-399, got %q", raw)
			continue
		}
		h.Expect = append(h.Expect, r)
	}
	return h
}

// parseStatusRange reads "204" or "200-399".
func parseStatusRange(s string) (StatusRange, bool) {
	lo, hi, isRange := strings.Cut(strings.TrimSpace(s), "-")
	if !isRange {
		hi = lo
	}
	a, err1 := strconv.Atoi(strings.TrimSpace(lo))
	b, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if err1 != nil || err2 != nil || a < 100 || b > 599 || a > b {
		return StatusRange{}, false
	}
	return StatusRange{a, b}, true
}

// compileFailures reads a list of failure names among allowed.
func compileFailures(p *problems, path string, names []string, allowed Failures) Failures {
	var f Failures
	for i, raw := range names {
		var found Failures
		for _, n := range failureNames {
			if n.name == raw {
				found = n.f
			}
		}
		if found == 0 || found&allowed == 0 {
			p.add(fmt.Sprintf("%s[%d]", path, i), "must be one of %s, got %q", strings.Join(allowed.Names(), ", "), raw)
			continue
		}
		f |= found
	}
	return f
}

// compilePassive compiles passive ejection: on by default for a group of
// more than one server, off with `passive: false`.
func compilePassive(p *problems, path string, pc *PassiveConfig, servers int) *Passive {
	if pc == nil {
		if servers < 2 {
			return nil
		}
		pc = &PassiveConfig{}
	}
	if pc.Enabled != nil && !*pc.Enabled {
		if pc.MaxFails != 0 || pc.FailWindow != 0 || pc.EjectFor != 0 || pc.On != nil {
			p.add(path, "is off (false): its other keys do not apply")
		}
		return nil
	}
	ps := &Passive{MaxFails: pc.MaxFails, FailWindow: pc.FailWindow, EjectFor: pc.EjectFor, On: DefaultPassiveOn}
	if ps.MaxFails == 0 {
		ps.MaxFails = DefaultMaxFails
	}
	if ps.MaxFails < 1 || ps.MaxFails > 1000 {
		p.add(path+".max_fails", "must be between 1 and 1000, got %d", ps.MaxFails)
	}
	for _, d := range []struct {
		key string
		v   *time.Duration
		def time.Duration
	}{{"fail_window", &ps.FailWindow, DefaultFailWindow}, {"eject_for", &ps.EjectFor, DefaultEjectFor}} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < time.Second || *d.v > time.Hour {
			p.add(path+"."+d.key, "must be between 1s and 1h, got %s", fmtDuration(*d.v))
		}
	}
	if pc.On != nil {
		ps.On = compileFailures(p, path+".on", pc.On, passiveAllowed)
	}
	return ps
}

func compileRetries(p *problems, path string, rc *RetriesConfig) Retries {
	r := Retries{Attempts: DefaultRetryAttempts, On: DefaultRetryOn, Budget: DefaultRetryBudget}
	if rc == nil {
		return r
	}
	if rc.Attempts != nil {
		r.Attempts = *rc.Attempts
		if r.Attempts < 0 || r.Attempts > MaxRetryAttempts {
			p.add(path+".attempts", "must be between 0 and %d, got %d", MaxRetryAttempts, r.Attempts)
		}
	}
	if rc.On != nil {
		r.On = compileFailures(p, path+".on", rc.On, retriesAllowed)
	}
	if rc.Budget != "" {
		v, ok := strings.CutSuffix(strings.TrimSpace(rc.Budget), "%")
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if !ok || err != nil || f < 0 || f > 100 {
			p.add(path+".budget", "must be a share from 0%% to 100%% such as 20%%, got %q", rc.Budget)
		} else {
			r.Budget = f / 100
		}
	}
	return r
}

// compileOriginQueue compiles a domain's origin_queue (at path; "" the
// top level's): nil is every default.
func compileOriginQueue(p *problems, path string, qc *OriginQueueConfig) OriginQueue {
	q := OriginQueue{Max: DefaultOriginQueueMax}
	if qc == nil {
		return q
	}
	path = keyPath(path, "origin_queue")
	if qc.Max != 0 {
		q.Max = qc.Max
	}
	if q.Max < 1 || q.Max > MaxOriginQueue {
		p.add(path+".max", "must be between 1 and %d, got %d", MaxOriginQueue, qc.Max)
	}
	q.Timeout = qc.Timeout
	if q.Timeout < 0 || q.Timeout > MaxOriginQueueTimeout {
		p.add(path+".timeout", "must be between 0 (refused at once) and %s, got %s", fmtDuration(MaxOriginQueueTimeout), fmtDuration(q.Timeout))
	}
	return q
}

// firstExactHost returns the first host of hosts that is not a wildcard,
// normalised, or "".
func firstExactHost(hosts []string) string {
	for _, h := range hosts {
		if !strings.HasPrefix(h, "*") {
			return h
		}
	}
	return ""
}
