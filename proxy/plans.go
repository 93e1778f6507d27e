package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
)

// This file finds which plan a request is on, from its domain's api_keys
// (an API key looked up in the domain's file by its hash, or a plan read
// from another key part, a token's claim), and refuses one without a
// valid key where a key is required: 403 {"error":"invalid_api_key"},
// counted, never forwarded (docs/graphql.md, "Plans").
//
// A rule's plan is decided as a rule of its own: domain.all holds the
// rules, then one rule state for each plan of each rule, with the plan's
// values (rules.Plan) and counters of its own in the domain's store (and
// in Redis, under its own rule identity), so that a key that changes plan
// starts afresh. A request of a plan its rule does not list is counted by
// the rule's own values, its key tagged with the plan all the same.

// outcomeInvalidKey is the outcome of a request refused for its API key.
const outcomeInvalidKey = "invalid_api_key"

// planned is one entry of a domain's rule states: a rule, or a rule's
// plan (plan its name).
type planned struct {
	*rules.Rule
	plan string
	base int // the rule's index in Domain.Rules
}

// withPlans returns rd's rules, then each rule's plans in order.
func withPlans(rd *rules.Domain) []planned {
	out := make([]planned, 0, len(rd.Rules))
	for i, r := range rd.Rules {
		out = append(out, planned{Rule: r, base: i})
	}
	for i, r := range rd.Rules {
		for _, pl := range r.Plans {
			out = append(out, planned{Rule: pl.Rule, plan: pl.Name, base: i})
		}
	}
	return out
}

// linkPlans gives each rule of d the index of its plans in d.all, and
// their decision counters, by plan name, with "other" for the plans the
// config does not name.
func (p *Proxy) linkPlans(d *domain, all []planned) {
	names := d.PlanNames
	if d.APIKeys == nil {
		return
	}
	for i := range d.rules {
		rs := &d.rules[i]
		rs.planAt = make([]int, len(names))
		for k := range rs.planAt {
			rs.planAt[k] = -1
		}
		rs.planOutcomes = make([]ruleCounters, len(names)+1)
		for k, name := range append(append([]string(nil), names...), planOther) {
			rs.planOutcomes[k] = p.metrics.planCounters(d.Name, rs.Name, name)
		}
	}
	for j, pr := range all {
		if pr.plan != "" {
			d.rules[pr.base].planAt[d.PlanIndex(pr.plan)] = j
		}
	}
}

// planOther labels the plans the config does not name.
const planOther = "other"

// planChoice is the plan a request is on: its name (lower case) and its
// index in Domain.PlanNames, or -1 for one the config does not name.
type planChoice struct {
	name  string
	index int
}

// choosePlan finds the plan of ex's request from its domain's api_keys,
// into ex.plan (nil when it is on none). It reports false when the
// request is refused for its key: ex.ans is then its 403.
func (p *Proxy) choosePlan(ctx context.Context, ex *exchange) bool {
	d := ex.d
	a := d.APIKeys
	key, hasKey := rules.PartValue(a.From, &ex.src)
	name, listed := "", false
	if hasKey {
		name, listed = a.PlanOf(key)
	}
	if !listed && a.HasPlanFrom {
		if v, ok := rules.PartValue(a.PlanFrom, &ex.src); ok {
			name = strings.ToLower(v)
		}
	}
	known := hasKey && (listed || name != "" || a.File == "")
	if a.Required && !known {
		if p.log.Enabled(ctx, slog.LevelDebug) {
			args := []any{"domain", d.Name, "client", ex.src.Client.Addr().String(), "from", a.From.String()}
			if hasKey {
				args = append(args, "key_hash", rules.KeyHash(key)) // never the key itself
			}
			p.log.Debug("request refused: missing or unknown API key", args...)
		}
		if d.invalidKey != nil {
			d.invalidKey.Inc()
		}
		ex.ans.invalidKeyAnswer()
		return false
	}
	ex.plan = nil
	if name != "" {
		ex.planBuf = planChoice{name: name, index: d.PlanIndex(name)}
		ex.plan = &ex.planBuf
	}
	return true
}

// planRule returns the index in d.all of rule i's state for plan pl
// (nil: none): the plan's own where the rule lists it, else the rule's.
func planRule(d *domain, i int, pl *planChoice) int {
	if pl == nil || pl.index < 0 {
		return i
	}
	if j := d.rules[i].planAt[pl.index]; j >= 0 {
		return j
	}
	return i
}

// appendPlan tags a key with the request's plan, so that each plan of a
// rule, listed or not, counts on keys of its own.
func appendPlan(b []byte, pl *planChoice) []byte {
	if pl == nil {
		return b
	}
	b = append(b, 0xff, 'P', byte(min(len(pl.name), 255)))
	return append(b, pl.name[:min(len(pl.name), 255)]...)
}

// observePlan counts the decision dec of rule base, for a request on
// plan pl (nil: none, not counted), in edge_plan_decisions_total.
func observePlan(d *domain, base int, pl *planChoice, dec window.Decision) {
	if pl == nil {
		return
	}
	rs := &d.rules[base]
	if rs.planOutcomes == nil {
		return
	}
	k := pl.index
	if k < 0 {
		k = len(rs.planOutcomes) - 1
	}
	rs.planOutcomes[k].observe(dec)
}

// invalidKeyAnswer answers a request without a valid API key where one is
// required: 403 {"error":"invalid_api_key"}. The check listener answers it
// with its deny_status.
func (a *answer) invalidKeyAnswer() {
	a.reset(http.StatusForbidden, outcomeInvalidKey)
	a.set(fieldCacheControl, noStore)
	a.set(fieldContentType, contentTypeJSON)
	a.set(fieldXContentTypeOptions, nosniff)
	a.body = append(a.body, `{"error":"invalid_api_key"}`+"\n"...)
}
