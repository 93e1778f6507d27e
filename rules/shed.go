package rules

import (
	"fmt"
	"maps"
	"net/textproto"
	"slices"
	"strings"

	"github.com/edgerate/edge/internal/wire"
)

// MaxInFlight is the largest shed.max_in_flight of a domain.
const MaxInFlight = 1_000_000

// ShedConfig is a domain's shed key: the most requests in flight to its
// origin, and the shares of them each priority class may use.
type ShedConfig struct {
	// MaxInFlight is the most requests in flight to the origin at once
	// (1 to MaxInFlight). Critical requests are refused only here.
	MaxInFlight int `mapstructure:"max_in_flight"`
	// CriticalReserve is the share of MaxInFlight only critical requests
	// may use (0 to 1, default 0): normal requests are refused once
	// (1 − CriticalReserve) × MaxInFlight are in flight.
	CriticalReserve float64 `mapstructure:"critical_reserve"`
	// SheddableShare is the share of MaxInFlight above which sheddable
	// requests are refused (0 to 1 − CriticalReserve; nil means
	// 1 − CriticalReserve, the same threshold as normal requests).
	SheddableShare *float64 `mapstructure:"sheddable_share"`
}

// PriorityConfig is one entry of a domain's priorities: requests its match
// selects are of its class.
type PriorityConfig struct {
	Match PriorityMatch `mapstructure:"match"`
	// Class is critical, normal or sheddable.
	Class string `mapstructure:"class"`
}

// PriorityMatch selects requests by host, path, method and headers; every
// part set must match, and an empty match selects every request.
type PriorityMatch struct {
	// Host, when set, is a host name the request's Host must equal
	// (compared normalised, like domains' hosts; no wildcards).
	Host string `mapstructure:"host"`
	// PathPrefix, when set, must start with "/"; compared like rules'.
	PathPrefix string `mapstructure:"path_prefix"`
	// Methods, when set, are HTTP methods; they are upper-cased.
	Methods []string `mapstructure:"methods"`
	// Headers maps a header name to the exact value one of the request's
	// values of that header must have (case-sensitive value; names are
	// case-insensitive). An empty value matches a header that is present.
	Headers map[string]string `mapstructure:"headers"`
}

// Class is a request's priority for load shedding. The zero value is
// ClassNormal.
type Class uint8

const (
	ClassNormal    Class = iota // refused at (1 − critical_reserve) × max_in_flight
	ClassCritical               // refused only at max_in_flight
	ClassSheddable              // refused at sheddable_share × max_in_flight
)

// String returns the config spelling, such as "sheddable".
func (c Class) String() string { return classSpelling.name(c) }

var classSpelling = spelling[Class]{"Class", []string{"normal", "critical", "sheddable"}}

// Shed is a domain's compiled load shedding. Callers must not modify it.
type Shed struct {
	MaxInFlight int64
	// Limits are the in-flight counts at which each class is refused,
	// indexed by Class: a request of class c is admitted only while fewer
	// than Limits[c] are in flight.
	Limits     [3]int64
	Priorities []Priority // config order; first match wins
}

// Priority is one compiled entry of a domain's priorities.
type Priority struct {
	Host       string   // "" matches any host; normalised
	PathPrefix string   // "" matches any path
	Methods    []string // nil matches any method; upper-case
	Headers    []HeaderMatch
	Class      Class
}

// HeaderMatch is one header a Priority requires.
type HeaderMatch struct {
	Name  string // canonical (textproto) form
	Value string // "" matches any value of a present header
}

// Classify returns the class of a request to host (normalised), with the
// cleaned path, method and header h (nil when the request has none): the
// first priority that matches, or ClassNormal.
func (s *Shed) Classify(host, method, path string, h HeaderValues) Class {
	for i := range s.Priorities {
		if pr := &s.Priorities[i]; pr.matches(host, method, path, h) {
			return pr.Class
		}
	}
	return ClassNormal
}

func (pr *Priority) matches(host, method, path string, h HeaderValues) bool {
	if pr.Host != "" && pr.Host != host {
		return false
	}
	if !strings.HasPrefix(path, pr.PathPrefix) {
		return false
	}
	if pr.Methods != nil {
		found := false
		for _, m := range pr.Methods {
			if m == method {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return headersMatch(pr.Headers, h)
}

// headersMatch reports whether h has every field of hms: present, and with
// the given value among its values when one is given. h is nil for a
// request without fields.
func headersMatch(hms []HeaderMatch, h HeaderValues) bool {
	for _, hm := range hms {
		if h == nil {
			return false
		}
		vals := h.Values(hm.Name)
		if len(vals) == 0 {
			return false
		}
		if hm.Value != "" && !slices.Contains(vals, hm.Value) {
			return false
		}
	}
	return true
}

// compileShed compiles domain dc's shed and priorities (path names the
// domain). Priorities without shed are an error: they would do nothing.
func compileShed(p *problems, path string, dc DomainConfig) *Shed {
	if dc.Shed == nil {
		if len(dc.Priorities) > 0 {
			p.add(path+".priorities", "apply only with shed, which is not set")
		}
		return nil
	}
	if dc.Respond != nil {
		p.add(path+".shed", "applies only to a domain with an origin, not to respond")
	}
	c := *dc.Shed
	sp := path + ".shed"
	s := &Shed{MaxInFlight: int64(c.MaxInFlight)}
	if c.MaxInFlight < 1 || c.MaxInFlight > MaxInFlight {
		p.add(sp+".max_in_flight", "must be between 1 and %d, got %d", MaxInFlight, c.MaxInFlight)
	}
	okReserve := c.CriticalReserve >= 0 && c.CriticalReserve <= 1 // false for NaN
	if !okReserve {
		p.add(sp+".critical_reserve", "must be between 0 and 1, got %v", c.CriticalReserve)
	}
	share := 1 - c.CriticalReserve
	if c.SheddableShare != nil {
		share = *c.SheddableShare
		switch {
		case !(share >= 0 && share <= 1):
			p.add(sp+".sheddable_share", "must be between 0 and 1, got %v", share)
		case okReserve && share > 1-c.CriticalReserve+1e-9:
			p.add(sp+".sheddable_share", "must be at most 1 − critical_reserve (%v), got %v", 1-c.CriticalReserve, share)
			share = 1 - c.CriticalReserve
		}
	}
	// Thresholds are rounded down: a share never lets in more than it says.
	s.Limits[ClassCritical] = s.MaxInFlight
	s.Limits[ClassNormal] = int64(float64(s.MaxInFlight)*(1-c.CriticalReserve) + 1e-9)
	s.Limits[ClassSheddable] = min(int64(float64(s.MaxInFlight)*share+1e-9), s.Limits[ClassNormal])

	for i, pc := range dc.Priorities {
		pp := fmt.Sprintf("%s.priorities[%d]", path, i)
		pr := Priority{Class: classSpelling.parse(p, pp+".class", pc.Class)}
		if pc.Class == "" {
			p.add(pp+".class", "must be normal, critical or sheddable, got \"\"")
		}
		m := pc.Match
		if m.Host != "" {
			h, ok := wire.NormalizeHost(m.Host)
			if !ok || strings.HasPrefix(h, "*") {
				p.add(pp+".match.host", "must be a host name, got %q", m.Host)
			}
			pr.Host = h
		}
		pr.PathPrefix = compilePathPrefix(p, pp+".match.path_prefix", m.PathPrefix)
		for k, raw := range m.Methods {
			if !wire.IsToken(raw) {
				p.add(fmt.Sprintf("%s.match.methods[%d]", pp, k), "must be an HTTP method (a token), got %q", raw)
				continue
			}
			pr.Methods = append(pr.Methods, strings.ToUpper(raw))
		}
		pr.Headers = compileHeaderMatch(p, pp+".match.headers", m.Headers)
		s.Priorities = append(s.Priorities, pr)
	}
	return s
}

// compileHeaderMatch compiles a match's headers (path names them), in
// name order so that a configuration compiles the same every time.
func compileHeaderMatch(p *problems, path string, headers map[string]string) []HeaderMatch {
	var out []HeaderMatch
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		canon := textproto.CanonicalMIMEHeaderKey(name)
		switch {
		case !wire.IsToken(name):
			p.add(path, "must name headers (tokens), got %q", name)
		case canon == "Host":
			// Go's server moves Host out of Request.Header.
			p.add(path, "must not name Host (match by host instead), got %q", name)
		default:
			out = append(out, HeaderMatch{Name: canon, Value: headers[name]})
		}
	}
	return out
}
