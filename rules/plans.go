package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"
	"time"
)

// This file compiles a domain's api_keys (who the client is by an API key,
// and which plan the key is on) and a rule's plans (the limit, burst,
// period and cost that replace the rule's own for a request of that plan):
// AWS API Gateway's usage plans. docs/graphql.md, "Plans", says how they
// are used.

// APIKeys is a domain's api_keys, compiled. The file's keys are held only
// by their SHA-256, so that the table, the admin API and every message
// never hold a key itself.
type APIKeys struct {
	// From is the key part the API key is read from (header:X-API-Key,
	// query:api_key, jwt:client_id).
	From KeyPart
	// PlanFrom, when HasPlanFrom, is the key part the plan is read from
	// (jwt:plan) for a key the file does not list.
	PlanFrom    KeyPart
	HasPlanFrom bool
	// File is the mapping's path as configured ("" for none).
	File string
	// Required: a request without a key, or with one neither the file nor
	// PlanFrom gives a plan, is answered 403.
	Required bool
	keys     map[[sha256.Size]byte]string
}

// PlanOf returns the plan the file gives key, in lower case, and whether
// it lists the key. It looks the key up by its hash.
func (a *APIKeys) PlanOf(key string) (string, bool) {
	plan, ok := a.keys[sha256.Sum256([]byte(key))]
	return plan, ok
}

// Keys is how many keys the file lists.
func (a *APIKeys) Keys() int { return len(a.keys) }

// KeyHash is what logs show of an API key: the first 12 hex digits of its
// SHA-256, enough to tell keys apart and to find one's lines, never enough
// to recover it.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

// IsLabel reports whether v is a label: a name of 1 to 64 bytes of
// [A-Za-z0-9_.-], as rule and plan names are.
func IsLabel(v string) bool { return v != "" && len(v) <= maxLabelBytes && isLabel(v) }

// Plan is one plan of a rule: the rule with the plan's values in place of
// its own (Limit, Burst, Period, Cost), counted on counters of its own.
type Plan struct {
	Name string // lower case
	Rule *Rule
}

// compileAPIKeys compiles domain d's api_keys at path.
func compileAPIKeys(p *problems, path string, dc DomainConfig, d *Domain) {
	ac := dc.APIKeys
	if ac == nil {
		return
	}
	path += ".api_keys"
	a := &APIKeys{File: ac.File, Required: ac.Required}
	switch kp, err := ParseKeyPart(ac.From); {
	case ac.From == "":
		p.missing(path+".from", "", "must name the key part the API key is read from, such as header:X-API-Key")
	case err != nil:
		p.add(path+".from", "%s", err)
	case kp.Kind == KeyIP || kp.Kind == KeyPath || kp.Kind == KeyHost:
		p.add(path+".from", "must be a part the client sends (a header, for one), not %q", ac.From)
	default:
		a.From = kp
	}
	if ac.PlanFrom != "" {
		if kp, err := ParseKeyPart(ac.PlanFrom); err != nil {
			p.add(path+".plan_from", "%s", err)
		} else {
			a.PlanFrom, a.HasPlanFrom = kp, true
		}
	}
	if ac.File == "" && ac.PlanFrom == "" {
		p.add(path, "needs a file (API key to plan) or plan_from (where the plan is read)")
	}
	a.keys = make(map[[sha256.Size]byte]string, len(ac.Keys))
	for key, plan := range ac.Keys {
		// The config package read the file and checked its shape; a key
		// never appears in a message.
		a.keys[sha256.Sum256([]byte(key))] = strings.ToLower(plan)
	}
	d.APIKeys = a
}

// compilePlans compiles rule r's plans (rc at path), once r is compiled:
// each plan's values must be valid for the rule's algorithm, as the
// rule's own are.
func compilePlans(p *problems, path string, rc RuleConfig, r *Rule, apiKeys bool) {
	if len(rc.Plans) == 0 {
		return
	}
	if !apiKeys {
		p.add(path+".plans", "need the domain's api_keys, which say which plan a request is on")
	}
	names := make([]string, 0, len(rc.Plans))
	for name := range rc.Plans {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		pc := rc.Plans[name]
		ppath := path + ".plans." + name
		if !checkLabel(p, ppath, name) {
			continue
		}
		pr := *r
		pr.Plans = nil
		if pc.Limit != 0 {
			if pc.Limit < 1 || pc.Limit > MaxLimit {
				p.add(ppath+".limit", "must be between 1 and %d, got %d", MaxLimit, pc.Limit)
			}
			pr.Limit = int64(pc.Limit)
		}
		if pc.Period != 0 {
			switch {
			case r.Period == 0:
				p.add(ppath+".period", "does not apply to algorithm %s, which has no period", r.Algorithm)
			case pc.Period < minPeriod || pc.Period > MaxPeriod || pc.Period%time.Second != 0:
				p.add(ppath+".period", "must be a whole number of seconds from %s to %s, got %s", fmtDuration(minPeriod), fmtDuration(MaxPeriod), fmtDuration(pc.Period))
			}
			pr.Period = pc.Period
		}
		if pc.Burst != 0 {
			switch {
			case !r.Algorithm.Bucket():
				p.add(ppath+".burst", "applies only to algorithm token_bucket or leaky_bucket, got %d with %s", pc.Burst, r.Algorithm)
			case pc.Burst < 1 || pc.Burst > MaxLimit:
				p.add(ppath+".burst", "must be between 1 and %d, got %d", MaxLimit, pc.Burst)
			}
			pr.Burst = int64(pc.Burst)
		}
		if pc.Cost != nil {
			pr.Cost = int64(*pc.Cost)
		}
		switch capacity := pr.Capacity(); {
		case pr.Cost < 0 || pr.Cost > MaxCost:
			p.add(ppath+".cost", "must be between 0 and %d, got %d", MaxCost, pr.Cost)
		case pr.Cost > capacity && capacity >= 1:
			p.add(ppath+".cost", "must be at most the plan's capacity (%d), got %d", capacity, pr.Cost)
		case pr.MaxCost > capacity && capacity >= 1:
			p.add(ppath, "the rule's max_cost (%d) must fit the plan's capacity (%d)", pr.MaxCost, capacity)
		}
		r.Plans = append(r.Plans, Plan{Name: name, Rule: &pr})
	}
}

// checkPlanCount refuses a domain whose rules and their plans together
// are more than a domain's counters hold: each plan is counted as a rule
// of its own.
func checkPlanCount(p *problems, path string, d *Domain) {
	n := len(d.Rules)
	for _, r := range d.Rules {
		n += len(r.Plans)
	}
	if n > MaxRulesPerDomain && len(d.Rules) <= MaxRulesPerDomain {
		p.add(path+".rules", "must have at most %d rules and plans together (each plan of a rule counts as a rule), got %d", MaxRulesPerDomain, n)
	}
}

// planNames returns the names of the plans of d's rules, sorted, once each.
func planNames(d *Domain) []string {
	seen := make(map[string]bool)
	var out []string
	for _, r := range d.Rules {
		for _, pl := range r.Plans {
			if !seen[pl.Name] {
				seen[pl.Name] = true
				out = append(out, pl.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// PlanIndex returns the index of the plan named name among d's PlanNames,
// or -1.
func (d *Domain) PlanIndex(name string) int {
	i := sort.SearchStrings(d.PlanNames, name)
	if i < len(d.PlanNames) && d.PlanNames[i] == name {
		return i
	}
	return -1
}
