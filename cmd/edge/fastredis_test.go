package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/internal/redistest"
)

// redisDiffConfig is diffConfig's api domain, counted through a real
// redis-server: each edge names its own PoP, so that the two edges of a
// comparison count apart. The budget is long: under -race on a busy
// machine a round trip can take longer than the default 20ms, and the
// failure mode would decide for it.
const redisDiffConfig = `
origin: ORIGIN
max_keys: 1000
pop: POP
cluster: {store: redis, redis: {addresses: ["ADDR"]}, sync: SYNC, budget: 1s}
client_ip: {trusted_proxies: ["127.0.0.0/8"]}
domains:
  - name: api
    hosts: [api.example.com]
    rules:
      - {name: per-ip, limit: 2, period: 1h, key: [ip]}
      - {name: watch, limit: 1, period: 1h, key: [ip], action: log}
      - {name: per-token, limit: 3, period: 1h, key: ["header:X-Api-Key"], count_blocked: true}
      - {name: hidden, limit: 100, period: 1h, key: [host], headers: none}
  - name: one
    hosts: [one.example.com]
    rules:
      - {name: per-ip, limit: 2, period: 1h, key: [ip]}
  - name: www
    hosts: [www.example.com]
    rules:
      - {name: monthly, algorithm: quota, limit: 3, reset: monthly, key: [ip], headers: always}
      - name: custom
        limit: 1
        period: 1h
        key: [ip]
        match: {path_prefix: /custom}
        block_response: {status: 420, body: "slow down\n", content_type: text/plain}
`

// redisClockFields are the numbers of a response that Redis's clock sets
// in exact mode (each decision is made on it): how long to wait, and when
// a limit resets. The two edges of a comparison run apart in time, so
// these may differ by a second between them; everything else may not.
var redisClockFields = regexp.MustCompile(`(?i)(Retry-After: |X-RateLimit-Reset: |;t=|retry in |resets in |"retry_after":|retry_after=)[0-9][0-9a-zµ.]*`)

// roundTripTimes are the lines of the Redis round-trip histogram that
// depend on time: how long each took, and the round trips of the
// heartbeat and the flush, made on timers, and the errors, which under
// -race are those timers' heartbeats timing out. The counts of the
// requests' own round trips (decide, refund) stay; a request's failed
// round trip would show in its answer.
var roundTripTimes = regexp.MustCompile(`(?m)^(# (HELP|TYPE) edge_store_(round_trip_seconds|errors_total) |edge_store_round_trip_seconds_(bucket|sum)\{|edge_store_round_trip_seconds_count\{op="(heartbeat|flush)"\}|edge_store_errors_total\{).*\n`)

// TestFastPathDifferentialRedis is TestFastPathDifferential for edges that
// share their counters through Redis, in each sync mode: the fast path
// refuses at the wire what it can decide without a round trip (exact
// mode: the blocked-key cache; batched and share: every decision), and
// what the clients get, the metrics and the logs are the slow path's.
func TestFastPathDifferentialRedis(t *testing.T) {
	redis := redistest.Start(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "origin %s %s\n", r.Method, r.URL.Path)
	}))
	t.Cleanup(origin.Close)
	api, one := "api.example.com", "one.example.com"
	// fast: the fast path answers some requests in every mode. In exact
	// mode it can only where every rule that matches is refused by the
	// blocked-key cache (one's single rule; api's log rule and the rule
	// under its limit need a round trip for every request).
	cases := []diffCase{
		{name: "flood, one at a time", steps: repeat(get(one, "/a"), 8), wait: true, fast: true},
		{name: "flood, JSON", steps: repeat(get(one, "/a", "Accept: application/json"), 8), wait: true, fast: true},
		{name: "flood, pipelined", steps: []string{strings.Repeat(get(one, "/a"), 10)}},
		{name: "trusted proxy", steps: repeat(get(one, "/a", "X-Forwarded-For: 203.0.113.7"), 6), wait: true, fast: true},
		{name: "POST", steps: append(repeat(get(one, "/a"), 4), hostile.Req("POST /a HTTP/1.1", "Host: "+one, "Content-Length: 0")), wait: true, fast: true},
		{name: "several rules", steps: repeat(get(api, "/a"), 8), wait: true},
		{name: "counted when blocked", steps: repeat(get(api, "/a", "X-Api-Key: k1"), 6), wait: true},
		{name: "quota", steps: repeat(get("www.example.com", "/q"), 6), wait: true},
		{name: "custom block response", steps: repeat(get("www.example.com", "/custom"), 5), wait: true},
	}
	for _, sync := range []string{"exact", "batched", "share"} {
		for i, tc := range cases {
			t.Run(sync+"/"+tc.name, func(t *testing.T) {
				start := func(fast bool) *diffServer {
					cfg := strings.NewReplacer("ORIGIN", origin.URL, "ADDR", redis.Addr, "SYNC", sync,
						"POP", fmt.Sprintf("%s-%d-%v", sync, i, fast)).Replace(redisDiffConfig)
					if sync == "share" {
						cfg = strings.Replace(cfg, "store: redis, ", "store: redis, nodes: 0, ", 1)
					}
					return startConfig(t, cfg, fast)
				}
				fast, slow := start(true), start(false)
				got := exchange(t, fast, tc.steps, tc.wait, tc.halfClose)
				want := exchange(t, slow, tc.steps, tc.wait, tc.halfClose)
				if sync == "exact" {
					got = redisClockFields.ReplaceAllString(got, "${1}N")
					want = redisClockFields.ReplaceAllString(want, "${1}N")
				}
				if got != want {
					t.Errorf("fast path answered\n%s\nslow path\n%s", got, want)
				}
				if tc.fast && fast.answered.Load() == 0 {
					t.Errorf("the fast path answered nothing")
				}
				if tc.name == "flood, one at a time" {
					// In exact mode the first two, allowed, need Redis,
					// and the third is the refusal that fills the cache: the
					// fast path refuses the other five. Deciding on the
					// node, it forwards the first two and refuses six.
					want := map[string]int64{"exact": 5, "batched": 8, "share": 8}[sync]
					if got := fast.answered.Load(); got != want {
						t.Errorf("the fast path answered %d requests, want %d", got, want)
					}
				}
				if slow.answered.Load() != 0 {
					t.Errorf("fastpath false: %d requests answered by the fast path", slow.answered.Load())
				}
				g, w := metricsText(t, fast.reg), metricsText(t, slow.reg)
				g, w = roundTripTimes.ReplaceAllString(g, ""), roundTripTimes.ReplaceAllString(w, "")
				if g != w {
					t.Errorf("metrics differ:\nfast path\n%s\nslow path\n%s", g, w)
				}
				g, w = fast.logs.String(), slow.logs.String()
				if sync == "exact" {
					g, w = redisClockFields.ReplaceAllString(g, "${1}N"), redisClockFields.ReplaceAllString(w, "${1}N")
				}
				if g != w {
					t.Errorf("logs differ:\nfast path\n%s\nslow path\n%s", g, w)
				}
			})
		}
	}
}
