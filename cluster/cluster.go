// Package cluster shares rate-limit counters between the nodes of a PoP
// through Redis, so that a limit of 100 a minute stays 100 a minute for the
// whole PoP rather than 100 for each node behind the load balancer.
//
// A Client holds the connection to Redis, a circuit breaker in front of it,
// a heartbeat that registers the node so that every node knows how many its
// PoP has, and the flusher of batched counts. A Domain is one domain's rules
// as counted through a Client, a window.Counter that the proxy asks as it
// would the domain's own window.Store. Two modes:
//
//   - exact: every decision is one atomic round trip, a Lua script (one per
//     algorithm: sliding or fixed window, token or leaky bucket) that reads
//     the key's state, judges on Redis's clock in integers as the window
//     package does, counts the request's cost if the rule says so and sets
//     the TTL; the Decision is computed from the state it returns by the
//     window package's own code (window.Limit.JudgeCost, JudgeBucket).
//     Requests spread over several nodes can never together exceed a limit.
//     A key found blocked is remembered locally until its Retry-After and
//     answered without Redis (Cloudflare does the same with mitigations).
//     A call of the rate limit service sends all its decisions in one
//     pipelined round trip (many.go).
//   - batched, for sliding windows only (package rules refuses the other
//     algorithms): decisions are local, in the domain's window.Store; every
//     batch interval the node adds the counts it made to Redis in one
//     pipelined round trip and reads back the PoP-wide counts of the keys
//     it touched (window.Store.Merge). Redis traffic grows with active
//     keys, not with requests; the price is an overshoot of about rate ×
//     interval.
//
// With sync share a domain's rules are a Share instead: each node decides
// alone with its share of every limit, and Redis serves only to count the
// live nodes (the heartbeat), never on a request's path. A concurrency
// rule in exact mode holds each slot as a lease in Redis (lease.go).
//
// No request waits for Redis longer than the budget. When Redis fails
// (errors or the budget exceeded, failThreshold times in a row) the circuit
// opens and requests are decided by the configured failure mode: "local"
// (node-local counters with each limit divided by the last known number of
// live nodes), "open" (allow) or "closed" (503). The circuit half-opens to
// let one probe through, and closes as soon as Redis answers; a Redis that
// restarted empty or lost its scripts is in use again within 2 s. What the
// failure mode counted meanwhile is added to Redis once it is back (except
// requests whose own round trip failed, which Redis may have counted).
//
// Keys in Redis never use window.Key, which is a hash with a per-process
// seed: they are named from the bytes the proxy builds for a client (see
// window.ID), identical on every node.
package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/redis/rueidis"
)

// Options configure a Client.
type Options struct {
	// Config is the compiled cluster section; Config.Store must be
	// rules.StoreRedis.
	Config rules.Cluster
	// Pop names the PoP: the nodes that share counters. Required.
	Pop string
	// Node names this node in the PoP's registry; "" makes a name from the
	// host name, the process id and random bytes.
	Node string
	// Logger receives circuit changes; nil discards.
	Logger *slog.Logger
	// OnRoundTrip, if set, is called after every round trip to Redis with
	// what it was for ("decide", "refund", "charge", "flush", "heartbeat",
	// "forget", "peek", and for concurrency rules "release" and "renew"),
	// how long it took and its error (nil on success); a round trip may
	// carry many decisions or refunds (many.go). It must be fast and safe
	// for concurrent use.
	OnRoundTrip func(op string, took time.Duration, err error)
	// OnStateChange, if set, is called when the circuit changes state.
	OnStateChange func(from, to State)
}

// Client shares counters through Redis. Make it with New, share one per
// process (every Domain of every configuration uses it), and Close it when
// done. It is safe for concurrent use.
type Client struct {
	cfg     rules.Cluster
	pop     string
	node    string
	br      breaker
	log     *slog.Logger
	observe func(op string, took time.Duration, err error)

	nodes    atomic.Int64 // live nodes at the last heartbeat; 0 until one succeeds
	nodesKey string
	// scriptsLoaded is cleared when Redis may have lost the scripts (it
	// came back after a failure, or answered NOSCRIPT); the heartbeat
	// goroutine then loads them again.
	scriptsLoaded atomic.Bool

	leases leases // held by this node's requests in flight (lease.go)

	mu      sync.Mutex
	batches map[*batch]bool // true once retired (flushed once more, then dropped)
	shares  map[*Share]bool // with sync share: split again when the node count changes (share.go)

	// rdb is the rueidis client; nil only in Redis Cluster mode until a
	// node has answered (see connect).
	rdb atomic.Pointer[rueidis.Client]
	// dialDeferred makes dials fail at once while New makes the client, so
	// that New never waits for Redis (see newRedis).
	dialDeferred atomic.Bool

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New returns a Client for opts and starts its goroutines: the heartbeat
// and the flusher (in exact mode it has work only after an outage). It does not wait for Redis: a Client
// made while Redis is down serves by its failure mode until Redis answers.
func New(opts Options) (*Client, error) {
	cfg := opts.Config
	var errs []error
	if cfg.Store != rules.StoreRedis {
		errs = append(errs, fmt.Errorf("cluster: store must be redis, got %v", cfg.Store))
	}
	if len(cfg.Addresses) == 0 {
		errs = append(errs, errors.New("cluster: no Redis address"))
	}
	if opts.Pop == "" {
		errs = append(errs, errors.New("cluster: pop is required"))
	}
	if cfg.Budget <= 0 || cfg.BatchInterval <= 0 || cfg.HeartbeatInterval <= 0 || cfg.DialTimeout <= 0 || cfg.PoolSize < 1 {
		errs = append(errs, errors.New("cluster: durations and pool size must be positive (compile the config with rules.Compile)"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c := &Client{
		cfg:      cfg,
		pop:      opts.Pop,
		node:     opts.Node,
		log:      opts.Logger,
		observe:  opts.OnRoundTrip,
		nodesKey: "edge:" + opts.Pop + ":nodes",
		batches:  make(map[*batch]bool),
		stop:     make(chan struct{}),
	}
	if c.node == "" {
		c.node = defaultNode()
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.observe == nil {
		c.observe = func(string, time.Duration, error) {}
	}
	c.br.probeFor = 2*cfg.Budget + 10*time.Millisecond
	c.br.onChange = func(from, to State) {
		switch to {
		case Open:
			c.log.Warn("redis circuit open: deciding without redis", "from", from.String(),
				"on_store_failure", cfg.OnStoreFailure.String())
		case Closed:
			c.log.Info("redis circuit closed: sharing counters again")
		}
		if opts.OnStateChange != nil {
			opts.OnStateChange(from, to)
		}
	}
	c.newRedis()
	c.wg.Add(1)
	go c.heartbeats()
	c.wg.Add(1)
	go c.flusher()
	c.leases.wake = make(chan struct{}, 1)
	c.wg.Add(1)
	go c.renewer()
	return c, nil
}

// errNotConnected is the error of a round trip that found no client: in
// Redis Cluster mode rueidis can make its client only once a node answers.
var errNotConnected = errors.New("cluster: not connected to redis")

// redisOption is the rueidis configuration, with every deadline explicit.
// rueidis was chosen over go-redis by bench/redisclient (docs/cluster.md,
// "Choosing the Redis client"): it pipelines concurrent commands on a few
// shared connections, which made 1.54 to 1.95 times the exact-mode
// decisions per second at 64 goroutines for half the CPU per decision.
//
//   - Requests pass a context bounded by the budget, and rueidis obeys a
//     context deadline on every command, the dial and handshake of a new
//     connection included (the dial timeout bounds them too).
//   - DisableRetry: go-redis was allowed one retry; rueidis retries only
//     read-only commands (none of edge's scripts is), with a backoff, so it
//     is switched off: a failed round trip is one failure for the breaker.
//   - RESP2 and no client-side cache (which needs RESP3 and would send
//     CLIENT TRACKING on each connection), no CLIENT SETINFO.
//   - ConnWriteTimeout is a backstop for the background work: a connection
//     whose replies take longer is closed (rueidis also PINGs idle ones).
//   - PoolSize bounds rueidis's dedicated connections, which carry flushes
//     of more than 2000 commands; everything else is pipelined on the
//     shared ones (up to four per server, one per node in Redis Cluster
//     mode).
//   - A single server is used as such (ForceSingleClient); in Redis Cluster
//     mode the seed addresses are tried in random order.
func (c *Client) redisOption() rueidis.ClientOption {
	const backstop = time.Second
	cfg := c.cfg
	return rueidis.ClientOption{
		InitAddress:       slices.Clone(cfg.Addresses), // ShuffleInit shuffles it in place
		Username:          cfg.Username,
		Password:          cfg.Password,
		ForceSingleClient: !cfg.RedisCluster,
		ShuffleInit:       cfg.RedisCluster,
		AlwaysRESP2:       true,
		DisableCache:      true,
		ClientSetInfo:     rueidis.DisableClientSetInfo,
		DisableRetry:      true,
		BlockingPoolSize:  cfg.PoolSize,
		Dialer:            net.Dialer{Timeout: cfg.DialTimeout},
		DialCtxFn:         c.dial,
		ConnWriteTimeout:  backstop,
	}
}

// newRedis makes the client. rueidis dials while it makes a client, which
// New must not wait for: for a single server the dial is deferred (it fails
// at once, and rueidis dials again on the first command, within that
// command's deadline). A Redis Cluster client cannot be made before a node
// has told it the slots; it is made by the heartbeat (connect), and until
// then round trips fail with errNotConnected.
func (c *Client) newRedis() {
	if c.cfg.RedisCluster {
		return
	}
	c.dialDeferred.Store(true)
	rdb, _ := rueidis.NewClient(c.redisOption()) // with ForceSingleClient, a client even when the dial fails
	c.dialDeferred.Store(false)
	if rdb != nil {
		c.rdb.Store(&rdb)
	}
}

// connect makes the Redis Cluster client if there is none yet. It runs on
// the heartbeat goroutine.
func (c *Client) connect() error {
	if c.rdb.Load() != nil {
		return nil
	}
	rdb, err := rueidis.NewClient(c.redisOption())
	if err != nil {
		return err
	}
	c.rdb.Store(&rdb)
	return nil
}

// dial connects to a Redis server for rueidis, which bounds ctx by the dial
// timeout.
func (c *Client) dial(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	if c.dialDeferred.Load() {
		return nil, errNotConnected
	}
	select {
	case <-c.stop:
		return nil, rueidis.ErrClosing
	default:
	}
	return d.DialContext(ctx, "tcp", addr)
}

// redis returns the client, nil if there is none yet.
func (c *Client) redis() rueidis.Client {
	if p := c.rdb.Load(); p != nil {
		return *p
	}
	return nil
}

// exec runs s with EVALSHA, and EVAL if Redis answers NOSCRIPT.
func (c *Client) exec(ctx context.Context, s *script, keys, args []string) rueidis.RedisResult {
	rdb := c.redis()
	if rdb == nil {
		return rueidis.NewErrorResult(errNotConnected)
	}
	return s.lua.Exec(ctx, rdb, keys, args)
}

// execInts runs s as exec does and returns its reply, which must be a list
// of want integers; what names the script in the error otherwise.
func (c *Client) execInts(ctx context.Context, s *script, keys, args []string, want int, what string) ([]int64, error) {
	vals, err := c.exec(ctx, s, keys, args).AsIntSlice()
	if err == nil {
		err = wantInts(vals, want, what)
	}
	return vals, err
}

// wantInts checks that vals, the reply of the script what names, has want
// integers.
func wantInts(vals []int64, want int, what string) error {
	if len(vals) != want {
		return fmt.Errorf("cluster: %s script returned %d values, want %d", what, len(vals), want)
	}
	return nil
}

// pipeline sends n commands that run scripts, built by cmd (EVALSHA, or
// with eval EVAL), in one pipelined round trip (one per node in Redis
// Cluster mode, where rueidis sends each command to its slot's node), and
// returns their results in order. Those Redis answers NOSCRIPT (it
// restarted, or its scripts were flushed) are sent again with EVAL, which
// caches the script again: a second round trip, after an outage only.
func (c *Client) pipeline(ctx context.Context, n int, cmd func(rdb rueidis.Client, i int, eval bool) rueidis.Completed) []rueidis.RedisResult {
	rdb := c.redis()
	if rdb == nil {
		res := make([]rueidis.RedisResult, n)
		for i := range res {
			res[i] = rueidis.NewErrorResult(errNotConnected)
		}
		return res
	}
	cmds := make(rueidis.Commands, n)
	for i := range cmds {
		cmds[i] = cmd(rdb, i, false)
	}
	res := rdb.DoMulti(ctx, cmds...)
	if anyNoScript(res) {
		c.scriptsLoaded.Store(false)
		var again []int
		cmds = cmds[:0]
		for i, r := range res {
			if isNoScript(r.Error()) {
				again = append(again, i)
				cmds = append(cmds, cmd(rdb, i, true))
			}
		}
		for j, r := range rdb.DoMulti(ctx, cmds...) {
			res[again[j]] = r
		}
	}
	return res
}

// scriptCommand runs s on key with args: EVALSHA, or with eval EVAL.
func scriptCommand(rdb rueidis.Client, s *script, key string, args []string, eval bool) rueidis.Completed {
	if eval {
		return rdb.B().Eval().Script(s.src).Numkeys(1).Key(key).Arg(args...).Build()
	}
	return rdb.B().Evalsha().Sha1(s.sha).Numkeys(1).Key(key).Arg(args...).Build()
}

// firstError is the first error of res, nil if none.
func firstError(res []rueidis.RedisResult) error {
	for _, r := range res {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

func defaultNode() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// Close stops the Client's goroutines (flushing batched counts one last
// time), removes the node from the PoP's registry (best effort, within the
// budget) and closes the connections. It waits for its goroutines to end
// (in Redis Cluster mode, while the first connection is being made, up to
// the dial timeout). It returns nil; later calls do nothing.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		close(c.stop)
		c.wg.Wait()
		rdb := c.redis()
		if rdb == nil {
			return
		}
		if c.br.State() == Closed {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Budget)
			_ = c.exec(ctx, heartbeatScript, []string{c.nodesKey}, c.heartbeatArgs("0")).Error()
			cancel()
		}
		rdb.Close()
	})
	return nil
}

// heartbeatArgs is heartbeatScript's ARGV: "1" registers the node, "0"
// removes it.
func (c *Client) heartbeatArgs(register string) []string {
	return []string{c.node, strconv.FormatInt(c.nodeTTL().Milliseconds(), 10), register}
}

// Node returns the node's name in the PoP's registry.
func (c *Client) Node() string { return c.node }

// Nodes returns the number of live nodes in the PoP at the last heartbeat
// Redis answered, at least 1 (a node that has never reached Redis counts
// itself alone).
func (c *Client) Nodes() int { return int(max(c.nodes.Load(), 1)) }

// State returns the circuit's state.
func (c *Client) State() State { return c.br.State() }

// Config returns the settings the Client runs with.
func (c *Client) Config() rules.Cluster { return c.cfg }

// nodeTTL is how long a node stays registered after its last heartbeat.
func (c *Client) nodeTTL() time.Duration { return 3 * c.cfg.HeartbeatInterval }

// done records the outcome of a round trip that began at start.
func (c *Client) done(op string, start time.Time, err error) {
	now := time.Now()
	c.observe(op, now.Sub(start), err)
	if err != nil {
		c.br.failure(now)
		return
	}
	if c.br.success() {
		// Back after a failure: Redis may have restarted without our
		// scripts. Until the heartbeat loads them again, EVALSHA falls
		// back on EVAL.
		c.scriptsLoaded.Store(false)
	}
}

// loadScripts sends every script with SCRIPT LOAD, within the budget, to
// every server (in Redis Cluster mode, every master the client knows).
func (c *Client) loadScripts() {
	rdb := c.redis()
	if rdb == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Budget)
	defer cancel()
	for _, n := range rdb.Nodes() {
		for _, s := range allScripts {
			if err := n.Do(ctx, n.B().ScriptLoad().Script(s.src).Build()).Error(); err != nil {
				return // EVALSHA falls back on EVAL; the next heartbeat tries again
			}
		}
	}
	c.scriptsLoaded.Store(true)
}

// heartbeats registers the node every heartbeat interval and learns how
// many live nodes the PoP has. While the circuit is open it wakes when a
// probe may start, so that a Redis that comes back is noticed without any
// traffic.
func (c *Client) heartbeats() {
	defer c.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		c.heartbeat()
		next := c.cfg.HeartbeatInterval
		if c.br.State() != Closed {
			next = min(next, max(c.br.untilProbe(time.Now()), 10*time.Millisecond))
		}
		t.Reset(next)
	}
}

func (c *Client) heartbeat() {
	start := time.Now()
	if !c.br.allow(start) {
		return
	}
	if err := c.connect(); err != nil {
		c.done("heartbeat", start, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Budget)
	defer cancel()
	n, err := c.exec(ctx, heartbeatScript, []string{c.nodesKey}, c.heartbeatArgs("1")).AsInt64()
	c.done("heartbeat", start, err)
	if err != nil {
		return
	}
	if old := c.nodes.Swap(n); old != n {
		c.resplit(int(max(n, 1)))
	}
	if !c.scriptsLoaded.Load() {
		c.loadScripts()
	}
}

// ErrorReason classifies a Redis error for the store errors metric:
// "timeout" (the budget or a socket deadline ran out), "connection"
// (refused, reset, closed), "loading", "readonly", "oom", "busy" (Redis's
// own error replies while it loads a dump, after a failover to a replica,
// over maxmemory, running a slow script), "reply" (any other error reply) or
// "other".
func ErrorReason(err error) string {
	var ne net.Error
	var re *rueidis.RedisError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &re):
		msg := strings.TrimPrefix(re.Error(), "ERR ") // as go-redis did: KVRocks adds it
		for _, p := range [...]string{"LOADING", "READONLY", "OOM", "BUSY"} {
			if strings.HasPrefix(msg, p) {
				return strings.ToLower(p)
			}
		}
		return "reply"
	case errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, rueidis.ErrClosing), errors.Is(err, net.ErrClosed), errors.Is(err, errNotConnected):
		return "connection"
	}
	return "other"
}
