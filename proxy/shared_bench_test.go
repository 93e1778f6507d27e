package proxy

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/redis/rueidis"
)

// BenchmarkServeHTTPShared measures requests through the real proxy (a
// static response, as BenchmarkServeHTTP) with counters local, batched
// through Redis, and exact through Redis, on 8 goroutines per core and
// 1024 distinct clients. Run the three in one go for their ratios:
//
//	go test -run='^$' -bench=ServeHTTPShared -benchmem ./proxy/
func BenchmarkServeHTTPShared(b *testing.B) {
	srv := redistest.Start(b)
	for _, mode := range []string{"local", "batched", "exact"} {
		b.Run(mode, func(b *testing.B) {
			cfg := sharedConfig(srv.Addr, "batched", "local", rules.RuleConfig{Name: "per-ip", Limit: 1_000_000_000, Period: time.Minute})
			cfg.Cluster.Budget = 250 * time.Millisecond // measure Redis, not fallbacks
			switch mode {
			case "local":
				cfg.Cluster = rules.ClusterConfig{}
			case "exact":
				cfg.Cluster.Sync = "exact"
			}
			table, err := rules.Compile(cfg)
			if err != nil {
				b.Fatal(err)
			}
			p, err := New(Options{Table: table})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			if p.cluster != nil {
				waitScripts(b, p)
			}
			reqs := make([]*http.Request, 1024)
			for i := range reqs {
				reqs[i], _ = http.NewRequest("GET", "http://site.test/", nil)
				reqs[i].RemoteAddr = "10.1." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":40000"
			}
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				w := &nopWriter{h: make(http.Header)}
				i := 0
				for pb.Next() {
					clear(w.h)
					p.ServeHTTP(w, reqs[i%len(reqs)])
					i++
				}
				if i > 0 && w.status != 200 {
					b.Errorf("status %d", w.status)
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
			if p.cluster != nil {
				if n := fallbacks(p); n != 0 {
					b.Errorf("%d requests decided without redis", n)
				}
			}
		})
	}
}

// commandCalls returns from INFO commandstats how many commands clients
// sent Redis (EVALSHA, EVAL, SCRIPT and the rest, INFO excluded) and how
// many commands ran in all, those the scripts called included.
func commandCalls(t testing.TB, c rueidis.Client) (sent, all int) {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	inScripts := map[string]bool{"get": true, "set": true, "incr": true, "incrby": true, "decr": true,
		"pexpire": true, "del": true, "time": true, "zadd": true, "zrem": true, "zremrangebyscore": true, "zcard": true}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		name = strings.TrimPrefix(name, "cmdstat_")
		if !ok || name == "info" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.Atoi(calls)
		all += n
		if !inScripts[name] {
			sent += n
		}
	}
	return sent, all
}

// TestBatchedCommandsPerRequest measures the Redis commands a batched node
// sends per request at two request rates, over the same 50 active clients
// (INFO commandstats deltas): a flush costs one command per key it
// touched, however many requests the key sent, so the cost per request
// falls as the rate rises.
func TestBatchedCommandsPerRequest(t *testing.T) {
	srv := redistest.Start(t)
	ps := newNodes(t, 1, sharedConfig(srv.Addr, "batched", "local", rules.RuleConfig{Name: "per-ip", Limit: 1_000_000_000, Period: time.Minute}), true)
	rdb := srv.Client()
	perRequest := func(rate int) float64 {
		sent0, all0 := commandCalls(t, rdb)
		const ticks = 100 // 10 ms each: one second
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		sent := 0
		for range ticks {
			<-tick.C
			for range rate / ticks {
				hit(ps[0], "10.2.0."+strconv.Itoa(sent%50))
				sent++
			}
		}
		// The next flush to end sends what the last requests counted (or,
		// if one was under way, all but the last tick's: a few commands in
		// thousands, in either rate's favour).
		flushed := roundTrips(t, ps[0], "flush")
		wait.For(t, 2*time.Second, "the last flush", func() bool { return roundTrips(t, ps[0], "flush") > flushed })
		sent1, all1 := commandCalls(t, rdb)
		got := float64(sent1-sent0) / float64(sent)
		t.Logf("batched, 50 clients, %d requests/s: %.4f commands sent to redis per request (%.4f run, with those inside scripts)",
			rate, got, float64(all1-all0)/float64(sent))
		return got
	}
	low, high := perRequest(500), perRequest(5000)
	if high >= low {
		t.Errorf("commands per request: %.4f at 500/s, %.4f at 5000/s; want fewer at the higher rate", low, high)
	}
}
