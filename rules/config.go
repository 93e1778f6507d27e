// Package rules owns edge's configuration: the schema that cmd/edge decodes a
// config file into, its defaults and validation, and its compilation into an
// immutable [Table] that the proxy consults on every request.
//
// The package never logs and never touches metrics: [Compile] returns either
// a [Table] or an error that lists every problem in the config at once.
package rules

import "time"

// Defaults applied by [Compile] to zero-valued fields of [Config].
const (
	DefaultListen = ":8080"
	// DefaultAdminListen's port is one no common server takes by default,
	// so that edge starts where its metrics are scraped: not 9090,
	// Prometheus's own, nor 9100–9999, its exporters' range, nor Envoy's
	// admin 9901, Caddy's 2019, or 8081 and 8082, which the manual's rls and
	// check listeners use.
	DefaultAdminListen = "127.0.0.1:8077"
	DefaultPop         = "local"
	DefaultMaxKeys     = 1_000_000
	// DefaultAccuracySample is accuracy_sample when the file leaves it out:
	// one client key in 1000.
	DefaultAccuracySample = 1000
	DefaultMaxQueued      = 1000
	DefaultIPv6Prefix     = 64
	DefaultMaxHeaderBytes = 64 << 10
	DefaultContentType    = "text/plain; charset=utf-8"
	DefaultRequestBuffer  = 1 * MiB
	DefaultMaxBuffered    = 256 * MiB
	DefaultBlockStatus    = 429
	DefaultRespondStatus  = 200

	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 60 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultUpstreamTimeout   = 30 * time.Second
	DefaultShutdownTimeout   = 15 * time.Second
)

// DefaultMaxConnections is the connection cap when max_connections is not
// set: the smaller of 10,000 and 90% of openFileLimit, the process's
// open-file limit (RLIMIT_NOFILE, soft), leaving a tenth of the
// descriptors for origin connections, the admin listener and files.
// A limit of 0 means unknown, and gives 10,000.
func DefaultMaxConnections(openFileLimit uint64) int {
	const most = 10_000
	if openFileLimit == 0 || openFileLimit/10*9 >= most {
		return most
	}
	return max(int(openFileLimit/10*9+openFileLimit%10*9/10), 1)
}

// Config is the configuration file as decoded by cmd/edge. It is plain data:
// the mapstructure tags are the public YAML keys, and a zero field means
// "use the default" (see [Compile] for each default). A Config is never used
// on the request path; [Compile] turns it into a [Table].
type Config struct {
	// JWT verifies bearer tokens for every domain without a jwt section
	// of its own; nil verifies none.
	JWT *JWTConfig `mapstructure:"jwt"`
	// Listen is the proxy's listen address, host:port. Default ":8080".
	Listen string `mapstructure:"listen"`
	// AdminListen is the admin (metrics, health) listen address, host:port.
	// Default "127.0.0.1:8077". It must differ from Listen.
	AdminListen string `mapstructure:"admin_listen"`
	// AdminToken, when set, is the bearer token the admin API and /metrics
	// require (/healthz and /readyz stay open for probes). The environment
	// variable EDGE_ADMIN_TOKEN overrides it, so the secret need not be in
	// the file.
	AdminToken string `mapstructure:"admin_token"`
	// AdminHosts are the host names, besides localhost and IP addresses,
	// that an admin listener on a loopback address answers to: a request
	// whose Host names anything else gets 421, because it may come from a
	// web page in a browser on the same machine by DNS rebinding. Names
	// are exact (no wildcards, no port) and matched ignoring case and the
	// request's port.
	AdminHosts []string `mapstructure:"admin_hosts"`
	// Pop names this point of presence in metrics. Default "local";
	// at most 64 bytes of [A-Za-z0-9_.-].
	Pop string `mapstructure:"pop"`
	// Origin is the default upstream, an absolute http or https URL. It is
	// optional when every domain sets its own origin or respond.
	Origin string `mapstructure:"origin"`
	// Origins, Balance, HashKey, Health, Passive, Retries and WhenDown
	// are the default upstream group of the domains that set none of
	// their own (UpstreamConfig; docs/origins.md).
	UpstreamConfig `mapstructure:",squash"`
	// OriginQueue is the default origin_queue of the domains that set
	// none of their own (OriginQueueConfig).
	OriginQueue *OriginQueueConfig `mapstructure:"origin_queue"`
	// MaxKeys bounds the number of rate-limit keys tracked across all
	// domains. Default 1_000_000; valid 1..2147483647.
	MaxKeys int `mapstructure:"max_keys"`
	// AccuracySample samples one client key in AccuracySample for the live
	// accuracy metric: the sampled keys of sliding-window rules also keep
	// an exact log of their recent requests, against which every decision
	// on them is judged. Default 1000 when left out; 0 turns it off; valid
	// 0..1_000_000_000.
	AccuracySample int `mapstructure:"accuracy_sample"`
	// ClientIP says how the client address is derived.
	ClientIP ClientIPConfig `mapstructure:"client_ip"`
	// Timeouts bound the phases of a request.
	Timeouts TimeoutsConfig `mapstructure:"timeouts"`
	// MaxHeaderBytes bounds the request header size in bytes.
	// Default 64 KiB; valid 1024..1 MiB.
	MaxHeaderBytes int `mapstructure:"max_header_bytes"`
	// RequestBuffer is how much of a request body edge holds in memory
	// before it contacts the origin, for domains that do not set their
	// own. Default 1 MiB; valid 1 KiB..1 GiB.
	RequestBuffer Size `mapstructure:"request_buffer"`
	// MaxRequestBody is the largest request body accepted, for domains
	// that do not set their own; larger ones get 413. Zero means no limit.
	MaxRequestBody Size `mapstructure:"max_request_body"`
	// MaxBufferedBytes bounds the request body bytes held in memory by all
	// requests together; past it, new requests stream their bodies instead.
	// Default 256 MiB; at least every domain's RequestBuffer.
	MaxBufferedBytes Size `mapstructure:"max_buffered_bytes"`
	// MaxConnections bounds the connections open at once on the public
	// listener; valid 1..1048576. Zero means the default, which depends on
	// the process's open-file limit (see [DefaultMaxConnections]).
	MaxConnections int `mapstructure:"max_connections"`
	// FastPath lets the public listener answer a request that a rule
	// refuses before net/http parses it, when the request is simple and
	// alone on its connection, and forward a simple GET or HEAD that the
	// rules allow without net/http; the answers are the same byte for
	// byte. Default true; false sends every request through net/http.
	FastPath *bool `mapstructure:"fastpath"`
	// Log configures the process logger.
	Log LogConfig `mapstructure:"log"`
	// Cluster says whether the nodes of a PoP share their counters, and
	// how. The default, store local, shares nothing.
	Cluster ClusterConfig `mapstructure:"cluster"`
	// Check, when set, opens a third listener that answers other proxies'
	// questions (nginx auth_request, Traefik ForwardAuth, Caddy
	// forward_auth) with edge's decision instead of proxying (see
	// [CheckConfig]).
	Check *CheckConfig `mapstructure:"check"`
	// RLS runs edge as Envoy's rate limit service (gRPC), counting the
	// descriptors of Lyft's ratelimit configuration files. Off by default.
	RLS RLSConfig `mapstructure:"rls"`
	// TLS is edge's HTTPS listener and its certificates (see [TLSConfig]).
	TLS TLSConfig `mapstructure:"tls"`
	// H2C lets the public (plain) listener serve HTTP/2 to a client that
	// opens its connection with the HTTP/2 preface (prior knowledge, as
	// curl --http2-prior-knowledge does). Default false: the preface is
	// refused as a malformed request.
	H2C bool `mapstructure:"h2c"`
	// HTTP2 holds the limits of the HTTP/2 edge serves (see [HTTP2Config]).
	HTTP2 HTTP2Config `mapstructure:"http2"`
	// HTTP3 holds the limits of the HTTP/3 edge serves with tls.http3
	// (see [HTTP3Config]).
	HTTP3 HTTP3Config `mapstructure:"http3"`
	// ProxyProtocol names the load balancers whose connections begin with
	// a PROXY protocol header (see [ProxyProtocolConfig]).
	ProxyProtocol ProxyProtocolConfig `mapstructure:"proxy_protocol"`
	// Connections limits each client's connections (see
	// [ConnectionsConfig]).
	Connections ConnectionsConfig `mapstructure:"connections"`
	// AccessLog writes one line per request (see [AccessLogConfig]); nil,
	// or a section without a path, writes none.
	AccessLog *AccessLogConfig `mapstructure:"access_log"`
	// Domains are the sites served; at least one is required.
	Domains []DomainConfig `mapstructure:"domains"`

	// Given, when not nil, holds the path of every key the file (or a
	// variable of the environment) gives a value, spelled as in errors
	// ("domains[0].rules[0].limit"); cmd/edge fills it in as it decodes.
	// It only words errors: a required key left out is "required", one
	// written with a zero value is out of range. Nil means every zero
	// field was left out.
	Given map[string]bool `mapstructure:"-"`
	// Secrets, when not nil, are the secret values the file and the
	// environment give; cmd/edge fills it in as it decodes, and Compile
	// hands it to the Table, so that what shows the running configuration
	// can clean its text of them.
	Secrets *Secrets `mapstructure:"-"`
	// Sources, when not nil, says where each setting that the file did
	// not give came from, by path: "listen" → "env EDGE_LISTEN" for one
	// the environment gave; cmd/edge fills it in as it decodes, and
	// Compile hands a copy to the Table. A setting it does not name is
	// the file's, or the default.
	Sources map[string]string `mapstructure:"-"`
	// ReadFile, when not nil, reads the files the configuration names
	// that Compile reads (origin_tls's), by name as written; cmd/edge's
	// reads them relative to the configuration file's directory. Nil is
	// os.ReadFile.
	ReadFile func(name string) ([]byte, error) `mapstructure:"-"`
}

// ClientIPConfig says which peers may report the client address in
// X-Forwarded-For and how IPv6 clients are grouped.
type ClientIPConfig struct {
	// TrustedProxies are CIDR prefixes or bare IPs (a bare IP is a /32 or
	// /128). Empty means trust no one: the client is always the TCP peer.
	TrustedProxies []string `mapstructure:"trusted_proxies"`
	// IPv6Prefix is the prefix length an IPv6 client is keyed by, because
	// one subscriber usually holds a whole /64. Default 64; valid 32..128.
	IPv6Prefix int `mapstructure:"ipv6_prefix"`
}

// TimeoutsConfig bounds the phases of a request. Zero means the default
// (for Write and DrainDelay, off); a non-zero value is at least 1ms and at
// most the maximum given.
type TimeoutsConfig struct {
	// ReadHeader bounds reading the request headers. Default 10s; at most
	// 1h.
	ReadHeader time.Duration `mapstructure:"read_header"`
	// Read bounds reading the whole request, body included. Default 60s;
	// at most 24h.
	Read time.Duration `mapstructure:"read"`
	// Write bounds writing the response. Default 0, meaning no bound, so
	// that streaming responses are not cut off; at most 24h.
	Write time.Duration `mapstructure:"write"`
	// Idle bounds how long a keep-alive connection waits for the next
	// request. Default 120s; at most 24h.
	Idle time.Duration `mapstructure:"idle"`
	// Upstream bounds the wait for the origin's response headers; when it
	// is exceeded the client gets 504. Default 30s; at most 24h.
	Upstream time.Duration `mapstructure:"upstream"`
	// Shutdown bounds draining in-flight requests on SIGTERM. Default 15s;
	// at most 1h.
	Shutdown time.Duration `mapstructure:"shutdown"`
	// DrainDelay is how long, on SIGTERM, /readyz answers 503 while edge
	// still serves, so that a load balancer stops sending new requests
	// before the listener closes. Default 0 (off); at most 1h.
	DrainDelay time.Duration `mapstructure:"drain_delay"`
}

// LogConfig configures the process logger.
type LogConfig struct {
	// Level is one of debug, info, warn, error. Default info.
	Level string `mapstructure:"level"`
	// Format is text or json. Default text.
	Format string `mapstructure:"format"`
}

// ClusterConfig is the cluster section: counters shared by the nodes of a
// PoP through Redis. Zero fields take the defaults given.
type ClusterConfig struct {
	// Store is "local" (default: every node counts on its own) or "redis".
	Store string `mapstructure:"store"`
	// Redis says how to reach Redis; required with store redis.
	Redis RedisConfig `mapstructure:"redis"`
	// Sync is "exact" (default: every decision is one atomic round trip to
	// Redis), "batched" (nodes decide locally and share their counts
	// every BatchInterval) or "share" (each node decides alone with its
	// share of each limit; store local only in this build).
	Sync string `mapstructure:"sync"`
	// BatchInterval is how often batched nodes share their counts.
	// Default 100ms; valid 10ms..10s.
	BatchInterval time.Duration `mapstructure:"batch_interval"`
	// Budget is the longest a request waits for Redis, all of its rules
	// together. Default 20ms; valid 1ms..1s.
	Budget time.Duration `mapstructure:"budget"`
	// OnStoreFailure says how requests are decided while Redis cannot
	// answer within the budget: "local" (default: node-local counters with
	// each limit divided by the live nodes), "open" (allow) or "closed"
	// (answer 503).
	OnStoreFailure string `mapstructure:"on_store_failure"`
	// HeartbeatInterval is how often a node registers itself in Redis, so
	// that every node knows how many its PoP has. Default 1s; valid
	// 100ms..1m.
	HeartbeatInterval time.Duration `mapstructure:"heartbeat_interval"`
	// Nodes is, with sync share and store local, how many nodes share each
	// limit. Required with sync share; valid 1..10000.
	Nodes int `mapstructure:"nodes"`
	// Split is, with sync share, how a limit is split: "even" (default:
	// limit ÷ nodes, rounded up) or "poisson" (the SplitConfidence quantile
	// of Poisson(limit ÷ nodes)).
	Split string `mapstructure:"split"`
	// SplitConfidence is, with split poisson (and only then), the share of
	// windows in which a node lets a client at the limit through. Default
	// 0.95; valid (0, 1).
	SplitConfidence float64 `mapstructure:"split_confidence"`
}

// RedisConfig says how to reach Redis.
type RedisConfig struct {
	// Addresses are host:port. A single Redis server takes exactly one;
	// with Cluster, the seed nodes of a Redis Cluster.
	Addresses []string `mapstructure:"addresses"`
	// Cluster selects Redis Cluster.
	Cluster bool `mapstructure:"cluster"`
	// Username and Password authenticate (Redis ACL, or Password alone for
	// requirepass). The password is never shown by the admin API.
	Username string `mapstructure:"username"`
	Password string `mapstructure:"password"`
	// PoolSize is the most dedicated connections per Redis server, used
	// by flushes of over 2000 keys; everything else is pipelined on a few
	// shared connections. Default 32; valid 1..10000.
	PoolSize int `mapstructure:"pool_size"`
	// DialTimeout bounds each connection attempt to Redis (dial and
	// handshake); a request never waits longer than the budget. Default
	// 1s; valid 1ms..30s.
	DialTimeout time.Duration `mapstructure:"dial_timeout"`
}

// DomainConfig is one site: the hosts it answers for, where its requests go,
// and the rules that limit them.
type DomainConfig struct {
	// Name labels the domain in metrics and the admin API. Default: the
	// first host, with bytes outside [A-Za-z0-9_.-] replaced by '_'
	// ("*.example.com" becomes "_.example.com"). Unique across domains.
	Name string `mapstructure:"name"`
	// Hosts are exact names ("api.example.com", "192.0.2.1", "[2001:db8::1]"),
	// wildcards ("*.example.com": any depth of subdomain, not the suffix
	// itself) or the catch-all "*". Matching ignores case and one trailing
	// dot; ports are not allowed.
	Hosts []string `mapstructure:"hosts"`
	// Serve says which listener answers for the domain: "proxy" (the
	// public listener forwards its requests), "check" (the check listener
	// answers questions about its requests; it needs no origin) or "both".
	// Default "both" when the check section is set, else "proxy".
	Serve string `mapstructure:"serve"`
	// Origin overrides Config.Origin for this domain: a list of one
	// server (UpstreamConfig.Origins); not with Origins.
	Origin string `mapstructure:"origin"`
	// UpstreamConfig is the domain's servers and how they are balanced,
	// checked and retried; each section set here replaces the top level's.
	UpstreamConfig `mapstructure:",squash"`
	// Routes send the requests they match to server groups of their
	// own, the first route that matches; a request none matches goes to
	// the domain's origins (docs/origins.md, "Routes"). At most
	// MaxRoutes.
	Routes []RouteConfig `mapstructure:"routes"`
	// Respond answers every request that passes the rules with a static
	// response instead of proxying. It excludes Origin.
	Respond *ResponseConfig `mapstructure:"respond"`
	// MaxKeys is this domain's share of Config.MaxKeys. Zero means an equal
	// share of whatever the domains that set it leave over.
	MaxKeys int `mapstructure:"max_keys"`
	// OriginQueue is where the domain's requests wait for a server below
	// its max_in_flight; it replaces the top level's whole.
	OriginQueue *OriginQueueConfig `mapstructure:"origin_queue"`
	// MaxQueued bounds the requests of this domain waiting at once for
	// their turn in a leaky_bucket queue (a rule with MaxDelay); one more
	// is refused. Default 1000; valid 1..1_000_000.
	MaxQueued int `mapstructure:"max_queued"`
	// Rules are the rate-limit rules; at most 255.
	Rules []RuleConfig `mapstructure:"rules"`
	// JWT verifies the domain's bearer tokens, in place of the top-level
	// jwt section.
	JWT *JWTConfig `mapstructure:"jwt"`
	// RequestBuffering says whether request bodies are read (up to
	// RequestBuffer bytes) before the origin is contacted, so that a slow
	// client holds no origin connection. nil means true; false streams
	// bodies as they arrive.
	RequestBuffering *bool `mapstructure:"request_buffering"`
	// RequestBuffer overrides Config.RequestBuffer for this domain; not
	// with RequestBuffering false, which buffers nothing.
	RequestBuffer Size `mapstructure:"request_buffer"`
	// MaxRequestBody overrides Config.MaxRequestBody for this domain.
	MaxRequestBody Size `mapstructure:"max_request_body"`
	// Shed, when set, bounds the requests in flight to the origin and
	// sheds the least important first (shed.go).
	Shed *ShedConfig `mapstructure:"shed"`
	// Priorities classify requests for Shed; first match wins.
	Priorities []PriorityConfig `mapstructure:"priorities"`
	// HTTPSRedirect makes the plain listener answer this domain's
	// requests with 308 Permanent Redirect to the same URL on https,
	// before any rule (except ACME's /.well-known/acme-challenge/).
	// Needs tls.listen.
	HTTPSRedirect bool `mapstructure:"https_redirect"`
	// HSTSMaxAge, when not 0, adds Strict-Transport-Security: max-age=N
	// to the domain's HTTPS responses; whole seconds, at most ten years.
	// Needs tls.listen.
	HSTSMaxAge time.Duration `mapstructure:"hsts_max_age"`
	// ACME obtains and renews a certificate for each exact host of the
	// domain from tls.acme's certificate authority. Needs tls.acme.
	ACME bool `mapstructure:"acme"`
	// AccessLog false leaves the domain's requests out of the access log;
	// it accepts only false (nil: logged when the access log is on).
	AccessLog *bool `mapstructure:"access_log"`
	// GraphQL says where the domain's GraphQL API is and the numbers its
	// queries are priced with, for its rules with cost_from: graphql
	// (docs/graphql.md); nil means the defaults.
	GraphQL *GraphQLConfig `mapstructure:"graphql"`
	// APIKeys says how the domain's clients are known by an API key and
	// which plan each is on (docs/graphql.md, "Plans"); nil for none.
	APIKeys *APIKeysConfig `mapstructure:"api_keys"`
}

// APIKeysConfig is a domain's api_keys.
type APIKeysConfig struct {
	// From is the key part the API key is read from: header:X-API-Key,
	// query:api_key, jwt:client_id. Required.
	From string `mapstructure:"from"`
	// File is a YAML mapping of API key to plan name, read with the
	// configuration and again when it changes; relative to the
	// configuration file's directory.
	File string `mapstructure:"file"`
	// Required answers a request without a key, or with one no plan is
	// known for, 403 {"error":"invalid_api_key"}.
	Required bool `mapstructure:"required"`
	// PlanFrom is the key part the plan is read from (jwt:plan) for a key
	// the file does not list.
	PlanFrom string `mapstructure:"plan_from"`
	// Keys is File's mapping, filled in by the config package as it reads
	// the file; never a key of the configuration file itself.
	Keys map[string]string `mapstructure:"-"`
}

// PlanConfig is one plan of a rule: the values that replace the rule's
// own for a request of that plan; a zero (or, for Cost, nil) field keeps
// the rule's.
type PlanConfig struct {
	Limit  int           `mapstructure:"limit"`
	Burst  int           `mapstructure:"burst"`
	Period time.Duration `mapstructure:"period"`
	Cost   *int          `mapstructure:"cost"`
}

// GraphQLConfig is a domain's GraphQL API. Zero fields left out take the
// defaults given.
type GraphQLConfig struct {
	// Path is the API's path, matched exactly. Default "/graphql".
	Path string `mapstructure:"path"`
	// MutationCost is what each top-level field of a mutation costs, what
	// it returns included. Default 10; valid 0..1_000_000.
	MutationCost int `mapstructure:"mutation_cost"`
	// ObjectCost is what an object field costs. Default 1; valid
	// 0..1_000_000.
	ObjectCost int `mapstructure:"object_cost"`
	// DefaultPage is the page size of a connection whose first or last is
	// a variable the request does not give. Default 50; valid
	// 0..1_000_000.
	DefaultPage int `mapstructure:"default_page"`
	// MaxQueryCost is the most a request may cost; one that costs more is
	// answered 400. At most, and by default, the smallest capacity of the
	// domain's cost_from: graphql rules.
	MaxQueryCost int `mapstructure:"max_query_cost"`
}

// ResponseConfig is a static response: a domain's respond, or a rule's
// block_response.
type ResponseConfig struct {
	// Status is the HTTP status code. The default and the valid range
	// depend on where the response is used.
	Status int `mapstructure:"status"`
	// Body is sent verbatim; at most 32 KiB.
	Body string `mapstructure:"body"`
	// ContentType defaults to "text/plain; charset=utf-8" when there is a
	// body.
	ContentType string `mapstructure:"content_type"`
}

// MatchConfig selects the requests a rule applies to. An absent match, or an
// empty one, selects every request.
type MatchConfig struct {
	// PathPrefix, when set, must start with "/". The comparison is a
	// case-sensitive byte prefix of the request path.
	PathPrefix string `mapstructure:"path_prefix"`
	// Methods, when set, are HTTP methods; they are upper-cased.
	Methods []string `mapstructure:"methods"`
	// Headers maps a header name to the exact value one of the request's
	// values of that header must have (case-sensitive value; names are
	// case-insensitive); an empty value matches a header that is present,
	// as priorities[].match.headers reads.
	Headers map[string]string `mapstructure:"headers"`
}

// RuleConfig is one rate-limit rule: at most Limit requests per Period for
// each distinct Key.
type RuleConfig struct {
	// Name identifies the rule in metrics and the admin API. Required; at
	// most 64 bytes of [A-Za-z0-9_.-]; unique within its domain.
	Name string `mapstructure:"name"`
	// Match selects the requests the rule counts; nil means all of them.
	Match *MatchConfig `mapstructure:"match"`
	// Limit is the number of requests allowed per Period; 1..1_000_000_000.
	// Required.
	Limit int `mapstructure:"limit"`
	// Period is the window length: a whole number of seconds, 1s..720h.
	// Required.
	Period time.Duration `mapstructure:"period"`
	// Key lists what identifies a client: "ip", "path", "host", "ja4",
	// "header:NAME", "cookie:NAME", "query:NAME" or "jwt:CLAIM". Default
	// ["ip"].
	Key []string `mapstructure:"key"`
	// WhenMissing is what a request without the value of a key part
	// (header, cookie, query, jwt, ja4) is keyed by: "ip" (default: by its
	// client, apart from every keyed value) or "skip" (the rule does not
	// apply to it).
	WhenMissing string `mapstructure:"when_missing"`
	// Action is "block" (default) or "log" (count and report, never block).
	Action string `mapstructure:"action"`
	// MitigationTimeout, when non-zero, keeps blocking a key for this long
	// after it first exceeds the limit; 0 (off) or 1s..24h.
	MitigationTimeout time.Duration `mapstructure:"mitigation_timeout"`
	// CountBlocked says whether blocked requests count against the limit.
	// Mode soft implies true, and refuses false written in the file.
	CountBlocked bool `mapstructure:"count_blocked"`
	// Headers says when rate-limit headers are sent: "blocked" (default,
	// only on blocked responses), "always" or "none".
	Headers string `mapstructure:"headers"`
	// BlockResponse replaces the default 429 response. Its status must be
	// 400..499; default 429. Only with action block, in a domain the public
	// listener serves (the check listener refuses with check.deny_status).
	BlockResponse *ResponseConfig `mapstructure:"block_response"`

	// Algorithm is how the rule counts: "sliding_window" (default: the
	// two-counter estimate over Period), "fixed_window" (one count per
	// epoch-aligned Period), "token_bucket" (Burst tokens, refilled at
	// Limit per Period) or "leaky_bucket" (a level raised by each request's
	// cost and draining at Limit per Period, refused past Burst, or queued
	// with MaxDelay) or "quota" (Limit per calendar period, Reset, instead
	// of Period) or "concurrency" (at most Limit requests of a key in
	// flight at once; no Period).
	Algorithm string `mapstructure:"algorithm"`
	// Mode is "hard" (default: every request over the limit is refused) or
	// "soft" (sliding_window and fixed_window only): every request offered
	// counts, and while the offered rate is over the limit each request is
	// allowed with probability limit ÷ offered rate.
	Mode string `mapstructure:"mode"`
	// Precision is how finely a sliding_window counts: "standard"
	// (default: two counters a key) or "fine" (keys near their limit are
	// counted exactly, in a log from a bounded pool; limit at most 65535;
	// not with mode soft nor with a cluster that shares counters).
	Precision string `mapstructure:"precision"`
	// Reset is a quota's calendar period, required with algorithm quota
	// and only valid with it: "daily" (from local midnight), "weekly"
	// (from the midnight that starts Monday) or "monthly" (from midnight
	// on the first).
	Reset string `mapstructure:"reset"`
	// Timezone is the IANA time zone name ("Europe/Berlin") whose
	// midnights a quota resets at; "" means UTC. Only valid with algorithm
	// quota.
	Timezone string `mapstructure:"timezone"`
	// Burst is a bucket's capacity in units: token_bucket and leaky_bucket
	// only. Zero means Limit; valid 1..1_000_000_000.
	Burst int `mapstructure:"burst"`
	// MaxDelay is how long a leaky_bucket request may wait for its turn:
	// 0, the default, refuses a request that would overflow the bucket at
	// once (a meter); 1ms..1h makes the rule a queue, where such a request
	// waits until the bucket has drained enough for it, if that comes
	// within MaxDelay, and is then forwarded (nginx limit_req without
	// nodelay). Not with cluster.store redis yet.
	MaxDelay time.Duration `mapstructure:"max_delay"`
	// Lease is how long a concurrency rule's slot held in Redis
	// (cluster.store redis, sync exact) outlives its node: the node renews
	// it every third of Lease while the request runs, so a node that dies
	// frees its slots within Lease. Only valid with algorithm concurrency;
	// 0 means 30s; valid 1s..1h.
	Lease time.Duration `mapstructure:"lease"`
	// Cost is the units a request takes, 0..1_000_000, and at most what
	// the rule can hold (Burst for a bucket, else Limit); nil means 1. With
	// CostHeader it is the cost of a request that does not send the
	// header. A pointer because 0 is a valid cost, unlike the default.
	Cost *int `mapstructure:"cost"`
	// CostHeader, when set, names a request header whose value, a
	// non-negative integer of at most MaxCost, is the request's cost.
	CostHeader string `mapstructure:"cost_header"`
	// MaxCost is the largest cost CostHeader may give, 1..1_000_000 and
	// at most what the rule can hold; required with CostHeader, and only
	// valid with it.
	MaxCost int `mapstructure:"max_cost"`
	// Allow exempts clients from the rule; nil exempts no one.
	Allow *AllowConfig `mapstructure:"allow"`
	// CountStatus, when set, makes the rule count a request only once the
	// origin answers it with one of these statuses (100..599, no
	// duplicates), as the response headers arrive: 401 and 403 count
	// failed logins and not successful ones. Requests are still refused
	// before they are forwarded, from the counts so far. Empty counts every
	// request as it is decided.
	CountStatus []int `mapstructure:"count_status"`
	// ResponseCostHeader, when set, names a response field in which the
	// origin reports what a request really cost, as a non-negative integer
	// of units charged to the client's key when the response headers (or
	// the trailers, where the origin sends it as a trailer) arrive, on top
	// of what the request counted when it was decided. The field is removed
	// from the response the client sees.
	ResponseCostHeader string `mapstructure:"response_cost_header"`
	// CostFrom, when set, says where a request's cost comes from:
	// "graphql" (edge prices the request's GraphQL query before deciding,
	// by the domain's graphql section; a persisted query costs Cost) or
	// "origin_time" (the milliseconds the origin took, charged when the
	// response ends, at most the rule's capacity, besides Cost charged
	// when deciding). Not with cost_header, response_cost_header or
	// count_status. See docs/graphql.md.
	CostFrom string `mapstructure:"cost_from"`
	// Plans are the values that replace the rule's limit, burst, period
	// and cost for a request of a plan named by the domain's api_keys;
	// a plan the rule does not list uses the rule's own values. Names are
	// labels, compared in lower case.
	Plans map[string]PlanConfig `mapstructure:"plans"`
}

// AllowConfig lists the clients a rule neither counts nor refuses.
type AllowConfig struct {
	// CIDRs are CIDR prefixes or bare IPs (a bare IP is a /32 or /128),
	// written as client_ip.trusted_proxies are; at least one. They are
	// compared with the client's address as edge derives it (see
	// client_ip), in full, not its ipv6_prefix.
	CIDRs []string `mapstructure:"cidrs"`
}

// UpstreamConfig is a group of origin servers and how edge spreads
// requests over them, takes failing ones out and retries (docs/origins.md).
// In a domain each key set replaces the top level's.
type UpstreamConfig struct {
	// Origins are the servers, instead of Origin: at most MaxOrigins, each
	// URL as Origin takes it, all with one scheme, none twice.
	Origins []OriginConfig `mapstructure:"origins"`
	// Balance is round_robin (default: weighted, smooth), least_requests,
	// random_two or hash.
	Balance string `mapstructure:"balance"`
	// HashKey is what balance hash hashes, in a rule key's vocabulary
	// (default [ip]); only with balance hash.
	HashKey []string `mapstructure:"hash_key"`
	// Health, when set, checks every server actively.
	Health *HealthConfig `mapstructure:"health"`
	// Passive ejects servers that fail real requests; on by default for
	// more than one server (false turns it off).
	Passive *PassiveConfig `mapstructure:"passive"`
	// Retries says which failed requests are tried again on another
	// server.
	Retries *RetriesConfig `mapstructure:"retries"`
	// WhenDown is the answer when no server can be reached (default 502).
	WhenDown *WhenDownConfig `mapstructure:"when_down"`
	// OriginTLS is how edge speaks TLS to the group's https servers
	// (default: verified against the system's roots, for the URL's host,
	// without a client certificate).
	OriginTLS *OriginTLSConfig `mapstructure:"origin_tls"`
}

// RouteConfig is one of a domain's routes: the requests Match selects go
// to the route's own group of servers. Every key of UpstreamConfig is
// the route's group's; one the route does not set is the domain's (its
// own, or the top level's), but for Origins, which a route must set.
type RouteConfig struct {
	// Name labels the route in metrics and the admin API; required,
	// unique within the domain, in [A-Za-z0-9_.-].
	Name string `mapstructure:"name"`
	// Match selects the route's requests; nil (or empty) selects every
	// request.
	Match          *RouteMatchConfig `mapstructure:"match"`
	UpstreamConfig `mapstructure:",squash"`
}

// RouteMatchConfig selects a route's requests by path and method.
type RouteMatchConfig struct {
	// PathPrefix, when set, starts with "/"; compared as a rule's is,
	// with the request's decoded, cleaned path.
	PathPrefix string `mapstructure:"path_prefix"`
	// Methods, when set, are HTTP methods; they are upper-cased, and a
	// request's method is compared exactly (RFC 9110, 9.1).
	Methods []string `mapstructure:"methods"`
}

// OriginConfig is one server of an upstream group.
type OriginConfig struct {
	// URL is an absolute http, https or h2c URL, as Origin.
	URL string `mapstructure:"url"`
	// Weight is the server's share against the others' (default 1; valid
	// 1..MaxOriginWeight).
	Weight int `mapstructure:"weight"`
	// MaxInFlight bounds the requests edge has in flight to the server at
	// once (default 0: no bound; valid 0..MaxOriginInFlight). A server at
	// its bound is not chosen; when every server is, a request waits in
	// the domain's origin_queue.
	MaxInFlight int `mapstructure:"max_in_flight"`
}

// OriginQueueConfig is where a domain's requests wait when every server
// that could take them is at its max_in_flight.
type OriginQueueConfig struct {
	// Max bounds the requests waiting at once (default 1000; valid
	// 1..MaxOriginQueue); one more is refused at once.
	Max int `mapstructure:"max"`
	// Timeout is how long a request waits before it is refused (default
	// 0: refused at once, no request waits; valid 0..MaxOriginQueueTimeout).
	Timeout time.Duration `mapstructure:"timeout"`
}

// HealthConfig is an upstream group's active checks: every Interval each
// server is asked for Path, and its answer counts for it or against it.
type HealthConfig struct {
	// Path is what is requested (required; it starts with "/").
	Path string `mapstructure:"path"`
	// Host is the check's Host field (default: the domain's first exact
	// host, else the server's own).
	Host string `mapstructure:"host"`
	// Interval between checks (default 10s; valid 100ms..1h).
	Interval time.Duration `mapstructure:"interval"`
	// Timeout of a check (default 2s; at most Interval).
	Timeout time.Duration `mapstructure:"timeout"`
	// HealthyAfter passed checks in a row take a server back (default 2).
	HealthyAfter int `mapstructure:"healthy_after"`
	// UnhealthyAfter failed checks in a row take it out (default 3).
	UnhealthyAfter int `mapstructure:"unhealthy_after"`
	// ExpectStatus are the statuses that pass: numbers or ranges written
	// "200-399" (default [200-399]).
	ExpectStatus []StatusSpec `mapstructure:"expect_status"`
}

// StatusSpec is an HTTP status or a range of them ("200-399"), as written.
type StatusSpec string

// PassiveConfig is the ejection of servers by the failures of real
// requests: MaxFails failures within FailWindow eject a server for
// EjectFor.
type PassiveConfig struct {
	// Enabled is false for `passive: false` (the decoder writes it).
	Enabled *bool `mapstructure:"enabled"`
	// MaxFails failures within FailWindow eject (default 3; 1..1000).
	MaxFails int `mapstructure:"max_fails"`
	// FailWindow (default 10s; 1s..1h).
	FailWindow time.Duration `mapstructure:"fail_window"`
	// EjectFor is how long an ejected server stays out (default 30s;
	// 1s..1h).
	EjectFor time.Duration `mapstructure:"eject_for"`
	// On are the failures counted: connect_error, timeout, 502, 503, 504
	// (default all of them).
	On []string `mapstructure:"on"`
}

// RetriesConfig says when a failed request is tried again, on another
// server.
type RetriesConfig struct {
	// Attempts is how many more servers a request may try (default 1;
	// 0 never retries; at most 10).
	Attempts *int `mapstructure:"attempts"`
	// On are the failures retried: connect_error, reset_before_response,
	// 502, 503 (default [connect_error, reset_before_response]).
	On []string `mapstructure:"on"`
	// Budget bounds retries to this share of the domain's requests over
	// 10 s, written "20%" (default 20%); 3 a second are always allowed.
	Budget string `mapstructure:"budget"`
}

// WhenDownConfig is the answer to a request no server could take.
type WhenDownConfig struct {
	// Status (default 503; 500..599).
	Status int `mapstructure:"status"`
	// RetryAfter, when not 0, is sent as Retry-After (whole seconds).
	RetryAfter time.Duration `mapstructure:"retry_after"`
}
