package replay

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/trace"
	"github.com/edgerate/edge/window"
)

// Agreement says how often replaying edge's own access log through a
// configuration decides each rule as edge decided it live: the check that
// the log, the configuration and replay tell one story. With the local
// store and the configuration edge ran, every decision agrees.
type Agreement struct {
	Lines     int     `json:"lines"`     // lines of edge's log with a rule decision compared
	Decisions float64 `json:"decisions"` // rule decisions compared, sampled lines weighted
	Agreed    float64 `json:"agreed"`
	Ratio     float64 `json:"agreement"` // Agreed / Decisions
	// Approximate: some lines stand for more than one refusal
	// (refused_sample), which are weighted but were not seen.
	Approximate bool            `json:"approximate,omitempty"`
	Rules       []RuleAgreement `json:"rules"`
	Skips       []Skip          `json:"skipped,omitempty"` // rules not compared, and why
}

// RuleAgreement is one rule's share of an Agreement.
type RuleAgreement struct {
	Rule      string  `json:"rule"` // domain/rule
	Decisions float64 `json:"decisions"`
	Agreed    float64 `json:"agreed"`
}

// Agree replays the lines of edge's access log among recs (those with
// Edge set) through t's counters, in time order, deciding each line's
// rules as the proxy does (every matching rule counts; a block rule's
// refusal gives back what the rules that do not count blocked requests
// counted), and compares each decision with the one logged. A rule is
// keyed by the key the line records (access_log.keys); without one, by
// the parts a line records (client, path, host); a rule keyed by a header
// or a TLS fingerprint is then skipped (its live decision standing, for
// the refunds of the others), as are rules whose decision
// depends on what a line does not hold (a concurrency rule's responses, a
// soft rule's draw, a cost from a header or the response).
func Agree(recs []trace.Record, t *rules.Table) (*Agreement, error) {
	lines := make([]*trace.Record, 0, len(recs))
	for i := range recs {
		if recs[i].Edge != nil {
			lines = append(lines, &recs[i])
		}
	}
	// Lines are written when the answer ends: equal times keep the
	// file's order, which is the order of decision for requests that did
	// not overlap.
	slices.SortStableFunc(lines, func(a, b *trace.Record) int { return cmp.Compare(a.Time, b.Time) })
	ag := &Agreement{}
	stores := make(map[string]*window.Store)
	skipped := make(map[string]bool)
	perRule := make(map[string]*RuleAgreement)
	var keys []byte
	type decided struct {
		rule int
		id   window.ID
		d    window.Decision
	}
	var ds []decided
	for _, rec := range lines {
		d, ok := t.Domain(rec.Edge.Domain)
		if !ok || len(d.Rules) == 0 || len(rec.Edge.Rules) == 0 {
			continue
		}
		store := stores[d.Name]
		if store == nil {
			s, err := domainStore(d)
			if err != nil {
				return nil, err
			}
			stores[d.Name], store = s, s
		}
		src := RecordSource(rec, t.IPv6Prefix)
		if src.ClientName == "" {
			src.Addr = src.Client.Addr()
			if a, err := netip.ParseAddr(rec.Source); err == nil {
				src.Addr = a.Unmap()
			}
		}
		now := time.UnixMicro(rec.Time)
		tally := store.Counter().Begin()
		ds, keys = ds[:0], keys[:0]
		blocked := false
		for i, r := range d.Rules {
			if !r.Matches(rec.Method, src.Path) || r.Exempt(src.Addr) {
				continue
			}
			live := liveRule(rec.Edge, r.Name)
			name := d.Name + "/" + r.Name
			if reason := unagreeable(r, live); reason != "" {
				if !skipped[name] {
					skipped[name] = true
					ag.Skips = append(ag.Skips, Skip{Rule: name, Reason: reason})
				}
				// What it decided live still decides whether the others
				// give back what they counted.
				if live != nil && live.Outcome != "allowed" && r.Action == rules.ActionBlock {
					blocked = true
				}
				continue
			}
			start := len(keys)
			if live != nil && live.HasKey {
				b, err := rules.ParseKey(r.Key, live.Key, t.IPv6Prefix)
				if err != nil {
					return nil, fmt.Errorf("%s: key %q: %w", name, live.Key, err)
				}
				keys = append(keys, b...)
			} else {
				keys = rules.AppendKey(keys, r.Key, &src)
			}
			kb := keys[start:len(keys):len(keys)]
			id := window.ID{Key: store.Key(i, kb), Name: kb}
			dec := tally.Decide(id, r.Cost, now)
			if !dec.Allowed && r.Action == rules.ActionBlock {
				blocked = true
			}
			ds = append(ds, decided{rule: i, id: id, d: dec})
		}
		if blocked {
			for j := range ds {
				if !d.Rules[ds[j].rule].CountBlocked {
					ds[j].d = tally.Refund(ds[j].id, ds[j].d, now)
				}
			}
		}
		tally.End()
		w := float64(rec.Edge.Sample)
		if rec.Edge.Sample > 1 {
			ag.Approximate = true
		}
		compared := false
		for _, x := range ds {
			r := d.Rules[x.rule]
			live := liveRule(rec.Edge, r.Name)
			if live == nil {
				continue
			}
			name := d.Name + "/" + r.Name
			ra := perRule[name]
			if ra == nil {
				ra = &RuleAgreement{Rule: name}
				perRule[name] = ra
			}
			ra.Decisions += w
			ag.Decisions += w
			if (live.Outcome == "allowed") == x.d.Allowed {
				ra.Agreed += w
				ag.Agreed += w
			}
			compared = true
		}
		if compared {
			ag.Lines++
		}
	}
	for _, d := range t.Domains {
		for _, r := range d.Rules {
			if ra := perRule[d.Name+"/"+r.Name]; ra != nil {
				ag.Rules = append(ag.Rules, *ra)
			}
		}
	}
	if ag.Decisions > 0 {
		ag.Ratio = ag.Agreed / ag.Decisions
	}
	return ag, nil
}

func liveRule(e *trace.EdgeLine, name string) *trace.EdgeRule {
	for i := range e.Rules {
		if e.Rules[i].Name == name {
			return &e.Rules[i]
		}
	}
	return nil
}

// unagreeable says why rule r's live decisions cannot be compared with a
// replay of a line that records live of it, or "".
func unagreeable(r *rules.Rule, live *trace.EdgeRule) string {
	switch {
	case r.Algorithm == algorithm.Concurrency:
		return "a concurrency rule counts requests in flight, which depend on response times an access log does not record"
	case r.Soft:
		return "a soft rule refuses by a random draw"
	case r.CostHeader != "":
		return "its cost comes from a request header, which the log does not record"
	case r.CountStatus != nil || r.ResponseCostHeader != "":
		return "it counts after the response, by what the log does not record"
	}
	if live != nil && live.HasKey {
		return ""
	}
	for _, k := range r.Key {
		switch k.Kind {
		case rules.KeyHeader:
			return "keyed by a header (" + k.Header + "), which the line records only as the rule's key: set access_log.keys"
		case rules.KeyJA4:
			return "keyed by the TLS fingerprint, which the line records only as the rule's key: set access_log.keys"
		}
	}
	return ""
}

// domainStore is a store of d's rules as the proxy makes one in local
// mode.
func domainStore(d *rules.Domain) (*window.Store, error) {
	limits := make([]window.Limit, len(d.Rules))
	for i, r := range d.Rules {
		limits[i] = window.Limit{
			Limit: r.Limit, Period: r.Period, Mitigation: r.MitigationTimeout, CountBlocked: r.CountBlocked,
			Soft: r.Soft, Precision: r.Precision, Algorithm: r.Algorithm, Burst: r.Burst, MaxDelay: r.MaxDelay,
			Reset: algorithm.Reset(r.Reset), Location: r.Location,
		}
	}
	capacity := d.MaxKeys
	if capacity <= 0 {
		capacity = 1 << 16
	}
	s, err := window.New(window.Options{Capacity: capacity, Limits: limits})
	if err != nil {
		return nil, fmt.Errorf("domain %q: %w", d.Name, err)
	}
	return s, nil
}

// WriteAgreement writes a as a few lines of text: the whole, each rule,
// the rules skipped.
func WriteAgreement(w io.Writer, a *Agreement) error {
	approx := ""
	if a.Approximate {
		approx = ", approximate: sampled refusals weighted (refused_sample)"
	}
	if _, err := fmt.Fprintf(w, "agreement with the decisions logged live: %s of %s rule decisions on %d lines%s\n",
		pct(a.Ratio), weight(a.Decisions), a.Lines, approx); err != nil {
		return err
	}
	for _, r := range a.Rules {
		ratio := 0.0
		if r.Decisions > 0 {
			ratio = r.Agreed / r.Decisions
		}
		if _, err := fmt.Fprintf(w, "  %s: %s of %s\n", r.Rule, pct(ratio), weight(r.Decisions)); err != nil {
			return err
		}
	}
	for _, s := range a.Skips {
		if _, err := fmt.Fprintf(w, "  not compared %s: %s\n", s.Rule, s.Reason); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(w)
	return err
}

// weight writes a weighted count, whole when it is.
func weight(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}
