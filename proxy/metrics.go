package proxy

import (
	"errors"
	"runtime"
	"time"

	"github.com/edgerate/edge/cluster"
	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the proxy's Prometheus metrics. Every label value comes from
// the configuration (domain and rule names) or from a fixed set (outcomes,
// status classes): never from the client key, address or Host header, so
// no request can create a series.
type metrics struct {
	p         *Proxy
	requests  *prometheus.CounterVec
	decisions *prometheus.CounterVec
	// planDecisions counts rule decisions by plan (plans.go).
	planDecisions *prometheus.CounterVec
	blocked       *prometheus.CounterVec
	queued        *prometheus.GaugeVec // leaky bucket queues (queue.go)
	reloads       *prometheus.CounterVec
	lastReload    prometheus.Gauge
	reloadOK      prometheus.Gauge
	upstream      *prometheus.HistogramVec
	// The origin servers of the domains' groups (upstream.go): the
	// counts and gauges are read from the origin component at scrape
	// time (originCollector).
	originRequests, originInFlight, originHealthy, originDrained, originEjections, originRetries *prometheus.Desc
	originSeconds                                                                                *prometheus.HistogramVec
	originPanics                                                                                 *prometheus.CounterVec
	// originQueued and originMaxInFlight are read at scrape time too;
	// originBusy counts the requests refused origin_busy, by reason.
	originQueued, originMaxInFlight *prometheus.Desc
	originBusy                      *prometheus.CounterVec
	misdirected                     prometheus.Counter
	refused                         *prometheus.CounterVec
	framing                         prometheus.Counter
	capped                          prometheus.Counter
	connsOpen                       *prometheus.GaugeVec
	// proxyProtocol counts the PROXY protocol stage's results (front.go).
	proxyProtocol *prometheus.CounterVec
	// connsRefused counts the connections the connection limits refused,
	// by reason (connections.go), with its two series resolved.
	connsRefused                            *prometheus.CounterVec
	connsRefusedPerClient, connsRefusedRate prometheus.Counter
	xffMalformed                            prometheus.Counter
	jwt                                     *prometheus.CounterVec
	jwksFetches                             *prometheus.CounterVec
	buildInfo                               prometheus.Gauge

	// The HTTPS listener (tls.go).
	tlsHandshakes       *prometheus.CounterVec
	tlsHandshakeSeconds prometheus.Histogram
	certExpiry          *prometheus.Desc // certCollector: the files' and ACME's certificates

	// ACME (acme.go).
	acmeOrders   *prometheus.CounterVec
	acmeRenewals *prometheus.CounterVec

	// HTTP/2 (http2.go).
	http2Floods *prometheus.CounterVec
	http3Conns  *prometheus.CounterVec

	// Untrusted peers that forward for others (forwarders.go).
	untrustedForwarders prometheus.Counter

	// The check listener (check.go).
	checkAnswers *prometheus.CounterVec

	// The accuracy sample (accuracy.go).
	sampled   *prometheus.CounterVec
	misjudged *prometheus.CounterVec

	// Costs reported by origins (charge.go).
	responseCostInvalid *prometheus.CounterVec

	// Request bodies (body.go).
	bufferedBytes prometheus.GaugeFunc
	bufferFull    prometheus.Counter
	inFlight      prometheus.GaugeFunc

	// The access log (accesslog.go).
	alogDropped, alogFailed, alogSkipped prometheus.CounterFunc

	// Load shedding (shed.go).
	shedInFlight *prometheus.GaugeVec
	shedRefused  *prometheus.CounterVec

	// Redis-shared counting (cluster.store: redis).
	storeErrors    *prometheus.CounterVec
	storeRoundTrip *prometheus.HistogramVec
	storeFallback  *prometheus.CounterVec
	circuit        *prometheus.Desc
	nodes          *prometheus.Desc
	nodeShare      *prometheus.Desc // cluster.sync: share

	trackedKeys  *prometheus.Desc
	capacity     *prometheus.Desc
	evictions    *prometheus.Desc
	overflowReqs *prometheus.Desc
	slotsInUse   *prometheus.Desc
	fineLogs     *prometheus.Desc // precision: fine
	fineCapacity *prometheus.Desc
	fineFallback *prometheus.Desc
}

// newMetrics declares every metric the proxy exports. It is long because
// it is a list, one declaration a metric with its help text, which reads
// best in one place beside the metrics table of docs/operations.md.
func newMetrics(p *Proxy, version string) *metrics {
	m := &metrics{
		p: p,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_requests_total",
			Help: "Requests by domain and outcome: served (forwarded, answered by the domain's static response, or allowed by the check listener), blocked by a rate limit, unavailable (the rate limit store could not decide), bad_cost (a cost header a block rule cannot use), body_refused (413, 400 or 408 for the body), origin_failed (502), origin_timeout (504), origin_down (no origin server could be reached: 502, or when_down's status), origin_busy (503: every origin server was at its max_in_flight), shed (503 by load shedding), loop (508: the request came back to the node that forwarded it), redirect (308 to https by https_redirect), acme (an ACME server's HTTP-01 validation, answered by edge) or invalid_api_key (403: a missing or unknown API key where api_keys requires one).",
		}, []string{"domain", "outcome"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_rule_decisions_total",
			Help: "Rule decisions by domain, rule, action and outcome (allowed, limited, mitigated, soft_limited for a soft rule's refusals). A log rule counts limited requests that it did not block.",
		}, []string{"domain", "rule", "action", "outcome"}),
		planDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_plan_decisions_total",
			Help: "Rule decisions of requests on a plan (api_keys), by domain, rule, plan (as the config names it; other for any other) and outcome (allowed, limited, mitigated, soft_limited).",
		}, []string{"domain", "rule", "plan", "outcome"}),
		blocked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_blocked_requests_total",
			Help: "Requests refused, by domain and reason: limit (a rule's estimate reached its limit), mitigation (a mitigation timeout in force) or queue_full (a leaky bucket queue's turn, refused because max_queued requests were waiting).",
		}, []string{"domain", "reason"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edge_requests_queued",
			Help: "Requests waiting for their turn in a leaky bucket queue (a rule with max_delay), by domain.",
		}, []string{"domain"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_config_reloads_total",
			Help: "Configuration reloads by result (success or failure). A failed reload leaves the running configuration in place.",
		}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edge_config_last_reload_success_timestamp_seconds",
			Help: "When the running configuration took effect (Unix time).",
		}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edge_config_last_reload_successful",
			Help: "1 if the last reload attempt succeeded (or none was made), 0 if it failed.",
		}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "edge_upstream_request_duration_seconds",
			Help:    "Time from sending a request to an origin to receiving its response headers, by domain and status class (error when no response came).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"domain", "code_class"}),
		originRequests: prometheus.NewDesc("edge_origin_requests_total",
			"Tries sent to each origin server, by domain, route (\"\" for the domain's own origins), server (its URL as configured) and status class (error when no response came).",
			[]string{"domain", "route", "server", "code_class"}, nil),
		originInFlight: prometheus.NewDesc("edge_origin_in_flight",
			"Requests in flight to each origin server.", []string{"domain", "route", "server"}, nil),
		originHealthy: prometheus.NewDesc("edge_origin_healthy",
			"1 if the origin server takes requests, 0 if active checks or a passive ejection took it out.", []string{"domain", "route", "server"}, nil),
		originDrained: prometheus.NewDesc("edge_origin_drained",
			"1 if the origin server is drained on this node (taken out of rotation through the admin API while its requests finish), else 0.", []string{"domain", "route", "server"}, nil),
		originEjections: prometheus.NewDesc("edge_origin_ejections_total",
			"Times an origin server was taken out, by reason: passive (failures of real requests) or active (health checks).",
			[]string{"domain", "route", "server", "reason"}, nil),
		originRetries: prometheus.NewDesc("edge_origin_retries_total",
			"Retries of failed requests on another server, by outcome: sent, budget_exhausted (refused by retries.budget), no_server (every server was tried).",
			[]string{"domain", "route", "outcome"}, nil),
		originSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "edge_origin_response_seconds",
			Help:    "Time from sending a try to an origin server to its response headers (or its failure), by domain, route and server.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"domain", "route", "server"}),
		originPanics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_origin_panic_total",
			Help: "Server choices made in panic mode: fewer than half the group's servers were healthy, so all were balanced over; by domain and route.",
		}, []string{"domain", "route"}),
		originQueued: prometheus.NewDesc("edge_origin_queued",
			"Requests of a domain waiting now in its origin_queue for a server below its max_in_flight.", []string{"domain"}, nil),
		originMaxInFlight: prometheus.NewDesc("edge_origin_max_in_flight",
			"The max_in_flight of each origin server that has one.", []string{"domain", "route", "server"}, nil),
		originBusy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_origin_busy_total",
			Help: "Requests refused 503 origin_busy because every server that could take them was at its max_in_flight, by reason: full (they could not wait: origin_queue.timeout is 0, or origin_queue.max requests were waiting) or timeout (they waited origin_queue.timeout).",
		}, []string{"domain", "reason"}),
		misdirected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_misdirected_requests_total",
			Help: "Requests whose Host no domain claims, or over TLS one the connection's certificate is not for (answered 421), or with an invalid Host (400).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_refused_requests_total",
			Help: "Requests refused by the request screen before any rule (ambiguous targets, CONNECT, lower-case methods), for a cost header a rule cannot use (400 bad_cost or cost_too_high), or for their body once allowed (400 broken, 408 too slow, 413 over max_request_body), by status code. Framing errors refused by the listener before parsing are not counted here.",
		}, []string{"code"}),
		framing: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_framing_refused_total",
			Help: "Requests the public listener refused for their HTTP/1.1 framing (Transfer-Encoding with Content-Length, duplicate Content-Length, malformed chunks, bare-LF line ends, the asterisk-form target of OPTIONS *, ...) before net/http parsed them; each got 400 and its connection was closed.",
		}),
		capped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_connections_capped_total",
			Help: "Connections that arrived while max_connections were open on the public listener: for each, edge closed an idle keep-alive connection or, with none idle, stopped accepting until a connection closed.",
		}),
		connsOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edge_connections_open",
			Help: "Connections open on the public listener, by socket: public (plain HTTP) or tls; together counted against max_connections.",
		}, []string{"listener"}),
		proxyProtocol: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_proxy_protocol_total",
			Help: "Connections of the listeners that read PROXY protocol headers, by result: v1 and v2 (a balancer named the client), local (a balancer's own connection, a v2 LOCAL or v1 UNKNOWN), and the ones closed: missing (a balancer's connection without a header), untrusted (a header from an address not in proxy_protocol.from), malformed, timeout (no whole header within timeouts.read_header). A direct client's connection without a header is not counted.",
		}, []string{"result"}),
		connsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_connections_refused_total",
			Help: "Connections to the public and TLS listeners closed before any read (after the PROXY header, where one is required) and before any TLS handshake, by reason: per_client (the client had connections.max_per_client open) or rate (it opened connections.rate_per_client within its period).",
		}, []string{"reason"}),
		tlsHandshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_tls_handshakes_total",
			Help: "TLS handshakes on the HTTPS listener, by result: ok, unknown_sni (served the default certificate), rejected (unknown_sni: reject), plain_http (answered 400), acme (an ACME server's TLS-ALPN-01 validation, answered and closed), error.",
		}, []string{"result"}),
		tlsHandshakeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "edge_tls_handshake_seconds",
			Help:    "Time from a TLS connection's accept to the end of its handshake, whatever the result.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		certExpiry: prometheus.NewDesc("edge_tls_certificate_expiry_timestamp_seconds",
			"When each certificate in use expires (Unix seconds), by its first name and its source (its cert_file, or acme).",
			[]string{"name", "source"}, nil),
		acmeOrders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_acme_orders_total",
			Help: "ACME orders of a name's first certificate by this node, by result: ok (a certificate), error (retried with backoff).",
		}, []string{"result"}),
		acmeRenewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_acme_renewals_total",
			Help: "ACME renewals of a certificate by this node, by result: ok (a new certificate), error (retried with backoff).",
		}, []string{"result"}),
		http2Floods: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_http2_floods_total",
			Help: "HTTP/2 connections closed for a flood of frames, by kind: rapid_reset (streams reset by the client, or by edge for the client's malformed frames, over http2.max_resets a second), continuation (a header block over http2.max_header_bytes across CONTINUATION frames, or without end), control (SETTINGS, PING, PRIORITY, WINDOW_UPDATE and empty DATA frames over http2.max_control_frames a second).",
		}, []string{"kind"}),
		jwt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_jwt_total",
			Help: "Bearer tokens verified for a domain with a jwt section, by result: valid, missing, malformed, algorithm (not allowed, none included, or not its key's kind), unknown_kid, signature, expired, not_yet_valid, issuer, audience, bad_claims; claim_not_scalar counts requests whose keyed claim was an array or object (keyed as missing).",
		}, []string{"domain", "result"}),
		jwksFetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_jwks_fetches_total",
			Help: "Fetches of a jwt.jwks_url, by result: ok, or error (the last keys stay).",
		}, []string{"result"}),
		http3Conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_http3_connections_total",
			Help: "QUIC connection attempts of the HTTP/3 listener, by result: ok (handshake done), retry (sent a Retry to validate the address, more than http3.retry_above handshakes being in progress), refused (a validated address over connections.max_per_client or rate_per_client), handshake_error (the handshake failed or timed out).",
		}, []string{"result"}),
		xffMalformed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_client_ip_xff_malformed_total",
			Help: "Requests from a trusted proxy whose X-Forwarded-For could not be read; they were keyed by the proxy's address.",
		}),
		untrustedForwarders: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_untrusted_forwarders_total",
			Help: "Peers not in client_ip.trusted_proxies found forwarding for other clients (10 distinct X-Forwarded-For values within a minute), whose clients all share the peer's key: a peer counts when found and again at most once an hour while it goes on (of the 1,024 peers sending X-Forwarded-For that edge remembers).",
		}),
		checkAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_check_answers_total",
			Help: "Questions the check listener answered, by answer: allowed (200), refused (a rule refused the request, or its store could not decide), unreadable (forwarded fields missing or malformed, or a request the screen refuses), misdirected (no domain serving check claims the host) or unauthorized (check.token missing or wrong). Every answer but allowed has check.deny_status.",
		}, []string{"answer"}),
		buildInfo: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "edge_build_info",
			Help:        "Always 1; labels carry the version of edge and of Go.",
			ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
		}),
		sampled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_window_sampled_total",
			Help: "Requests of the accuracy sample (accuracy_sample) judged: a sliding-window rule's decisions on a sampled key compared with an exact count of what the window counted for it in the last period. With Redis-shared counting the count is this node's own.",
		}, []string{"domain", "rule"}),
		misjudged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_window_misjudged_total",
			Help: "Requests of the accuracy sample that the window decided otherwise than the exact count would, by direction: allowed (the exact count would have limited it) or limited (it would have allowed it). Divide by edge_window_sampled_total for the misjudged share.",
		}, []string{"domain", "rule", "direction"}),
		responseCostInvalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_response_cost_invalid_total",
			Help: "Costs an origin reported in a rule's response_cost_header that were not charged: not one non-negative integer of at most 1000000.",
		}, []string{"domain", "rule"}),
		bufferedBytes: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "edge_request_body_buffered_bytes",
			Help: "Request body bytes held in memory now, reserved before reading (bounded by max_buffered_bytes).",
		}, func() float64 { return float64(p.buffered.reserved.Load()) }),
		bufferFull: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_request_body_unbuffered_total",
			Help: "Requests whose body was streamed to the origin unbuffered because max_buffered_bytes was reached.",
		}),
		alogDropped: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "edge_access_log_dropped_total",
			Help: "Access log lines dropped because the access log's buffer was full (the disk did not keep up); requests never wait for it.",
		}, func() float64 { return float64(p.alogCounts.Dropped.Load()) }),
		alogFailed: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "edge_access_log_write_errors_total",
			Help: "Writes of the access log's buffer that failed (disk full, a removed directory); the lines of a failed write are lost.",
		}, func() float64 { return float64(p.alogCounts.Failed.Load()) }),
		alogSkipped: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "edge_access_log_skipped_total",
			Help: "Refused requests access_log.refused_sample left out of the access log (one in N is written, with sample: N).",
		}, func() float64 { return float64(p.alogSkipped.Load()) }),
		inFlight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "edge_upstream_requests_in_flight",
			Help: "Requests sent to an origin (their body buffered, if it is) whose response is not yet complete.",
		}, func() float64 { return float64(p.inFlight.Load()) }),
		shedInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edge_shed_in_flight",
			Help: "Requests of a domain with shed holding a slot now: sent to the origin, and not yet finished (body buffering not included).",
		}, []string{"domain"}),
		shedRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_shed_requests_total",
			Help: "Requests the rate rules allowed but load shedding refused with 503, by domain and class (critical, normal or sheddable).",
		}, []string{"domain", "class"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_store_errors_total",
			Help: "Round trips to Redis that failed, by reason: timeout (the budget ran out), connection, loading, readonly, oom, busy, reply (another error reply) or other.",
		}, []string{"reason"}),
		storeRoundTrip: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "edge_store_round_trip_seconds",
			Help:    "Round trips to Redis by operation (decide, refund, flush, heartbeat, forget, peek), failed ones included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .02, .05, .1, .25, 1},
		}, []string{"op"}),
		storeFallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_store_fallback_requests_total",
			Help: "Requests with at least one rule decided without Redis, by domain and on_store_failure mode (open: allowed, closed: answered 503, local: node-local counters).",
		}, []string{"domain", "mode"}),
		circuit: prometheus.NewDesc("edge_store_circuit_state",
			"1 for the state the circuit breaker in front of Redis is in (closed, half_open, open), 0 for the others.", []string{"state"}, nil),
		nodes: prometheus.NewDesc("edge_cluster_nodes",
			"Live nodes of the PoP at the last heartbeat Redis answered (at least 1).", nil, nil),
		nodeShare: prometheus.NewDesc("edge_rule_node_share",
			"With cluster.sync share: this node's share of a rule's limit, what it allows a key alone.", []string{"domain", "rule"}, nil),
		trackedKeys: prometheus.NewDesc("edge_tracked_keys",
			"Keys whose counters a domain holds now.", []string{"domain"}, nil),
		capacity: prometheus.NewDesc("edge_key_capacity",
			"Most keys a domain may hold (its share of max_keys).", []string{"domain"}, nil),
		evictions: prometheus.NewDesc("edge_key_evictions_total",
			"Keys removed to make room: expired (held no information) or idle (live, under half their limit).", []string{"domain", "reason"}, nil),
		overflowReqs: prometheus.NewDesc("edge_overflow_requests_total",
			"Requests counted in a rule's shared overflow counter because the domain was full of busy keys.", []string{"domain"}, nil),
		slotsInUse: prometheus.NewDesc("edge_concurrency_slots_in_use",
			"Requests in flight holding a slot of a concurrency rule, by domain and rule.", []string{"domain", "rule"}, nil),
		fineLogs: prometheus.NewDesc("edge_window_fine_logs",
			"Keys of a precision: fine rule counted exactly, in a log, now.", []string{"domain", "rule"}, nil),
		fineCapacity: prometheus.NewDesc("edge_window_fine_log_capacity",
			"Logs the pool of a precision: fine rule holds.", []string{"domain", "rule"}, nil),
		fineFallback: prometheus.NewDesc("edge_window_fine_fallback_total",
			"Decisions of a precision: fine rule on keys near their limit made with two counters because its pool of logs was full.", []string{"domain", "rule"}, nil),
	}
	// Resolved once: a flood's refusals look up no label.
	m.connsRefusedPerClient = m.connsRefused.WithLabelValues(RefusedPerClient)
	m.connsRefusedRate = m.connsRefused.WithLabelValues(RefusedRate)
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	m.buildInfo.Set(1)
	m.connsOpen.WithLabelValues(ListenerPublic) // shown at 0 before the first connection
	for _, k := range HTTP2Floods {
		m.http2Floods.WithLabelValues(k)
	}
	var errs []error
	for _, r := range []string{"ok", "error"} { // shown from the start, at 0
		m.acmeOrders.WithLabelValues(r)
		m.acmeRenewals.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.requests, m.decisions, m.planDecisions, m.blocked, m.queued, m.reloads, m.lastReload, m.reloadOK, m.upstream, originCollector{m}, m.originSeconds, m.originPanics, m.originBusy, m.misdirected, m.refused, m.framing, m.capped, m.connsOpen, m.tlsHandshakes, m.tlsHandshakeSeconds, certCollector{m}, m.acmeOrders, m.acmeRenewals, m.http2Floods, m.http3Conns, m.proxyProtocol, m.connsRefused, m.xffMalformed, m.untrustedForwarders, m.checkAnswers, m.buildInfo, m.sampled, m.misjudged, m.responseCostInvalid, m.bufferedBytes, m.bufferFull, m.inFlight, m.alogDropped, m.alogFailed, m.alogSkipped, m.jwt, m.jwksFetches, m.shedInFlight, m.shedRefused, m.storeErrors, m.storeRoundTrip, m.storeFallback, storeCollector{m}} {
		errs = append(errs, reg.Register(c))
	}
	return errors.Join(errs...)
}

// requestCounters are one domain's request counters.
type requestCounters struct {
	served, blocked                prometheus.Counter
	blockedLimit, blockedMitigated prometheus.Counter
	// answered counts the other answers edge makes itself, by outcome
	// (answer.go, answeredOutcomes).
	answered map[string]prometheus.Counter
	// Redis-shared counting only (shared.go); nil in local mode.
	fallback, unavailable prometheus.Counter
}

// requestCounters makes the request counters of domain; redirects and
// acme say whether it has https_redirect and acme, without which it has no
// redirect or acme series, early whether edge accepts HTTP/3's 0-RTT
// (http3.allow_0rtt), without which it has no too_early series; refuses,
// whether its jwt section refuses (an unauthorized series).
func (m *metrics) requestCounters(domain string, redirects, acme, early, refuses bool) requestCounters {
	c := requestCounters{
		served:           m.requests.WithLabelValues(domain, "served"),
		blocked:          m.requests.WithLabelValues(domain, "blocked"),
		blockedLimit:     m.blocked.WithLabelValues(domain, "limit"),
		blockedMitigated: m.blocked.WithLabelValues(domain, "mitigation"),
		answered:         make(map[string]prometheus.Counter, len(answeredOutcomes)),
	}
	for _, o := range answeredOutcomes {
		if o == outcomeRedirect && !redirects || o == outcomeACME && !acme || o == outcomeTooEarly && !early ||
			o == outcomeUnauthorized && !refuses {
			continue
		}
		c.answered[o] = m.requests.WithLabelValues(domain, o)
	}
	return c
}

// count counts an answer of a's kind edge made for a request of the domain.
func (c *requestCounters) count(a *answer) {
	if c == nil {
		return
	}
	if n := c.answered[a.outcome]; n != nil {
		n.Inc()
	}
}

// queue returns a new queue of domain, counting in its metrics.
func (m *metrics) queue(domain string) *queue {
	return &queue{gauge: m.queued.WithLabelValues(domain), full: m.blocked.WithLabelValues(domain, "queue_full")}
}

// ruleCounters are one rule's decision counters, resolved once per
// configuration so the hot path does no label lookups.
type ruleCounters struct {
	allowed, limited, mitigated prometheus.Counter
}

func (c ruleCounters) observe(d window.Decision) {
	switch {
	case d.Allowed:
		c.allowed.Inc()
	case d.Mitigated:
		c.mitigated.Inc()
	default:
		c.limited.Inc()
	}
}

func (m *metrics) ruleCounters(domain string, r *rules.Rule) ruleCounters {
	action, limited := r.Action.String(), "limited"
	if r.Soft {
		limited = "soft_limited" // refused by the draw of a soft limit
	}
	return ruleCounters{
		allowed:   m.decisions.WithLabelValues(domain, r.Name, action, "allowed"),
		limited:   m.decisions.WithLabelValues(domain, r.Name, action, limited),
		mitigated: m.decisions.WithLabelValues(domain, r.Name, action, "mitigated"),
	}
}

// planCounters are rule's decision counters for requests of plan.
func (m *metrics) planCounters(domain, rule, plan string) ruleCounters {
	return ruleCounters{
		allowed:   m.planDecisions.WithLabelValues(domain, rule, plan, "allowed"),
		limited:   m.planDecisions.WithLabelValues(domain, rule, plan, "limited"),
		mitigated: m.planDecisions.WithLabelValues(domain, rule, plan, "mitigated"),
	}
}

// upstreamObservers are one domain's latency histograms by status class.
type upstreamObservers [6]prometheus.Observer // 1xx..5xx, then error

func (m *metrics) upstreamObservers(domain string) *upstreamObservers {
	var o upstreamObservers
	for i, class := range []string{"1xx", "2xx", "3xx", "4xx", "5xx", "error"} {
		o[i] = m.upstream.WithLabelValues(domain, class)
	}
	return &o
}

// storeCollector reads the counter stores of the current configuration at
// scrape time, so that gauges follow the live state without a goroutine.
// certCollector reports the expiry of every certificate served: the
// files' (SetCertificates) and, with tls.acme, each managed name's
// (SetACMEStatus), whose renewals change it between reloads.
type certCollector struct{ m *metrics }

func (c certCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.m.certExpiry }

func (c certCollector) Collect(ch chan<- prometheus.Metric) {
	for _, ci := range c.m.p.Certificates() {
		name := ci.File
		if len(ci.Names) > 0 {
			name = ci.Names[0]
		}
		ch <- prometheus.MustNewConstMetric(c.m.certExpiry, prometheus.GaugeValue, float64(ci.NotAfter.Unix()), name, ci.File)
	}
	for _, mi := range c.m.p.ACMEStatus() {
		if !mi.NotAfter.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.m.certExpiry, prometheus.GaugeValue, float64(mi.NotAfter.Unix()), mi.Name, "acme")
		}
	}
}

type storeCollector struct{ m *metrics }

func (c storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.trackedKeys
	ch <- c.m.capacity
	ch <- c.m.evictions
	ch <- c.m.overflowReqs
	ch <- c.m.slotsInUse
	ch <- c.m.fineLogs
	ch <- c.m.fineCapacity
	ch <- c.m.fineFallback
	ch <- c.m.circuit
	ch <- c.m.nodes
	ch <- c.m.nodeShare
}

func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	if cl := c.m.p.cluster; cl != nil {
		now := cl.State()
		for _, s := range []cluster.State{cluster.Closed, cluster.HalfOpen, cluster.Open} {
			v := 0.0
			if s == now {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.m.circuit, prometheus.GaugeValue, v, s.String())
		}
		ch <- prometheus.MustNewConstMetric(c.m.nodes, prometheus.GaugeValue, float64(cl.Nodes()))
	}
	st := c.m.p.state.Load()
	if st == nil {
		return
	}
	for _, d := range st.domains {
		if d.store == nil {
			continue
		}
		s := d.store.Stats()
		if c.m.p.started.Cluster.Sync == rules.SyncShare {
			for i := range d.rules {
				r := &d.rules[i]
				share := r.share
				if r.live != nil {
					share = r.live.NodeShare(i)
				}
				ch <- prometheus.MustNewConstMetric(c.m.nodeShare, prometheus.GaugeValue, float64(share), d.Name, r.Name)
			}
		}
		ch <- prometheus.MustNewConstMetric(c.m.trackedKeys, prometheus.GaugeValue, float64(d.store.Len()), d.Name)
		ch <- prometheus.MustNewConstMetric(c.m.capacity, prometheus.GaugeValue, float64(d.store.Capacity()), d.Name)
		ch <- prometheus.MustNewConstMetric(c.m.evictions, prometheus.CounterValue, float64(s.ExpiredReclaimed), d.Name, "expired")
		ch <- prometheus.MustNewConstMetric(c.m.evictions, prometheus.CounterValue, float64(s.Evicted), d.Name, "idle")
		ch <- prometheus.MustNewConstMetric(c.m.overflowReqs, prometheus.CounterValue, float64(s.Overflowed), d.Name)
		for i := range d.rules {
			if rs := &d.rules[i]; rs.Algorithm == algorithm.Concurrency {
				ch <- prometheus.MustNewConstMetric(c.m.slotsInUse, prometheus.GaugeValue, float64(d.slotsInUse(i)), d.Name, rs.Name)
			}
			if rs := &d.rules[i]; rs.Precision == algorithm.Fine {
				f := d.store.Fine(i)
				ch <- prometheus.MustNewConstMetric(c.m.fineLogs, prometheus.GaugeValue, float64(f.Logs), d.Name, rs.Name)
				ch <- prometheus.MustNewConstMetric(c.m.fineCapacity, prometheus.GaugeValue, float64(f.Capacity), d.Name, rs.Name)
				ch <- prometheus.MustNewConstMetric(c.m.fineFallback, prometheus.CounterValue, float64(f.Fallback), d.Name, rs.Name)
			}
		}
	}
}

// slotsInUse is what edge_concurrency_slots_in_use exports for rule i of
// d: the slots held by this node's requests, in its store, or with
// cluster.store redis as leases in Redis (cluster.Domain); 0 for a rule
// that is not a concurrency rule.
func (d *domain) slotsInUse(i int) int64 {
	if slots, ok := d.counter.(interface{ SlotsInUse(int) int64 }); ok {
		return slots.SlotsInUse(i)
	}
	return d.store.SlotsInUse(i)
}

// forget deletes the series of domains and rules that the new state st no
// longer has (or whose action changed), so that removed configuration does
// not linger in the exposition. Series of continuing rules keep counting.
func (m *metrics) forget(old, st *state) {
	for _, od := range old.domains {
		d := st.domain(od.Name)
		if d == nil {
			m.requests.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			m.decisions.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			m.planDecisions.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			m.upstream.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			m.originSeconds.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			m.originPanics.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			m.originBusy.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			m.blocked.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			m.queued.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			m.storeFallback.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			m.responseCostInvalid.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			m.sampled.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			m.misjudged.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			m.shedInFlight.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			m.shedRefused.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
			continue
		}
		if od.Respond == nil && d.Respond != nil {
			m.upstream.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
		}
		if d.APIKeys == nil {
			m.planDecisions.DeletePartialMatch(prometheus.Labels{"domain": od.Name})
		}
		for _, og := range od.groups {
			g := d.group(og.name)
			if g == nil {
				m.originPanics.DeleteLabelValues(od.Name, og.name)
			}
			for _, s := range og.origins.Servers() {
				// By name: a reload makes new Servers of the ones that stay.
				if g == nil || g.origins.Server(s.Name) == nil {
					m.originSeconds.DeleteLabelValues(od.Name, og.name, s.Name)
				}
			}
		}
		for _, or := range od.rules {
			r, ok := d.Rule(or.Name)
			if !ok {
				m.planDecisions.DeletePartialMatch(prometheus.Labels{"domain": od.Name, "rule": or.Name})
			} else {
				for _, pl := range or.Plans {
					if d.PlanIndex(pl.Name) < 0 {
						m.planDecisions.DeletePartialMatch(prometheus.Labels{"domain": od.Name, "rule": or.Name, "plan": pl.Name})
					}
				}
			}
			if !ok || r.Action != or.Action {
				m.decisions.DeletePartialMatch(prometheus.Labels{"domain": od.Name, "rule": or.Name, "action": or.Action.String()})
			}
			if !ok || r.ResponseCostHeader == "" {
				m.responseCostInvalid.DeleteLabelValues(od.Name, or.Name)
			}
			if !ok || !judged(r) || st.table.AccuracySample == 0 {
				m.sampled.DeleteLabelValues(od.Name, or.Name)
				m.misjudged.DeletePartialMatch(prometheus.Labels{"domain": od.Name, "rule": or.Name})
			}
		}
	}
}

// reloaded records a reload attempt.
func (m *metrics) reloaded(ok bool, at time.Time) {
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		m.lastReload.Set(float64(at.UnixNano()) / 1e9)
		m.reloadOK.Set(1)
		return
	}
	m.reloads.WithLabelValues("failure").Inc()
	m.reloadOK.Set(0)
}
