package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
	"github.com/go-chi/chi/v5"
)

// parseKey turns the admin API's text for a key of rule rs, as
// rules.KeyText writes it, back into the bytes the proxy counts it by.
func parseKey(st *state, rs *ruleState, text string) ([]byte, error) {
	b, err := rules.ParseKey(rs.Key, text, st.table.IPv6Prefix)
	if err != nil {
		return nil, fmt.Errorf("rule %q: %w", rs.Name, err)
	}
	return b, nil
}

// AdminHandler serves the admin API under /v1:
//
//	GET    /v1/config                        the running configuration and its last load
//	GET    /v1/keys/{domain}/{rule}/{key}    one key's counters
//	DELETE /v1/keys/{domain}/{rule}/{key}    forget one key's counters (unblock it)
//
// {key} is the rest of the path, percent-decoded once, so it may hold
// slashes (a path key, an IPv6 prefix): the key as rules.KeyText writes
// it, percent-encoded once more.
//
//	GET    /v1/top/{domain}/{rule}?n=20      the heaviest keys right now
//	GET    /v1/top/connections?n=20          the clients whose connections were refused most (connections.go)
//	GET    /v1/status?seconds=300            build, uptime and per-second figures (recent.go)
//	GET    /v1/certificates                  the certificates served: the files', and each ACME name's state
//	GET    /v1/origins                       every domain's origin servers (upstream.go)
//	POST   /v1/origins/{domain}/drain?server=URL    take a server out of rotation on this node (drain.go)
//	POST   /v1/origins/{domain}/undrain?server=URL  put it back
//
// Responses are JSON; unknown domains, rules and untracked keys are 404,
// malformed input 400.
func (p *Proxy) AdminHandler() http.Handler {
	r := chi.NewRouter()
	r.Get("/v1/config", p.getConfig)
	// The key is the rest of the path: path keys and IPv6 prefixes hold
	// slashes.
	r.Get("/v1/keys/{domain}/{rule}/*", p.getKey)
	r.Delete("/v1/keys/{domain}/{rule}/*", p.deleteKey)
	r.Get("/v1/top/{domain}/{rule}", p.getTop)
	r.Get("/v1/top/connections", p.getTopConnections)
	r.Get("/v1/status", p.getStatus)
	r.Get("/v1/certificates", p.getCertificates)
	r.Get("/v1/origins", p.getOrigins) // upstream.go
	// Every method, so that another is answered 405 with Allow: POST.
	r.HandleFunc("/v1/origins/{domain}/drain", p.serveDrain(true)) // drain.go
	r.HandleFunc("/v1/origins/{domain}/undrain", p.serveDrain(false))
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, apiError{"not found"})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusMethodNotAllowed, apiError{"method not allowed"})
	})
	return r
}

type apiError struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// lookupRule resolves the {domain} and {rule} of an admin request, writing
// a 404 if either is unknown.
func (p *Proxy) lookupRule(w http.ResponseWriter, r *http.Request) (*state, *domain, *ruleState, bool) {
	st := p.state.Load()
	d := st.domain(chi.URLParam(r, "domain"))
	if d == nil {
		writeJSON(w, http.StatusNotFound, apiError{fmt.Sprintf("no domain %q", chi.URLParam(r, "domain"))})
		return nil, nil, nil, false
	}
	rd, ok := d.Rule(chi.URLParam(r, "rule"))
	if !ok {
		writeJSON(w, http.StatusNotFound, apiError{fmt.Sprintf("domain %q has no rule %q", d.Name, chi.URLParam(r, "rule"))})
		return nil, nil, nil, false
	}
	return st, d, &d.rules[rd.Index], true
}

// keyState is a key's counters as the admin API reports them.
type keyState struct {
	Domain         string     `json:"domain"`
	Rule           string     `json:"rule"`
	Key            string     `json:"key"`
	Limit          int64      `json:"limit"`
	PeriodSeconds  float64    `json:"period_seconds"`
	Previous       int64      `json:"previous"`
	Current        int64      `json:"current"`
	Estimate       float64    `json:"estimate"`
	Remaining      int64      `json:"remaining"`
	RetryAfter     float64    `json:"retry_after_seconds"`
	MitigatedUntil *time.Time `json:"mitigated_until,omitempty"`
	Source         string     `json:"source"`            // "node": this node's store; "redis": the PoP's counters (exact mode)
	Count          uint64     `json:"count,omitempty"`   // top talkers: observed requests (upper bound)
	Blocked        uint64     `json:"blocked,omitempty"` // top talkers: observed blocked requests
	CountError     uint64     `json:"count_error,omitempty"`
}

// keyState reads a key's counters from the domain's counter: in exact
// mode the PoP's, from Redis (an error if Redis does not answer before ctx
// ends), else this node's.
func (p *Proxy) keyState(ctx context.Context, d *domain, rs *ruleState, text string, key []byte, now time.Time) (keyState, bool, error) {
	s, err := d.counter.Peek(ctx, window.ID{Key: d.store.Key(rs.Index, key), Name: key}, now)
	if err != nil {
		return keyState{}, false, fmt.Errorf("reading the key in redis: %w", err)
	}
	source := "node"
	if s.Shared {
		source = "redis"
	}
	ks := keyState{
		Domain: d.Name, Rule: rs.Name, Key: text,
		Limit: rs.Limit, PeriodSeconds: rs.Period.Seconds(),
		Previous: s.Previous, Current: s.Current, Estimate: s.Estimate,
		Remaining: s.Remaining, RetryAfter: s.RetryAfter.Seconds(),
		Source: source,
	}
	if !s.MitigatedUntil.IsZero() {
		t := s.MitigatedUntil.UTC()
		ks.MitigatedUntil = &t
	}
	return ks, s.Tracked, nil
}

// lookupKey resolves the domain, rule and key (percent-decoded) an admin
// key path names, writing a 404 or 400 if it names none.
func (p *Proxy) lookupKey(w http.ResponseWriter, r *http.Request) (d *domain, rs *ruleState, text string, key []byte, ok bool) {
	st, d, rs, ok := p.lookupRule(w, r)
	if !ok {
		return nil, nil, "", nil, false
	}
	text, err := keyParam(r)
	if err == nil {
		if key, err = parseKey(st, rs, text); err == nil {
			return d, rs, text, key, true
		}
	}
	writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
	return nil, nil, "", nil, false
}

// keyParam returns the key text an admin key path names, decoded once.
// chi matches the escaped path when the URL has one of its own
// (r.URL.RawPath, set when its escaping is not Go's default, as for
// %2F), else the decoded path, whose key is decoded already: decoding
// it again would turn a key text's own %7C, from "%257C" in the URL,
// into a "|".
func keyParam(r *http.Request) (string, error) {
	k := chi.URLParam(r, "*")
	if r.URL.RawPath == "" {
		return k, nil
	}
	return url.PathUnescape(k)
}

func (p *Proxy) getKey(w http.ResponseWriter, r *http.Request) {
	d, rs, text, key, ok := p.lookupKey(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	ks, tracked, err := p.keyState(ctx, d, rs, text, key, p.now())
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, apiError{err.Error()})
		return
	}
	if !tracked {
		writeJSON(w, http.StatusNotFound, apiError{fmt.Sprintf("key %q is not tracked by %s/%s", text, d.Name, rs.Name)})
		return
	}
	writeJSON(w, http.StatusOK, ks)
}

func (p *Proxy) deleteKey(w http.ResponseWriter, r *http.Request) {
	d, rs, text, key, ok := p.lookupKey(w, r)
	if !ok {
		return
	}
	// In cluster mode the PoP's counters are in Redis: the counter deletes
	// them there, whatever this node tracks.
	k := d.store.Key(rs.Index, key)
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	tracked, err := d.counter.Reset(ctx, window.ID{Key: k, Name: key}, p.now())
	cancel()
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, apiError{fmt.Sprintf("deleting the key in redis: %v", err)})
		return
	}
	if !tracked {
		writeJSON(w, http.StatusNotFound, apiError{fmt.Sprintf("key %q is not tracked by %s/%s", text, d.Name, rs.Name)})
		return
	}
	rs.top.forget(k)
	p.log.Info("key reset through the admin API", "domain", d.Name, "rule", rs.Name, "key", text)
	w.WriteHeader(http.StatusNoContent)
}

// queryInt reads the query parameter name, an integer from 1 to most (def
// when left out), or answers 400 and reports false.
func queryInt(w http.ResponseWriter, r *http.Request, name string, def, most int) (int, bool) {
	q := r.URL.Query().Get(name)
	if q == "" {
		return def, true
	}
	v, err := strconv.Atoi(q)
	if err != nil || v < 1 || v > most {
		writeJSON(w, http.StatusBadRequest, apiError{fmt.Sprintf("%s must be an integer from 1 to %d, got %q", name, most, q)})
		return 0, false
	}
	return v, true
}

func (p *Proxy) getTop(w http.ResponseWriter, r *http.Request) {
	st, d, rs, ok := p.lookupRule(w, r)
	if !ok {
		return
	}
	n, ok := queryInt(w, r, "n", 20, topSize)
	if !ok {
		return
	}
	now := p.now()
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	out := []keyState{}
	for _, t := range rs.top.top(n) {
		key, err := parseKey(st, rs, t.text)
		if err != nil {
			continue // cannot happen for text rules.KeyText wrote (rules.FuzzKeyText)
		}
		ks, _, err := p.keyState(ctx, d, rs, t.text, key, now)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, apiError{err.Error()})
			return
		}
		ks.Count, ks.Blocked, ks.CountError = t.count, t.blocked, t.err
		out = append(out, ks)
	}
	writeJSON(w, http.StatusOK, out)
}

// configView is the running configuration as GET /v1/config shows it.
type configView struct {
	Hash       string       `json:"hash"`
	LoadedAt   time.Time    `json:"loaded_at"`
	Result     ReloadResult `json:"last_load"`
	Pop        string       `json:"pop"`
	Listen     string       `json:"listen"`
	Admin      string       `json:"admin_listen"`
	AdminHosts []string     `json:"admin_hosts"`
	MaxKeys    int          `json:"max_keys"`
	ClientIP   struct {
		TrustedProxies []string `json:"trusted_proxies"`
		IPv6Prefix     int      `json:"ipv6_prefix"`
	} `json:"client_ip"`
	Timeouts map[string]string `json:"timeouts"`
	// MaxBufferedBytes is a size such as "256MiB".
	MaxBufferedBytes string      `json:"max_buffered_bytes"`
	Cluster          clusterView `json:"cluster"`
	// Check is the check section; its listen is the running one. The
	// token is never shown, only whether one is set.
	Check *checkView `json:"check,omitempty"`
	// RLS is the rate limit service's section, absent when it is off.
	RLS *rlsView `json:"rls,omitempty"`
	// ProxyProtocol and Connections are those sections, absent when off
	// (connections.go).
	ProxyProtocol *proxyProtocolView `json:"proxy_protocol,omitempty"`
	Connections   *connectionsView   `json:"connections,omitempty"`
	Domains       []domainView       `json:"domains"`
	// Sources says where each setting not from the file comes from, by
	// path: "listen" → "env EDGE_LISTEN" (rules.Table.Sources); {} when
	// every setting is the file's or the default.
	Sources map[string]string `json:"sources"`

	// How reloads stand (ReloadStatus), beside the configuration they say
	// whether it is the file's: the error is every problem on its own
	// line, "" and 0 problems when the last reload succeeded or none was
	// tried.
	ConfigPath     string `json:"config_path"`
	ReloadOK       bool   `json:"last_reload_ok"`
	ReloadError    string `json:"last_reload_error"`
	ReloadProblems int    `json:"last_reload_problems"`
}

type checkView struct {
	Listen     string `json:"listen"`
	DenyStatus int    `json:"deny_status"`
	Token      bool   `json:"token_set"`
}

// rlsView is the rls section: listen as it runs (it takes effect at a
// restart), the rest as the last reload applied it.
type rlsView struct {
	Listen          string   `json:"listen"`
	Config          []string `json:"config"`
	MergeDomains    bool     `json:"merge_domains"`
	ResponseHeaders bool     `json:"response_headers"`
	Algorithm       string   `json:"algorithm"`
	MaxDescriptors  int      `json:"max_descriptors"`
}

// clusterView is the cluster section as it runs (its changes take effect
// at a restart), with the node's view of its PoP. The password is never
// shown.
type clusterView struct {
	Store             string   `json:"store"`
	Addresses         []string `json:"addresses,omitempty"`
	RedisCluster      bool     `json:"redis_cluster,omitempty"`
	Username          string   `json:"username,omitempty"`
	PoolSize          int      `json:"pool_size,omitempty"`
	DialTimeout       string   `json:"dial_timeout,omitempty"`
	Sync              string   `json:"sync,omitempty"`
	BatchInterval     string   `json:"batch_interval,omitempty"`
	Budget            string   `json:"budget,omitempty"`
	OnStoreFailure    string   `json:"on_store_failure,omitempty"`
	HeartbeatInterval string   `json:"heartbeat_interval,omitempty"`
	Node              string   `json:"node,omitempty"`
	Nodes             int      `json:"nodes,omitempty"`
	Circuit           string   `json:"circuit,omitempty"`
}

func (p *Proxy) clusterView() clusterView {
	if p.cluster == nil {
		return clusterView{Store: rules.StoreLocal.String()}
	}
	c := p.cluster.Config()
	return clusterView{
		Store: c.Store.String(), Addresses: c.Addresses, RedisCluster: c.RedisCluster, Username: c.Username,
		PoolSize: c.PoolSize, DialTimeout: c.DialTimeout.String(), Sync: c.Sync.String(),
		BatchInterval: c.BatchInterval.String(), Budget: c.Budget.String(),
		OnStoreFailure: c.OnStoreFailure.String(), HeartbeatInterval: c.HeartbeatInterval.String(),
		Node: p.cluster.Node(), Nodes: p.cluster.Nodes(), Circuit: p.cluster.State().String(),
	}
}

type domainView struct {
	Name   string   `json:"name"`
	Hosts  []string `json:"hosts"`
	Origin string   `json:"origin,omitempty"`
	// Routes are the names of the domain's routes, in order
	// (GET /v1/origins has their groups).
	Routes  []string `json:"routes,omitempty"`
	Respond bool     `json:"respond,omitempty"`
	// Serve is the domain's serve: "proxy", "check" or "both".
	Serve       string `json:"serve"`
	MaxKeys     int    `json:"max_keys"`
	TrackedKeys int    `json:"tracked_keys"`
	// A domain with a leaky bucket queue: its max_queued, and how many
	// requests wait now.
	MaxQueued int        `json:"max_queued,omitempty"`
	Queued    *int64     `json:"queued,omitempty"`
	Rules     []ruleView `json:"rules"`
	// Request bodies; sizes such as "1MiB", max_request_body omitted
	// when there is no limit.
	RequestBuffering bool   `json:"request_buffering"`
	RequestBuffer    string `json:"request_buffer"`
	MaxRequestBody   string `json:"max_request_body,omitempty"`
}

type ruleView struct {
	Name              string   `json:"name"`
	PathPrefix        string   `json:"path_prefix,omitempty"`
	Methods           []string `json:"methods,omitempty"`
	Limit             int64    `json:"limit"`
	Period            string   `json:"period,omitempty"` // none for a quota or a concurrency rule
	Reset             string   `json:"reset,omitempty"`
	Timezone          string   `json:"timezone,omitempty"`
	Key               []string `json:"key"`
	Action            string   `json:"action"`
	MitigationTimeout string   `json:"mitigation_timeout,omitempty"`
	CountBlocked      bool     `json:"count_blocked"`
	Headers           string   `json:"headers"`
	BlockStatus       int      `json:"block_status,omitempty"`
	Algorithm         string   `json:"algorithm"`
	Mode              string   `json:"mode,omitempty"`      // "soft"; none for hard
	Precision         string   `json:"precision,omitempty"` // "fine"; none for standard
	Burst             int64    `json:"burst,omitempty"`     // a bucket's capacity, its limit when burst is left out
	MaxDelay          string   `json:"max_delay,omitempty"` // a leaky bucket queue's
	Lease             string   `json:"lease,omitempty"`     // a concurrency rule's
	Cost              int64    `json:"cost"`
	CostHeader        string   `json:"cost_header,omitempty"`
	MaxCost           int64    `json:"max_cost,omitempty"`
	// ResponseCostHeader is the response field the origin reports a
	// request's cost in; CountStatus the origin statuses that count (none:
	// every request counts as it is decided); Allow the clients the rule
	// neither counts nor refuses, as CIDR prefixes.
	ResponseCostHeader string   `json:"response_cost_header,omitempty"`
	CountStatus        []int    `json:"count_status,omitempty"`
	Allow              []string `json:"allow,omitempty"`
}

func (p *Proxy) getConfig(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, p.configView())
}

// configView is the running configuration as GET /v1/config shows it, and
// as the status page renders it (status.go).
func (p *Proxy) configView() configView {
	st := p.state.Load()
	// Settings that take effect only at a restart are shown as they run,
	// from the configuration edge started with; last_load lists those the
	// file has changed since.
	t, run := st.table, p.started
	v := configView{
		Hash: st.result.Hash, LoadedAt: st.result.Time.UTC(), Result: st.result,
		Pop: run.Pop, Listen: run.Listen, Admin: run.AdminListen, AdminHosts: t.AdminHosts, MaxKeys: t.MaxKeys,
		Timeouts: map[string]string{
			"read_header": run.Timeouts.ReadHeader.String(), "read": run.Timeouts.Read.String(),
			"write": run.Timeouts.Write.String(), "idle": run.Timeouts.Idle.String(),
			"upstream": t.Timeouts.Upstream.String(), "shutdown": t.Timeouts.Shutdown.String(),
			"drain_delay": t.Timeouts.DrainDelay.String(),
		},
	}
	if v.AdminHosts == nil {
		v.AdminHosts = []string{}
	}
	v.Sources = maps.Clone(t.Sources)
	if v.Sources == nil {
		v.Sources = map[string]string{}
	}
	v.MaxBufferedBytes = t.MaxBufferedBytes.String()
	v.ClientIP.IPv6Prefix = t.IPv6Prefix
	v.ClientIP.TrustedProxies = []string{}
	for _, pfx := range t.TrustedProxies {
		v.ClientIP.TrustedProxies = append(v.ClientIP.TrustedProxies, pfx.String())
	}
	if t.Check != nil {
		v.Check = &checkView{DenyStatus: t.Check.DenyStatus, Token: t.Check.Token != ""}
		if run.Check != nil {
			v.Check.Listen = run.Check.Listen
		}
	}
	for _, d := range st.domains {
		dv := domainView{Name: d.Name, Hosts: d.Hosts, Respond: d.Respond != nil, MaxKeys: d.MaxKeys, Rules: []ruleView{},
			RequestBuffering: d.Body.Buffer, RequestBuffer: d.Body.BufferSize.String(), Serve: serveName(d.Domain)}
		if d.Body.MaxSize > 0 {
			dv.MaxRequestBody = d.Body.MaxSize.String()
		}
		if d.Respond == nil && d.Proxied {
			o := d.Origin
			if o == nil && d.Routes == nil {
				o = t.Origin
			}
			for _, r := range d.Routes {
				dv.Routes = append(dv.Routes, r.Name)
			}
			if o != nil {
				dv.Origin = o.Redacted()
			}
		}
		if d.store != nil {
			dv.TrackedKeys = d.store.Len()
		}
		if d.queue != nil {
			n := d.queue.waiting.Load()
			dv.MaxQueued, dv.Queued = d.MaxQueued, &n
		}
		for _, rs := range d.rules {
			rv := ruleView{
				Name: rs.Name, PathPrefix: rs.PathPrefix, Methods: rs.Methods, Limit: rs.Limit,
				Action: rs.Action.String(), CountBlocked: rs.CountBlocked,
				Headers: rs.Headers.String(), Algorithm: rs.Algorithm.String(),
				Cost: rs.Cost, CostHeader: rs.CostHeader, MaxCost: rs.MaxCost,
				ResponseCostHeader: rs.ResponseCostHeader, CountStatus: rs.CountStatus,
			}
			if rs.Period > 0 {
				rv.Period = rs.Period.String()
			}
			for _, pfx := range rs.Allow {
				rv.Allow = append(rv.Allow, pfx.String())
			}
			if rs.Algorithm.Bucket() {
				rv.Burst = rs.Capacity()
			}
			if rs.Soft {
				rv.Mode = "soft"
			}
			if rs.Precision == algorithm.Fine {
				rv.Precision = rs.Precision.String()
			}
			if rs.MaxDelay > 0 {
				rv.MaxDelay = rs.MaxDelay.String()
			}
			if rs.Lease > 0 {
				rv.Lease = rs.Lease.String()
			}
			if rs.Algorithm == algorithm.Quota {
				rv.Reset, rv.Timezone = rs.Reset.String(), rs.Location.String()
			}
			for _, k := range rs.Key {
				rv.Key = append(rv.Key, k.String())
			}
			if rs.MitigationTimeout > 0 {
				rv.MitigationTimeout = rs.MitigationTimeout.String()
			}
			if rs.BlockResponse != nil {
				rv.BlockStatus = rs.BlockResponse.Status
			}
			dv.Rules = append(dv.Rules, rv)
		}
		v.Domains = append(v.Domains, dv)
	}
	v.Cluster = p.clusterView()
	if run.RLS.Listen != "" {
		v.RLS = &rlsView{Listen: run.RLS.Listen, Config: t.RLS.Config, MergeDomains: t.RLS.MergeDomains,
			ResponseHeaders: t.RLS.ResponseHeaders, Algorithm: t.RLS.Algorithm.String(), MaxDescriptors: t.RLS.MaxDescriptors}
	}
	v.ProxyProtocol, v.Connections = connectionViews(t, run)
	rs := p.ReloadStatus()
	v.ConfigPath, v.ReloadOK, v.ReloadProblems = rs.ConfigPath, rs.Err == nil, len(rs.Problems)
	if rs.Err != nil {
		v.ReloadError = rules.ProblemText(rs.Err)
	}
	// A setting may hold a copy of a secret (a YAML alias), and a reload's
	// problems may quote one of a file since replaced: no string of the
	// view shows a secret of the running file or of the one edge started
	// with.
	redactStrings(reflect.ValueOf(&v).Elem(), func(s string) string { return run.Secrets.Redact(t.Secrets.Redact(s)) })
	return v
}

// redactStrings applies redact to every string v holds, in its fields,
// elements and map values. It copies the slices and maps it changes, so
// that a view sharing them with the running table leaves the table as it
// was; the pointers v holds must be its own.
func redactStrings(v reflect.Value, redact func(string) string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(redact(v.String()))
	case reflect.Pointer:
		if !v.IsNil() {
			redactStrings(v.Elem(), redact)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				redactStrings(v.Field(i), redact)
			}
		}
	case reflect.Slice:
		if v.IsNil() {
			return
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		for i := range c.Len() {
			redactStrings(c.Index(i), redact)
		}
		v.Set(c)
	case reflect.Map:
		if v.IsNil() {
			return
		}
		c := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(it.Value())
			redactStrings(e, redact)
			c.SetMapIndex(it.Key(), e)
		}
		v.Set(c)
	}
}

// serveName is a domain's serve as the configuration spells it.
func serveName(d *rules.Domain) string {
	switch {
	case d.Proxied && d.Checked:
		return "both"
	case d.Checked:
		return "check"
	}
	return "proxy"
}
