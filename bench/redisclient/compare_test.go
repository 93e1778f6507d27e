// Package redisclient compares the two Go Redis clients edge could share its
// counters through, go-redis v9 (what package cluster uses) and rueidis
// (which pipelines concurrent commands on a few connections automatically),
// on the round trips edge actually makes, against a real redis-server that
// the benchmark starts on a free loopback port:
//
//   - exact: one EVALSHA of edge's decide script per decision (exact mode,
//     cluster.Domain's Decide), keys and arguments shaped as edge sends them;
//   - flush: one pipeline of 100 EVALSHA of edge's flush script, each adding
//     a key's count (INCRBY + PEXPIRE inside the script) and returning the
//     PoP-wide counts of both periods (batched mode, cluster.flushChunk);
//   - flush-cmds: the same flush spelled as plain commands, one pipeline of
//     100 × (INCRBY, PEXPIRE, GET of the previous period), for a pipeline
//     whose cost is in the client and the protocol rather than in Lua.
//
// Each runs with 1 and with 64 goroutines. Every sub-benchmark reports
// ops/s (an op is one decision, or one flush of 100 keys), the 99th
// percentile of one op's latency in µs (p99-µs) and allocations per op.
//
// It lives in the bench module so that edge does not depend on rueidis.
// Run it with bench/redisclient.sh, which also prints the ratios.
package redisclient

import (
	"bufio"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/edgerate/edge/cluster"
	"io"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/redis/rueidis"
)

// decideLua and flushLua are the scripts edge runs (cluster/scripts.go),
// so the clients are compared on edge's own workload.
var decideLua, flushLua = cluster.ScriptSources()

const (
	// clients is how many distinct clients (key prefixes) the workloads
	// cycle through.
	clients = 10_000
	// flushKeys is the number of keys one flush pipeline carries.
	flushKeys = 100
	// periodSeconds is the rule's period; limit is never reached, so that
	// every decision is an allowed, counted one (GET, GET, INCR, PEXPIRE in
	// the script), as in the proxy's BenchmarkServeHTTPShared.
	periodSeconds = 60
	limit         = 1_000_000_000
	// opTimeout bounds every op with a context deadline, as edge bounds
	// each request by its budget (cluster.Call.context) and each flush by
	// the batch interval: both clients then take their deadline-handling
	// path. It is far above edge's 20 ms default so that a noisy machine
	// produces no timeouts, which would be latencies the client never had.
	opTimeout = time.Second
	// poolSize is go-redis's PoolSize (edge's default is 32; 64 so that
	// the 64-goroutine runs never wait for a connection) and rueidis's
	// BlockingPoolSize (used only for blocking commands and pipelines over
	// 2000 commands, so not by these workloads).
	poolSize = 64
)

// concurrencies are the numbers of goroutines issuing ops at once.
var concurrencies = []int{1, 64}

// client is one contestant: the workloads' round trips as edge would issue them.
type client interface {
	decide(ctx context.Context, prefix string) error
	flush(ctx context.Context, prefixes []string, start int64, deltas []int64) error
	flushCmds(ctx context.Context, prefixes []string, start int64, deltas []int64) error
	Close()
}

// goRedis issues the workloads as package cluster does today.
type goRedis struct {
	rdb      *redis.Client
	decideSc *redis.Script
	flushSc  *redis.Script
	args     []any // a rule's ARGV, as cluster.Domain builds it
}

// newGoRedis configures go-redis as cluster.newRedis does, with PoolSize
// poolSize and every socket deadline at opTimeout.
func newGoRedis(addr string) *goRedis {
	return &goRedis{
		rdb: redis.NewClient(&redis.Options{
			Addr:                     addr,
			Protocol:                 2,
			PoolSize:                 poolSize,
			PoolTimeout:              opTimeout,
			DialTimeout:              time.Second,
			DialerRetries:            1,
			ReadTimeout:              opTimeout,
			WriteTimeout:             opTimeout,
			ContextTimeoutEnabled:    true,
			MaxRetries:               1,
			MinRetryBackoff:          -1,
			MaxRetryBackoff:          -1,
			DisableIdentity:          true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		}),
		decideSc: redis.NewScript(decideLua),
		flushSc:  redis.NewScript(flushLua),
		args:     ruleArgs(),
	}
}

func (g *goRedis) Close() { _ = g.rdb.Close() }

// decide is the round trip of a cluster.Domain's Decide: Script.Run (EVALSHA, EVAL on
// NOSCRIPT) and Int64Slice.
func (g *goRedis) decide(ctx context.Context, prefix string) error {
	vals, err := g.decideSc.Run(ctx, g.rdb, []string{prefix}, g.args...).Int64Slice()
	if err == nil && len(vals) != 7 {
		err = fmt.Errorf("decide script returned %d values, want 7", len(vals))
	}
	return err
}

// flush is cluster.flushChunk's round trip: a Pipeline of EvalSha, Exec,
// then Int64Slice of each reply.
func (g *goRedis) flush(ctx context.Context, prefixes []string, start int64, deltas []int64) error {
	cmds := make([]*redis.Cmd, len(prefixes))
	pipe := g.rdb.Pipeline()
	for i, p := range prefixes {
		cmds[i] = g.flushSc.EvalSha(ctx, pipe, []string{p}, start, periodSeconds, deltas[i])
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for _, c := range cmds {
		if v, err := c.Int64Slice(); err != nil || len(v) != 2 {
			return fmt.Errorf("flush reply %v, %v", v, err)
		}
	}
	return nil
}

func (g *goRedis) flushCmds(ctx context.Context, prefixes []string, start int64, deltas []int64) error {
	incr := make([]*redis.IntCmd, len(prefixes))
	prev := make([]*redis.StringCmd, len(prefixes))
	pipe := g.rdb.Pipeline()
	for i, p := range prefixes {
		ck, pk := periodKey(p, start), periodKey(p, start-periodSeconds)
		incr[i] = pipe.IncrBy(ctx, ck, deltas[i])
		pipe.PExpire(ctx, ck, 2*periodSeconds*time.Second)
		prev[i] = pipe.Get(ctx, pk)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for i := range prefixes {
		if _, err := incr[i].Result(); err != nil {
			return err
		}
		if _, err := prev[i].Int64(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}

// rueidisClient issues the same round trips with rueidis.
type rueidisClient struct {
	c        rueidis.Client
	decideSc *rueidis.Lua
	flushSHA string // the flush script's SHA-1, for EVALSHA in a pipeline
	args     []string
}

// newRueidis configures rueidis with its default automatic pipelining
// (2^2 = 4 multiplexed connections), RESP2 and no CLIENT SETINFO as edge's
// go-redis, no client-side cache (edge has nothing to cache), and the same
// dial timeout and socket backstop.
func newRueidis(addr string) (*rueidisClient, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{addr},
		ForceSingleClient: true,
		AlwaysRESP2:       true,
		DisableCache:      true,
		ClientSetInfo:     rueidis.DisableClientSetInfo,
		BlockingPoolSize:  poolSize,
		Dialer:            net.Dialer{Timeout: time.Second},
		ConnWriteTimeout:  opTimeout,
	})
	if err != nil {
		return nil, err
	}
	return &rueidisClient{
		c:        c,
		decideSc: rueidis.NewLuaScript(decideLua),
		flushSHA: sha1Hex(flushLua),
		args:     ruleArgStrings(),
	}, nil
}

func (r *rueidisClient) Close() { r.c.Close() }

// decide uses Lua.Exec: EVALSHA, EVAL on NOSCRIPT, as go-redis's Script.Run.
func (r *rueidisClient) decide(ctx context.Context, prefix string) error {
	vals, err := r.decideSc.Exec(ctx, r.c, []string{prefix}, r.args).AsIntSlice()
	if err == nil && len(vals) != 7 {
		err = fmt.Errorf("decide script returned %d values, want 7", len(vals))
	}
	return err
}

// flush sends the EVALSHA commands with DoMulti, rueidis's pipeline
// (Lua.ExecMulti would SCRIPT LOAD on every call).
func (r *rueidisClient) flush(ctx context.Context, prefixes []string, start int64, deltas []int64) error {
	s, per := strconv.FormatInt(start, 10), strconv.Itoa(periodSeconds)
	cmds := make(rueidis.Commands, len(prefixes))
	for i, p := range prefixes {
		cmds[i] = r.c.B().Evalsha().Sha1(r.flushSHA).Numkeys(1).Key(p).
			Arg(s, per, strconv.FormatInt(deltas[i], 10)).Build()
	}
	for _, res := range r.c.DoMulti(ctx, cmds...) {
		if v, err := res.AsIntSlice(); err != nil || len(v) != 2 {
			return fmt.Errorf("flush reply %v, %v", v, err)
		}
	}
	return nil
}

func (r *rueidisClient) flushCmds(ctx context.Context, prefixes []string, start int64, deltas []int64) error {
	cmds := make(rueidis.Commands, 0, 3*len(prefixes))
	for i, p := range prefixes {
		ck, pk := periodKey(p, start), periodKey(p, start-periodSeconds)
		cmds = append(cmds,
			r.c.B().Incrby().Key(ck).Increment(deltas[i]).Build(),
			r.c.B().Pexpire().Key(ck).Milliseconds(2*periodSeconds*1000).Build(),
			r.c.B().Get().Key(pk).Build())
	}
	res := r.c.DoMulti(ctx, cmds...)
	for i := range prefixes {
		if _, err := res[3*i].AsInt64(); err != nil {
			return err
		}
		if err := res[3*i+1].Error(); err != nil {
			return err
		}
		if _, err := res[3*i+2].AsInt64(); err != nil && !rueidis.IsRedisNil(err) {
			return err
		}
	}
	return nil
}

// ruleArgs is a rule's ARGV as cluster.Domain builds it: limit, period (µs),
// mitigation (µs; none), count_blocked.
func ruleArgs() []any {
	var out []any
	for _, a := range ruleArgStrings() {
		out = append(out, a)
	}
	return out
}

func ruleArgStrings() []string {
	return []string{
		strconv.FormatInt(limit, 10),
		strconv.FormatInt(int64(periodSeconds*time.Second/time.Microsecond), 10),
		"0",
		"0",
	}
}

// prefixes names n clients under one rule as cluster's domainRule.prefix
// does: "edge:<pop>:<domain>:<rule>:<period>s:" and, as a Redis Cluster hash
// tag, the first 16 bytes of SHA-256 over the rule's key spelling, a zero
// byte and the client's key bytes, in hex.
func prefixes(n int) []string {
	const base = "edge:bench:api.example.com:per-ip:60s:"
	out := make([]string, n)
	for i := range out {
		b := append([]byte("ip"), 0)
		b = fmt.Appendf(b, "2001:db8::%x", i)
		sum := sha256.Sum256(b)
		out[i] = base + "{" + hex.EncodeToString(sum[:16]) + "}"
	}
	return out
}

// periodKey is the counter of the period starting at start (Unix s), as the
// scripts name it.
func periodKey(prefix string, start int64) string {
	return prefix + ":" + strconv.FormatInt(start, 10)
}

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// server is a redis-server started for the benchmark. The bench module
// cannot import edge's internal/redistest (internal packages are visible
// only inside their own module), so this is a small copy of its starter.
type server struct {
	addr string
	cmd  *exec.Cmd
}

// startServer starts redis-server on a free loopback port without
// persistence, waits until it answers PING and kills it by its PID when b
// ends. Without redis-server the benchmark is skipped.
func startServer(b *testing.B) *server {
	b.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		b.Skip("redis-server not installed (apt-get install redis-server)")
	}
	// redis-server must be told its port (it cannot be handed a listener,
	// and port 0 turns its TCP listener off): a port free a moment ago.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatalf("finding a free port: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &server{addr: "127.0.0.1:" + strconv.Itoa(port)}
	s.cmd = exec.Command(path, "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--bind", "127.0.0.1", "--daemonize", "no", "--loglevel", "warning")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		b.Fatalf("starting redis-server: %v", err)
	}
	b.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	})
	for deadline := time.Now().Add(5 * time.Second); !s.ping(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("redis-server on %s did not answer within 5s", s.addr)
		}
	}
	return s
}

func (s *server) ping() bool {
	c, err := net.DialTimeout("tcp", s.addr, 100*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := fmt.Fprint(c, "PING\r\n"); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "+PONG\r\n"
}

// cpu returns the CPU time redis-server's main process has used (INFO cpu:
// used_cpu_sys + used_cpu_user, which Redis reads with getrusage).
func (s *server) cpu() (time.Duration, error) {
	c, err := net.DialTimeout("tcp", s.addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprint(c, "INFO cpu\r\n"); err != nil {
		return 0, err
	}
	rd := bufio.NewReader(c)
	head, err := rd.ReadString('\n')
	if err != nil || len(head) < 4 || head[0] != '$' {
		return 0, fmt.Errorf("INFO cpu: reply %q, %v", head, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: reply %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(rd, body); err != nil {
		return 0, err
	}
	var total float64
	for line := range strings.Lines(string(body)) {
		name, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu: %q", line)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// processCPU returns the CPU time (user + system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// workload is one kind of op; i numbers the op, so that consecutive ops
// touch different clients.
type workload struct {
	name string
	op   func(ctx context.Context, c client, i int) error
}

func workloads(names []string) []workload {
	deltas := make([]int64, flushKeys)
	for i := range deltas {
		deltas[i] = int64(1 + i%5)
	}
	// flushed returns the flushKeys prefixes op i flushes, and the current
	// period's start.
	flushed := func(i int) ([]string, int64) {
		j := (i * flushKeys) % (len(names) - flushKeys + 1)
		now := time.Now().Unix()
		return names[j : j+flushKeys], now - now%periodSeconds
	}
	return []workload{
		{"exact", func(ctx context.Context, c client, i int) error {
			return c.decide(ctx, names[i%len(names)])
		}},
		{"flush", func(ctx context.Context, c client, i int) error {
			p, start := flushed(i)
			return c.flush(ctx, p, start, deltas)
		}},
		{"flush-cmds", func(ctx context.Context, c client, i int) error {
			p, start := flushed(i)
			return c.flushCmds(ctx, p, start, deltas)
		}},
	}
}

// BenchmarkCompareRedisClient runs each workload at each concurrency with
// go-redis and then rueidis (back to back, so that both see the same
// neighbours on a shared machine), against one redis-server.
//
// Names: BenchmarkCompareRedisClient/<workload>/c<goroutines>/<client>.
func BenchmarkCompareRedisClient(b *testing.B) {
	srv := startServer(b)
	g := newGoRedis(srv.addr)
	defer g.Close()
	r, err := newRueidis(srv.addr)
	if err != nil {
		b.Fatalf("rueidis: %v", err)
	}
	defer r.Close()
	// Loaded once, as edge's heartbeat does: EVALSHA then finds them.
	ctx := context.Background()
	for _, s := range []string{decideLua, flushLua} {
		if err := g.rdb.ScriptLoad(ctx, s).Err(); err != nil {
			b.Fatalf("SCRIPT LOAD: %v", err)
		}
	}
	contestants := []struct {
		name string
		c    client
	}{{"go-redis", g}, {"rueidis", r}}
	for _, w := range workloads(prefixes(clients)) {
		for _, conc := range concurrencies {
			for _, ct := range contestants {
				b.Run(fmt.Sprintf("%s/c%d/%s", w.name, conc, ct.name), func(b *testing.B) {
					run(b, srv, conc, ct.c, w)
				})
			}
		}
	}
}

// run issues b.N ops of w with c from exactly conc goroutines, which take
// op numbers from a shared counter, and reports ops/s, the 99th percentile
// latency, and the CPU time per op of this process (cpu-µs/op: the client,
// plus the benchmark's own small bookkeeping) and of redis-server
// (redis-cpu-µs/op). On a machine shared with other work the CPU figures
// move far less than the wall-clock ones. (RunParallel starts parallelism ×
// GOMAXPROCS goroutines, which cannot be 1 and is 64 only where GOMAXPROCS
// divides 64.)
func run(b *testing.B, srv *server, conc int, c client, w workload) {
	// Warm up: connections dialled, pools filled, scripts cached.
	warm := conc * 8
	var wg sync.WaitGroup
	for g := range conc {
		wg.Go(func() {
			for i := g; i < warm; i += conc {
				ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
				err := w.op(ctx, c, i)
				cancel()
				if err != nil {
					b.Errorf("warm-up: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}

	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var failed atomic.Int64
	var firstErr atomic.Pointer[error]
	start := make(chan struct{})
	for range conc {
		wg.Go(func() {
			<-start
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
				err := w.op(ctx, c, i)
				cancel()
				lat[i] = time.Since(t0)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	redis0, err := srv.cpu()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	close(start)
	wg.Wait()
	cpu := processCPU() - cpu0
	b.StopTimer()
	redis1, err := srv.cpu()
	if err != nil {
		b.Fatal(err)
	}
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d ops failed, the first: %v", n, b.N, *firstErr.Load())
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(float64(percentile(lat, 0.99))/float64(time.Microsecond), "p99-µs")
	b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(redis1-redis0)/float64(time.Microsecond)/float64(b.N), "redis-cpu-µs/op")
}

// percentile returns the q-quantile of d (nearest rank); it sorts d.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	k := int(float64(len(d))*q+0.999999) - 1
	return d[min(max(k, 0), len(d)-1)]
}
