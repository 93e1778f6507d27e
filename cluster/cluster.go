// Package cluster shares rate-limit counters between the nodes of a PoP
// through Redis, so that a limit of 100 a minute stays 100 a minute for the
// whole PoP rather than 100 for each node behind the load balancer.
//
// A Client holds the connection to Redis, a circuit breaker in front of it,
// a heartbeat that registers the node so that every node knows how many its
// PoP has, and (in batched mode) the flusher. A Domain is one domain's rules
// as counted through a Client: the proxy asks it instead of the domain's
// window.Store. Two modes:
//
//   - exact: every decision is one atomic round trip, a Lua script that reads
//     both counters, judges on Redis's clock with the estimate the window
//     package uses, counts the request if the rule says so and sets the TTL.
//     Requests spread over several nodes can never together exceed a limit.
//     A key found blocked is remembered locally until its Retry-After and
//     answered without Redis (Cloudflare does the same with mitigations).
//   - batched: decisions are local, in the domain's window.Store; every batch
//     interval the node adds the counts it made to Redis in one pipelined
//     round trip and reads back the PoP-wide counts of the keys it touched
//     (window.Store.Merge). Redis traffic grows with active keys, not with
//     requests; the price is an overshoot of about rate × interval.
//
// No request waits for Redis longer than the budget. When Redis fails
// (errors or the budget exceeded, failThreshold times in a row) the circuit
// opens and requests are decided by the configured failure mode: "local"
// (node-local counters with each limit divided by the last known number of
// live nodes), "open" (allow) or "closed" (503). The circuit half-opens to
// let one probe through, and closes as soon as Redis answers; a Redis that
// restarted empty or lost its scripts is in use again within 2 s.
//
// Keys in Redis never use window.Key, which is a hash with a per-process
// seed: they are named from the bytes the proxy builds for a client (see
// Domain.Allow), identical on every node.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
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
	// what it was for ("decide", "refund", "flush", "heartbeat", "forget"),
	// how long it took and its error (nil on success). It must be fast and
	// safe for concurrent use.
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
	rdb     redis.UniversalClient
	br      breaker
	log     *slog.Logger
	observe func(op string, took time.Duration, err error)

	nodes    atomic.Int64 // live nodes at the last heartbeat; 0 until one succeeds
	nodesKey string
	// scriptsLoaded is cleared when Redis may have lost the scripts (it
	// came back after a failure, or answered NOSCRIPT); the heartbeat
	// goroutine then loads them again.
	scriptsLoaded atomic.Bool

	mu      sync.Mutex
	batches map[*batch]bool // batched mode: true once retired (flushed once more, then dropped)

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// New returns a Client for opts and starts its goroutines: the heartbeat
// and, in batched mode, the flusher. It does not wait for Redis: a Client
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
	c.rdb = newRedis(cfg)
	c.wg.Add(1)
	go c.heartbeats()
	if cfg.Sync == rules.SyncBatched {
		c.wg.Add(1)
		go c.flusher()
	}
	return c, nil
}

// newRedis makes the go-redis client with every deadline set explicitly:
// go-redis's defaults took 5 s against a black-holed Redis (5 s read
// timeout, 3 retries, 5 dial attempts), and a context deadline is obeyed
// only with ContextTimeoutEnabled. Requests pass a context bounded by the
// budget; the socket timeouts below are a backstop for the background work.
func newRedis(cfg rules.Cluster) redis.UniversalClient {
	const backstop = time.Second
	maint := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if cfg.RedisCluster {
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                    cfg.Addresses,
			Username:                 cfg.Username,
			Password:                 cfg.Password,
			Protocol:                 2,
			PoolSize:                 cfg.PoolSize,
			PoolTimeout:              cfg.Budget,
			DialTimeout:              cfg.DialTimeout,
			DialerRetries:            1,
			ReadTimeout:              backstop,
			WriteTimeout:             backstop,
			ContextTimeoutEnabled:    true,
			MaxRetries:               1,
			MinRetryBackoff:          -1,
			MaxRetryBackoff:          -1,
			DisableIdentity:          true,
			MaintNotificationsConfig: maint,
		})
	}
	return redis.NewClient(&redis.Options{
		Addr:                     cfg.Addresses[0],
		Username:                 cfg.Username,
		Password:                 cfg.Password,
		Protocol:                 2,
		PoolSize:                 cfg.PoolSize,
		PoolTimeout:              cfg.Budget,
		DialTimeout:              cfg.DialTimeout,
		DialerRetries:            1,
		ReadTimeout:              backstop,
		WriteTimeout:             backstop,
		ContextTimeoutEnabled:    true,
		MaxRetries:               1, // one retry, within the budget, on a connection a restart broke
		MinRetryBackoff:          -1,
		MaxRetryBackoff:          -1,
		DisableIdentity:          true, // no CLIENT SETINFO round trips per connection
		MaintNotificationsConfig: maint,
	})
}

func defaultNode() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// Close stops the Client's goroutines (flushing batched counts one last
// time), removes the node from the PoP's registry (best effort, within the
// budget) and closes the connections. It waits for its goroutines to end.
// Later calls return the first call's result.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		close(c.stop)
		c.wg.Wait()
		if c.br.State() == Closed {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Budget)
			_ = heartbeatScript.Run(ctx, c.rdb, []string{c.nodesKey}, c.node, c.nodeTTL().Milliseconds(), "0").Err()
			cancel()
		}
		c.closeErr = c.rdb.Close()
	})
	return c.closeErr
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

// loadScripts sends every script with SCRIPT LOAD, within the budget. In
// Redis Cluster mode go-redis sends it to every master.
func (c *Client) loadScripts() {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Budget)
	defer cancel()
	for _, s := range allScripts {
		if err := s.Load(ctx, c.rdb).Err(); err != nil {
			return // EVALSHA falls back on EVAL; the next heartbeat tries again
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
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Budget)
	defer cancel()
	n, err := heartbeatScript.Run(ctx, c.rdb, []string{c.nodesKey}, c.node, c.nodeTTL().Milliseconds(), "1").Int64()
	c.done("heartbeat", start, err)
	if err != nil {
		return
	}
	c.nodes.Store(n)
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
	var re redis.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case redis.HasErrorPrefix(err, "LOADING"):
		return "loading"
	case redis.HasErrorPrefix(err, "READONLY"):
		return "readonly"
	case redis.HasErrorPrefix(err, "OOM"):
		return "oom"
	case redis.HasErrorPrefix(err, "BUSY"):
		return "busy"
	case errors.As(err, &re):
		return "reply"
	case errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, redis.ErrClosed), errors.Is(err, net.ErrClosed):
		return "connection"
	}
	return "other"
}
