package proxy

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"time"

	"github.com/edgerate/edge/rules"
)

// ReloadResult says what a configuration change did.
type ReloadResult struct {
	// Time is when the configuration took effect; Hash identifies it.
	Time time.Time `json:"time"`
	Hash string    `json:"hash,omitempty"`

	DomainsAdded   []string `json:"domains_added,omitempty"`
	DomainsRemoved []string `json:"domains_removed,omitempty"`
	// Rules are named "domain/rule". Kept rules are unchanged and keep their
	// counters; changed rules keep their counters too (their identity, key
	// and period, is the same; their limit or other settings are not);
	// reset rules kept their name but changed key or period, so their
	// counts mean something else now and start from zero.
	RulesAdded   []string `json:"rules_added,omitempty"`
	RulesRemoved []string `json:"rules_removed,omitempty"`
	RulesKept    []string `json:"rules_kept,omitempty"`
	RulesChanged []string `json:"rules_changed,omitempty"`
	RulesReset   []string `json:"rules_reset,omitempty"`
	// KeysCarried counts the keys whose counters moved to the new
	// configuration.
	KeysCarried int `json:"keys_carried"`
	// RestartRequired lists settings that changed but take effect only
	// when edge restarts (listeners, server timeouts, pop).
	RestartRequired []string `json:"restart_required,omitempty"`
}

// ruleIdentity names what a rule's counts mean: its domain, name, key and
// period. Counters carry across a reload exactly when the identity holds.
func ruleIdentity(domain string, r *rules.Rule) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%v\x00%d", domain, r.Name, r.Key, r.Period)
	return h.Sum64()
}

// Reload switches to table t, carrying counters, mitigations and top
// talkers over for every rule whose identity is unchanged. The switch is
// atomic: a request sees the old configuration or the new one, never parts
// of both. hash identifies the new configuration. On error the running
// configuration stays.
func (p *Proxy) Reload(t *rules.Table, hash string) (ReloadResult, error) {
	p.reloadMu.Lock()
	defer p.reloadMu.Unlock()
	old := p.state.Load()

	transport, oldTransport := p.transport, http.RoundTripper(nil)
	if p.ownTransport && t.Timeouts.Upstream != old.table.Timeouts.Upstream {
		transport, oldTransport = newTransport(t.Timeouts), p.transport
	}
	st, err := p.build(t, old, transport)
	if err != nil {
		p.ReloadFailed(err)
		return ReloadResult{}, err
	}
	res := diff(old, st)
	res.Time, res.Hash = p.now(), hash
	// Carry counters last, just before the switch, so that the fewest
	// requests are counted in the old stores after their copy.
	for _, d := range st.domains {
		if d.carry == nil {
			continue
		}
		n, err := old.domain(d.Name).store.Carry(d.store, d.carry)
		if err != nil {
			st.closeShared()
			return ReloadResult{}, fmt.Errorf("proxy: carrying counters of %q: %w", d.Name, err)
		}
		res.KeysCarried += n
	}
	st.result = res
	p.state.Store(st)
	old.closeShared() // the Redis client stays: only this configuration's domains go
	p.lastErr.Store(nil)
	p.metrics.reloaded(true, res.Time)
	if oldTransport != nil {
		p.transport = transport
		if c, ok := oldTransport.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
	p.metrics.forget(old, st)
	return res, nil
}

// diff compares two configurations rule by rule.
func diff(old, cur *state) ReloadResult {
	var res ReloadResult
	for _, d := range cur.domains {
		od := old.domain(d.Name)
		if od == nil {
			res.DomainsAdded = append(res.DomainsAdded, d.Name)
			for _, r := range d.rules {
				res.RulesAdded = append(res.RulesAdded, d.Name+"/"+r.Name)
			}
			continue
		}
		for _, r := range d.rules {
			name := d.Name + "/" + r.Name
			or, ok := od.Rule(r.Name)
			switch {
			case !ok:
				res.RulesAdded = append(res.RulesAdded, name)
			case ruleIdentity(od.Name, or) != r.identity:
				res.RulesReset = append(res.RulesReset, name)
			case sameRule(or, r.Rule):
				res.RulesKept = append(res.RulesKept, name)
			default:
				res.RulesChanged = append(res.RulesChanged, name)
			}
		}
		for _, or := range od.rules {
			if _, ok := d.Rule(or.Name); !ok {
				res.RulesRemoved = append(res.RulesRemoved, d.Name+"/"+or.Name)
			}
		}
	}
	for _, od := range old.domains {
		if cur.domain(od.Name) == nil {
			res.DomainsRemoved = append(res.DomainsRemoved, od.Name)
			for _, r := range od.rules {
				res.RulesRemoved = append(res.RulesRemoved, od.Name+"/"+r.Name)
			}
		}
	}
	ot, nt := old.table, cur.table
	for _, c := range []struct {
		name    string
		changed bool
	}{
		{"listen", ot.Listen != nt.Listen},
		{"admin_listen", ot.AdminListen != nt.AdminListen},
		{"pop", ot.Pop != nt.Pop},
		{"max_header_bytes", ot.MaxHeaderBytes != nt.MaxHeaderBytes},
		{"timeouts (server)", ot.Timeouts.ReadHeader != nt.Timeouts.ReadHeader || ot.Timeouts.Read != nt.Timeouts.Read ||
			ot.Timeouts.Write != nt.Timeouts.Write || ot.Timeouts.Idle != nt.Timeouts.Idle},
		{"log", ot.LogLevel != nt.LogLevel || ot.LogFormat != nt.LogFormat},
		{"cluster", !ot.Cluster.Equal(nt.Cluster)},
	} {
		if c.changed {
			res.RestartRequired = append(res.RestartRequired, c.name)
		}
	}
	return res
}

// sameRule reports whether two rules are configured identically.
func sameRule(a, b *rules.Rule) bool {
	return a.Name == b.Name && a.PathPrefix == b.PathPrefix && slices.Equal(a.Methods, b.Methods) &&
		a.Limit == b.Limit && a.Period == b.Period && slices.Equal(a.Key, b.Key) &&
		a.Action == b.Action && a.MitigationTimeout == b.MitigationTimeout &&
		a.CountBlocked == b.CountBlocked && a.Headers == b.Headers &&
		equalResponse(a.BlockResponse, b.BlockResponse)
}

func equalResponse(a, b *rules.Response) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// ReloadFailed records a reload that could not be applied, such as an
// invalid configuration file: the running configuration stays, and the
// metrics and LastReloadError say so until a reload succeeds.
func (p *Proxy) ReloadFailed(err error) {
	p.lastErr.Store(&err)
	p.metrics.reloaded(false, p.now())
}

// LastReloadError returns why the last reload failed, or nil if it
// succeeded or none was tried.
func (p *Proxy) LastReloadError() error {
	if e := p.lastErr.Load(); e != nil {
		return *e
	}
	return nil
}

// Result returns what the running configuration's load did.
func (p *Proxy) Result() ReloadResult { return p.state.Load().result }

// Table returns the running configuration.
func (p *Proxy) Table() *rules.Table { return p.state.Load().table }
