package proxy

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"reflect"
	"slices"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
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
	// counters; changed rules keep their counters too (their identity, key,
	// period, algorithm and a bucket's capacity, is the same; their limit,
	// cost or other settings are not); reset rules kept their name but
	// changed one of those, so their counts mean something else now and
	// start from zero.
	RulesAdded   []string `json:"rules_added,omitempty"`
	RulesRemoved []string `json:"rules_removed,omitempty"`
	RulesKept    []string `json:"rules_kept,omitempty"`
	RulesChanged []string `json:"rules_changed,omitempty"`
	RulesReset   []string `json:"rules_reset,omitempty"`
	// KeysCarried counts the keys whose counters moved to the new
	// configuration.
	KeysCarried int `json:"keys_carried"`
	// RestartRequired lists, by their path in the file, the settings that
	// take effect only when edge restarts (see RestartRequiredSettings)
	// and whose value here differs from the one edge started with. Such a
	// setting stays listed, reload after reload, until edge restarts or the
	// file sets it back.
	RestartRequired []string `json:"restart_required,omitempty"`
}

// ruleIdentity names what a rule's counts mean: its domain, name, key,
// period, algorithm and, for a bucket, its capacity (a burst left out is
// the limit, so changing such a bucket's limit changes its capacity too),
// for a quota its reset and time zone.
// Counters carry across a reload exactly when the identity holds; a
// bucket's level is converted to a new limit (window.Store.CarryAt).
func ruleIdentity(domain string, r *rules.Rule, plan string) uint64 {
	var capacity int64
	if r.Algorithm.Bucket() {
		capacity = r.Capacity()
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%v\x00%d\x00%s\x00%d", domain, r.Name, r.Key, r.Period, r.Algorithm, capacity)
	if plan != "" {
		fmt.Fprintf(h, "\x00plan\x00%s", plan) // a plan's counters are its own (plans.go)
	}
	if r.Algorithm == algorithm.Quota {
		fmt.Fprintf(h, "\x00%s\x00%s", r.Reset, r.Location)
	}
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
	res.RestartRequired = restartRequired(p.started, t)
	// Carry counters last, just before the switch, so that the fewest
	// requests are counted in the old stores after their copy.
	for _, d := range st.domains {
		if d.carry == nil {
			continue
		}
		n, err := old.domain(d.Name).store.CarryAt(d.store, d.carry, p.now())
		if err != nil {
			st.closeShared()
			return ReloadResult{}, fmt.Errorf("proxy: carrying counters of %q: %w", d.Name, err)
		}
		res.KeysCarried += n
	}
	st.conns.carryFrom(old.conns) // connections.go
	st.result = res
	if st.alog, err = p.openAccessLog(t, old.alog); err != nil { // accesslog.go
		st.closeShared()
		p.ReloadFailed(err)
		return ReloadResult{}, err
	}
	p.state.Store(st)
	switchAccessLog(old.alog, st.alog) // the old file gets what it holds, later lines go to the new
	old.closeShared()                  // the Redis client stays: only this configuration's domains go
	p.origins.Retain(st.fastOrigins())
	retireTLS(old, st) // origintls.go
	p.retainJWKS(st)   // token.go
	p.checks.Set(st.checks())
	if oldTransport == nil && p.ownTransport && removedServers(old, st) {
		// The transport's pools are per host, not per server: the idle
		// connections of a removed server go with everyone's (dialled
		// again as needed); those in use close when their requests end.
		if c, ok := p.transport.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
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

// removedServers reports whether some server old forwarded to (by
// address) is one cur no longer forwards to.
func removedServers(old, cur *state) bool {
	addrs := make(map[string]bool)
	for _, d := range cur.domains {
		for _, g := range d.groups {
			for _, s := range g.origins.Servers() {
				addrs[s.Addr()] = true
			}
		}
	}
	for _, d := range old.domains {
		for _, g := range d.groups {
			for _, s := range g.origins.Servers() {
				if !addrs[s.Addr()] {
					return true
				}
			}
		}
	}
	return false
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
			case ruleIdentity(od.Name, or, "") != r.identity:
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
	return res
}

// A setting of the configuration file takes effect either on reload or
// only when edge restarts. settings classifies every one, by its path in the
// file with list elements written "[]" ("domains[].rules[].limit"); a test
// walks rules.Config and names any key missing here, so that no key can be
// added without a decision. A setting that needs a restart says how to read
// it from a compiled configuration, so that a reload can tell whether it
// differs from the running value.
var settings = []setting{
	// The listeners are bound once, at start.
	restarts("listen", func(t *rules.Table) any { return t.Listen }),
	restarts("admin_listen", func(t *rules.Table) any { return t.AdminListen }),
	restarts("check.listen", func(t *rules.Table) any {
		if t.Check == nil {
			return ""
		}
		return t.Check.Listen
	}),
	// Read from the running configuration by every question (check.go).
	reloads("check.deny_status"),
	reloads("check.token"),
	reloads("admin_token"),
	reloads("admin_hosts"),
	// pop labels every metric series and names the PoP in Redis.
	restarts("pop", func(t *rules.Table) any { return t.Pop }),
	reloads("origin"),
	// Upstream groups (upstream.go): a reload keeps the state of the
	// servers that stay.
	reloads("origins[].url"),
	reloads("origins[].weight"),
	reloads("origins[].max_in_flight"),
	reloads("origin_queue.max"),
	reloads("origin_queue.timeout"),
	reloads("balance"),
	reloads("hash_key"),
	reloads("health.path"),
	reloads("health.host"),
	reloads("health.interval"),
	reloads("health.timeout"),
	reloads("health.healthy_after"),
	reloads("health.unhealthy_after"),
	reloads("health.expect_status"),
	reloads("passive.enabled"),
	reloads("passive.max_fails"),
	reloads("passive.fail_window"),
	reloads("passive.eject_for"),
	reloads("passive.on"),
	reloads("retries.attempts"),
	reloads("retries.on"),
	reloads("retries.budget"),
	reloads("when_down.status"),
	reloads("when_down.retry_after"),
	reloads("origin_tls.ca_file"),
	reloads("origin_tls.server_name"),
	reloads("origin_tls.client_cert_file"),
	reloads("origin_tls.client_key_file"),
	reloads("origin_tls.insecure_skip_verify"),
	reloads("max_keys"),
	// A reload starts each domain's accuracy sample afresh (its logs
	// judge from one period on, as the counters carried over have history
	// they lack).
	reloads("accuracy_sample"),
	reloads("request_buffer"),
	reloads("max_request_body"),
	reloads("max_buffered_bytes"),
	reloads("client_ip.trusted_proxies"),
	reloads("client_ip.ipv6_prefix"),
	// The public server's own timeouts and header limit are fixed for its
	// lifetime (net/http reads them without a lock); upstream builds a new
	// transport, and shutdown and drain_delay are read when a shutdown
	// begins.
	restarts("timeouts.read_header", func(t *rules.Table) any { return t.Timeouts.ReadHeader }),
	restarts("timeouts.read", func(t *rules.Table) any { return t.Timeouts.Read }),
	restarts("timeouts.write", func(t *rules.Table) any { return t.Timeouts.Write }),
	restarts("timeouts.idle", func(t *rules.Table) any { return t.Timeouts.Idle }),
	reloads("timeouts.upstream"),
	reloads("timeouts.shutdown"),
	reloads("timeouts.drain_delay"),
	restarts("max_header_bytes", func(t *rules.Table) any { return t.MaxHeaderBytes }),
	restarts("max_connections", func(t *rules.Table) any { return t.MaxConnections }),
	// Read on every request the listener offers.
	reloads("fastpath"),
	reloads("log.level"),
	restarts("log.format", func(t *rules.Table) any { return t.LogFormat }),
	// One Redis client serves the Proxy's lifetime (shared.go).
	restarts("cluster.store", func(t *rules.Table) any { return t.Cluster.Store }),
	restarts("cluster.redis.addresses", func(t *rules.Table) any { return t.Cluster.Addresses }),
	restarts("cluster.redis.cluster", func(t *rules.Table) any { return t.Cluster.RedisCluster }),
	restarts("cluster.redis.username", func(t *rules.Table) any { return t.Cluster.Username }),
	restarts("cluster.redis.password", func(t *rules.Table) any { return t.Cluster.Password }),
	restarts("cluster.redis.pool_size", func(t *rules.Table) any { return t.Cluster.PoolSize }),
	restarts("cluster.redis.dial_timeout", func(t *rules.Table) any { return t.Cluster.DialTimeout }),
	restarts("cluster.sync", func(t *rules.Table) any { return t.Cluster.Sync }),
	restarts("cluster.batch_interval", func(t *rules.Table) any { return t.Cluster.BatchInterval }),
	restarts("cluster.budget", func(t *rules.Table) any { return t.Cluster.Budget }),
	restarts("cluster.on_store_failure", func(t *rules.Table) any { return t.Cluster.OnStoreFailure }),
	restarts("cluster.heartbeat_interval", func(t *rules.Table) any { return t.Cluster.HeartbeatInterval }),
	// A node's share of each limit is computed from the settings edge
	// started with (Proxy.nodeShare), like every cluster setting.
	restarts("cluster.nodes", func(t *rules.Table) any { return t.Cluster.Nodes }),
	restarts("cluster.split", func(t *rules.Table) any { return t.Cluster.Split }),
	restarts("cluster.split_confidence", func(t *rules.Table) any { return t.Cluster.SplitConfidence }),
	// The rate limit service's listener is bound once, at start; its
	// Lyft files and counting are rebuilt by every reload (package rls).
	restarts("rls.listen", func(t *rules.Table) any { return t.RLS.Listen }),
	reloads("rls.config"),
	reloads("rls.merge_domains"),
	reloads("rls.response_headers"),
	reloads("rls.algorithm"),
	reloads("rls.max_descriptors"),
	// The HTTPS listener and its handshake settings are made once, at
	// start; the certificates reload (cmd/edge swaps them).
	restarts("tls.listen", func(t *rules.Table) any { return t.TLS.Listen }),
	reloads("tls.certificates[].cert_file"),
	reloads("tls.certificates[].key_file"),
	restarts("tls.default_certificate", func(t *rules.Table) any { return defaultCertificate(t) }),
	restarts("tls.unknown_sni", func(t *rules.Table) any { return t.TLS.RejectUnknown }),
	restarts("tls.min_version", func(t *rules.Table) any { return t.TLS.MinVersion }),
	restarts("tls.fingerprint_header", func(t *rules.Table) any { return t.TLS.FingerprintHeader }),
	// HTTP/2: what ALPN offers and what Go's HTTP/2 server holds (its
	// settings are fixed for its lifetime) take effect at a restart; what
	// edge enforces on each connection is read when the connection
	// starts (cmd/edge, http2.go), so a reload changes it for new ones.
	restarts("tls.http2", func(t *rules.Table) any { return t.TLS.HTTP2 }),
	restarts("h2c", func(t *rules.Table) any { return t.H2C }),
	// HTTP/3: the QUIC listener and its settings are fixed for its
	// lifetime; retry_above is read as each connection arrives.
	restarts("tls.http3", func(t *rules.Table) any { return t.TLS.HTTP3 }),
	restarts("http3.allow_0rtt", func(t *rules.Table) any { return t.HTTP3.AllowZeroRTT }),
	restarts("http3.max_concurrent_streams", func(t *rules.Table) any { return t.HTTP3.MaxConcurrentStreams }),
	reloads("http3.retry_above"),
	restarts("http2.max_concurrent_streams", func(t *rules.Table) any { return t.HTTP2.MaxConcurrentStreams }),
	reloads("http2.max_requests_per_connection"),
	// Its own value only: one that follows max_header_bytes is listed
	// under that key.
	restarts("http2.max_header_bytes", func(t *rules.Table) any {
		if !t.HTTP2.OwnHeaderBytes {
			return 0
		}
		return t.HTTP2.MaxHeaderBytes
	}),
	reloads("http2.max_resets"),
	reloads("http2.max_control_frames"),
	// The sockets' stages are made at start (cmd/edge): whether each
	// reads a PROXY header, which turning proxy_protocol on or off
	// changes too; the stage asks the running configuration's from.
	restarts("proxy_protocol.listeners", func(t *rules.Table) any {
		return [2]bool{t.ProxyProtocol.Public, t.ProxyProtocol.TLS}
	}),
	reloads("proxy_protocol.from"),
	// Read by each new connection from the running configuration; the
	// open connections are counted across reloads (connections.go).
	reloads("connections.max_per_client"),
	reloads("connections.rate_per_client.limit"),
	reloads("connections.rate_per_client.period"),
	reloads("connections.allow.cidrs"),
	reloads("connections.max_clients"),
	// A changed path, format or buffer opens a new writer, to which the
	// old one hands the lines still coming to it (accesslog.go).
	reloads("access_log.path"),
	reloads("access_log.format"),
	reloads("access_log.keys"),
	reloads("access_log.refused_sample"),
	reloads("access_log.buffer"),
	// The ACME client (its account, CA and storage) is made once, at
	// start; the names it manages follow domains[].acme on reload.
	restarts("tls.acme.email", func(t *rules.Table) any { return acmeSetting(t, func(a *rules.ACME) any { return a.Email }) }),
	restarts("tls.acme.ca", func(t *rules.Table) any { return acmeSetting(t, func(a *rules.ACME) any { return a.CA }) }),
	restarts("tls.acme.ca_root", func(t *rules.Table) any { return acmeSetting(t, func(a *rules.ACME) any { return a.CARoot }) }),
	restarts("tls.acme.storage", func(t *rules.Table) any { return acmeSetting(t, func(a *rules.ACME) any { return a.Storage }) }),
	restarts("tls.acme.challenges", func(t *rules.Table) any {
		return acmeSetting(t, func(a *rules.ACME) any { return [2]bool{a.HTTP01, a.TLSALPN01} })
	}),
	// Domains and rules are rebuilt by every reload (Proxy.build).
	reloads("domains[].acme"),
	reloads("domains[].name"),
	reloads("domains[].hosts"),
	reloads("domains[].serve"),
	reloads("domains[].origin"),
	reloads("domains[].origins[].url"),
	reloads("domains[].origins[].weight"),
	reloads("domains[].origins[].max_in_flight"),
	reloads("domains[].origin_queue.max"),
	reloads("domains[].origin_queue.timeout"),
	reloads("domains[].balance"),
	reloads("domains[].hash_key"),
	reloads("domains[].health.path"),
	reloads("domains[].health.host"),
	reloads("domains[].health.interval"),
	reloads("domains[].health.timeout"),
	reloads("domains[].health.healthy_after"),
	reloads("domains[].health.unhealthy_after"),
	reloads("domains[].health.expect_status"),
	reloads("domains[].passive.enabled"),
	reloads("domains[].passive.max_fails"),
	reloads("domains[].passive.fail_window"),
	reloads("domains[].passive.eject_for"),
	reloads("domains[].passive.on"),
	reloads("domains[].retries.attempts"),
	reloads("domains[].retries.on"),
	reloads("domains[].retries.budget"),
	reloads("domains[].when_down.status"),
	reloads("domains[].when_down.retry_after"),
	reloads("domains[].origin_tls.ca_file"),
	reloads("domains[].origin_tls.server_name"),
	reloads("domains[].origin_tls.client_cert_file"),
	reloads("domains[].origin_tls.client_key_file"),
	reloads("domains[].origin_tls.insecure_skip_verify"),
	reloads("domains[].routes[].name"),
	reloads("domains[].routes[].match.path_prefix"),
	reloads("domains[].routes[].match.methods"),
	reloads("domains[].routes[].origins[].url"),
	reloads("domains[].routes[].origins[].weight"),
	reloads("domains[].routes[].origins[].max_in_flight"),
	reloads("domains[].routes[].balance"),
	reloads("domains[].routes[].hash_key"),
	reloads("domains[].routes[].health.path"),
	reloads("domains[].routes[].health.host"),
	reloads("domains[].routes[].health.interval"),
	reloads("domains[].routes[].health.timeout"),
	reloads("domains[].routes[].health.healthy_after"),
	reloads("domains[].routes[].health.unhealthy_after"),
	reloads("domains[].routes[].health.expect_status"),
	reloads("domains[].routes[].passive.enabled"),
	reloads("domains[].routes[].passive.max_fails"),
	reloads("domains[].routes[].passive.fail_window"),
	reloads("domains[].routes[].passive.eject_for"),
	reloads("domains[].routes[].passive.on"),
	reloads("domains[].routes[].retries.attempts"),
	reloads("domains[].routes[].retries.on"),
	reloads("domains[].routes[].retries.budget"),
	reloads("domains[].routes[].when_down.status"),
	reloads("domains[].routes[].when_down.retry_after"),
	reloads("domains[].routes[].origin_tls.ca_file"),
	reloads("domains[].routes[].origin_tls.server_name"),
	reloads("domains[].routes[].origin_tls.client_cert_file"),
	reloads("domains[].routes[].origin_tls.client_key_file"),
	reloads("domains[].routes[].origin_tls.insecure_skip_verify"),
	reloads("domains[].respond.status"),
	reloads("domains[].respond.body"),
	reloads("domains[].respond.content_type"),
	reloads("domains[].max_keys"),
	reloads("domains[].max_queued"),
	reloads("domains[].request_buffering"),
	reloads("domains[].request_buffer"),
	reloads("domains[].max_request_body"),
	// A reload keeps a domain's count of requests in flight (shed.go).
	reloads("domains[].https_redirect"),
	reloads("domains[].hsts_max_age"),
	reloads("domains[].access_log"),
	reloads("domains[].shed.max_in_flight"),
	reloads("domains[].shed.critical_reserve"),
	reloads("domains[].shed.sheddable_share"),
	reloads("domains[].priorities[].match.host"),
	reloads("domains[].priorities[].match.path_prefix"),
	reloads("domains[].priorities[].match.methods"),
	reloads("domains[].priorities[].match.headers"),
	// A reload reads keys_file and the HMAC secret again; a JWKS URL
	// kept keeps its fetcher and keys (token.go).
	reloads("jwt.from"),
	reloads("jwt.keys_file"),
	reloads("jwt.jwks_url"),
	reloads("jwt.refresh"),
	reloads("jwt.hmac_secret_env"),
	reloads("jwt.issuer"),
	reloads("jwt.audiences"),
	reloads("jwt.algorithms"),
	reloads("jwt.leeway"),
	reloads("jwt.invalid"),
	reloads("domains[].jwt.from"),
	reloads("domains[].jwt.keys_file"),
	reloads("domains[].jwt.jwks_url"),
	reloads("domains[].jwt.refresh"),
	reloads("domains[].jwt.hmac_secret_env"),
	reloads("domains[].jwt.issuer"),
	reloads("domains[].jwt.audiences"),
	reloads("domains[].jwt.algorithms"),
	reloads("domains[].jwt.leeway"),
	reloads("domains[].jwt.invalid"),
	reloads("domains[].rules[].match.headers"),
	reloads("domains[].rules[].when_missing"),
	reloads("domains[].priorities[].class"),
	reloads("domains[].rules[].name"),
	reloads("domains[].rules[].match.path_prefix"),
	reloads("domains[].rules[].match.methods"),
	reloads("domains[].rules[].limit"),
	reloads("domains[].rules[].period"),
	reloads("domains[].rules[].key"),
	reloads("domains[].rules[].action"),
	reloads("domains[].rules[].mitigation_timeout"),
	reloads("domains[].rules[].count_blocked"),
	reloads("domains[].rules[].headers"),
	reloads("domains[].rules[].block_response.status"),
	reloads("domains[].rules[].block_response.body"),
	reloads("domains[].rules[].block_response.content_type"),
	reloads("domains[].rules[].algorithm"),
	reloads("domains[].rules[].mode"), // counters carried: the identity leaves it out
	// Counters carried: a fine key's log becomes two counters of the same
	// count (window.Store.Carry), in the new store as in the old.
	reloads("domains[].rules[].precision"),
	reloads("domains[].rules[].burst"),
	reloads("domains[].rules[].reset"),
	reloads("domains[].rules[].timezone"),
	reloads("domains[].rules[].max_delay"),
	reloads("domains[].rules[].lease"),
	reloads("domains[].rules[].cost"),
	reloads("domains[].rules[].cost_header"),
	reloads("domains[].rules[].max_cost"),
	reloads("domains[].rules[].allow.cidrs"),
	reloads("domains[].rules[].count_status"),
	reloads("domains[].rules[].response_cost_header"),
	reloads("domains[].rules[].cost_from"),
	reloads("domains[].graphql.path"),
	reloads("domains[].graphql.mutation_cost"),
	reloads("domains[].graphql.object_cost"),
	reloads("domains[].graphql.default_page"),
	reloads("domains[].graphql.max_query_cost"),
	reloads("domains[].api_keys.from"),
	reloads("domains[].api_keys.file"), // and when the file changes (cmd/edge)
	reloads("domains[].api_keys.required"),
	reloads("domains[].api_keys.plan_from"),
	reloads("domains[].rules[].plans"),
}

// defaultCertificate is the cert_file of t's default certificate when
// default_certificate names one, else "".
func defaultCertificate(t *rules.Table) string {
	if !t.TLS.DefaultGiven {
		return ""
	}
	return t.TLS.Certificates[t.TLS.Default].CertFile
}

// acmeSetting reads a setting of tls.acme with get; nil without tls.acme.
func acmeSetting(t *rules.Table, get func(*rules.ACME) any) any {
	if t.TLS.ACME == nil {
		return nil
	}
	return get(t.TLS.ACME)
}

// setting is one key of the configuration file and when it takes effect.
type setting struct {
	key     string
	restart bool // takes effect only when edge restarts
	// value reads a restart setting from a compiled configuration.
	value func(*rules.Table) any
}

// reloads classifies a key that takes effect on reload.
func reloads(key string) setting { return setting{key: key} }

// restarts classifies a key that takes effect only at a restart; value
// reads it from a compiled configuration.
func restarts(key string, value func(*rules.Table) any) setting {
	return setting{key: key, restart: true, value: value}
}

// RestartRequiredSettings returns the paths of the settings that take
// effect only when edge restarts, in the order a reload lists them; every
// other setting takes effect on reload.
func RestartRequiredSettings() []string {
	var out []string
	for _, s := range settings {
		if s.restart {
			out = append(out, s.key)
		}
	}
	return out
}

// restartRequired lists the restart settings whose value in cur differs
// from the one in running.
func restartRequired(running, cur *rules.Table) []string {
	var out []string
	for _, s := range settings {
		if s.restart && !reflect.DeepEqual(s.value(running), s.value(cur)) {
			out = append(out, s.key)
		}
	}
	return out
}

// sameRule reports whether two rules are configured identically.
func sameRule(a, b *rules.Rule) bool {
	return a.Name == b.Name && a.PathPrefix == b.PathPrefix && slices.Equal(a.Methods, b.Methods) &&
		a.Limit == b.Limit && a.Period == b.Period && slices.Equal(a.Key, b.Key) &&
		a.Action == b.Action && a.MitigationTimeout == b.MitigationTimeout &&
		a.CountBlocked == b.CountBlocked && a.Headers == b.Headers &&
		equalResponse(a.BlockResponse, b.BlockResponse) &&
		a.Algorithm == b.Algorithm && a.Soft == b.Soft && a.Precision == b.Precision && a.Burst == b.Burst && a.MaxDelay == b.MaxDelay && a.Cost == b.Cost &&
		a.CostHeader == b.CostHeader && a.MaxCost == b.MaxCost &&
		a.Reset == b.Reset && a.Location.String() == b.Location.String() &&
		sameWhatCounts(a, b) && samePlans(a.Plans, b.Plans)
}

// sameWhatCounts reports whether two rules count the same requests at the
// same moments: allow, count_status, response_cost_header and cost_from.
func sameWhatCounts(a, b *rules.Rule) bool {
	return slices.Equal(a.Allow, b.Allow) && slices.Equal(a.CountStatus, b.CountStatus) &&
		a.ResponseCostHeader == b.ResponseCostHeader && a.CostFrom == b.CostFrom
}

// samePlans reports whether two rules have the same plans.
func samePlans(a, b []rules.Plan) bool {
	return slices.EqualFunc(a, b, func(x, y rules.Plan) bool {
		return x.Name == y.Name && x.Rule.Limit == y.Rule.Limit && x.Rule.Burst == y.Rule.Burst &&
			x.Rule.Period == y.Rule.Period && x.Rule.Cost == y.Rule.Cost
	})
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

// ReloadStatus is how configuration reloads stand, as GET /v1/config and
// edge's readiness probe report them.
type ReloadStatus struct {
	// ConfigPath is Options.ConfigPath: where reloads read from.
	ConfigPath string
	// Err is why the last reload failed; nil if it succeeded or none was
	// tried. Problems are the problems it joins, in order (rules.Problems).
	Err      error
	Problems []error
}

// ReloadStatus returns how reloads stand now.
func (p *Proxy) ReloadStatus() ReloadStatus {
	err := p.LastReloadError()
	return ReloadStatus{ConfigPath: p.configPath, Err: err, Problems: rules.Problems(err)}
}

// Result returns what the running configuration's load did.
func (p *Proxy) Result() ReloadResult { return p.state.Load().result }

// Table returns the running configuration.
func (p *Proxy) Table() *rules.Table { return p.state.Load().table }

// fastOrigins are the addresses of the origins the fast forward sends
// st's requests to.
func (st *state) fastOrigins() map[string]bool {
	addrs := make(map[string]bool)
	for _, d := range st.domains {
		for _, g := range d.groups {
			if g.fast != nil {
				for _, pool := range g.fast.pools {
					addrs[pool.Key()] = true
				}
			}
		}
	}
	return addrs
}
