package cluster

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
	"github.com/redis/rueidis"
)

// TestRedisClusterMode runs both modes against a real Redis Cluster of
// three masters: decisions of clients whose keys live on different nodes
// are exact across edge nodes, the heartbeat counts nodes, a batched flush
// of keys on every master goes out in one DoMulti and merges back, and
// every key written has a TTL.
func TestRedisClusterMode(t *testing.T) {
	rc := redistest.StartCluster(t, 3)
	conf := func(sync rules.SyncMode) rules.Cluster {
		cfg := testConfig("", sync, rules.FailClosed)
		cfg.Addresses, cfg.RedisCluster = rc.Addrs(), true
		cfg.Budget = 250 * time.Millisecond // counting, not latency: no fallback under -race
		return cfg
	}
	keys := make([]string, 9)
	for i := range keys {
		keys[i] = "198.51.100." + strconv.Itoa(i+1)
	}
	ctx := context.Background()
	// owner returns the index of the master serving key's slot: the one
	// that answers EXISTS without a MOVED redirection.
	singles := make([]rueidis.Client, len(rc.Servers))
	for i, s := range rc.Servers {
		singles[i] = s.Client()
	}
	owner := func(t *testing.T, key string) int {
		t.Helper()
		for i, c := range singles {
			if err := c.Do(ctx, c.B().Exists().Key(key).Build()).Error(); err == nil {
				return i
			}
		}
		t.Fatalf("no node serves key %q", key)
		return -1
	}

	t.Run("exact", func(t *testing.T) {
		l := window.Limit{Limit: 15, Period: time.Hour}
		var cs [3]*Client
		var ds [3]*Domain
		var ss [3]*window.Store
		for i := range cs {
			cs[i] = newClient(t, conf(rules.SyncExact), "n"+strconv.Itoa(i))
			ds[i], ss[i] = newDomain(t, cs[i], l)
		}
		for i, c := range cs {
			wait.For(t, 5*time.Second, "scripts loaded on node "+strconv.Itoa(i), c.scriptsLoaded.Load)
		}
		wait.For(t, 2*time.Second, "three nodes", func() bool {
			return cs[0].Nodes() == 3 && cs[1].Nodes() == 3 && cs[2].Nodes() == 3
		})
		var fallback atomic.Int64
		allowed := make([]atomic.Int64, len(keys))
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Go(func() {
				for range 5 {
					for j, key := range keys {
						d, _ := allow(ds[g%3], ss[g%3], key)
						if d.Fallback {
							fallback.Add(1)
						}
						if d.Allowed {
							allowed[j].Add(1)
						}
					}
				}
			})
		}
		wg.Wait()
		if n := fallback.Load(); n != 0 {
			t.Fatalf("%d requests decided without redis", n)
		}
		on := make(map[int]int)
		start := ds[0].rules[0].periodStart(time.Now())
		for j, key := range keys {
			if got := allowed[j].Load(); got != l.Limit {
				t.Errorf("client %s: allowed %d of 30 requests over three nodes, want exactly the limit, %d", key, got, l.Limit)
			}
			prefix := ds[0].rules[0].prefix([]byte(key))
			on[owner(t, prefix+":"+strconv.FormatInt(start, 10))]++
		}
		t.Logf("clients' counters per master: %v", on)
		if len(on) != len(rc.Servers) {
			t.Errorf("the clients' counters are on %d masters, want all %d", len(on), len(rc.Servers))
		}
		cs[2].Close()
		wait.For(t, 2*time.Second, "two nodes after one left", func() bool { return cs[0].Nodes() == 2 })
		// Reset, a script deleting three keys of one slot, works too (it
		// clears the block that node remembers; the others keep theirs).
		if _, err := ds[0].Reset(ctx, id(ss[0], keys[0]), time.Now()); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		if d, _ := allow(ds[0], ss[0], keys[0]); !d.Allowed || d.Fallback {
			t.Errorf("after Reset: allowed %v fallback %v, want allowed through redis", d.Allowed, d.Fallback)
		}
	})

	// A call of the rate limit service decides many keys, on every master,
	// in one DoMulti (one pipeline per master), and gives back what a
	// refused call counted in one more.
	t.Run("exact, many at once", func(t *testing.T) {
		var mu sync.Mutex
		trips := map[string]int{}
		c, err := New(Options{Config: conf(rules.SyncExact), Pop: "many", Node: "m", OnRoundTrip: func(op string, _ time.Duration, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				trips[op]++
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		wait.For(t, 5*time.Second, "scripts loaded", c.scriptsLoaded.Load)
		d, s := newDomain(t, c, window.Limit{Limit: 1, Period: time.Hour})
		ids := make([]window.ID, len(keys))
		costs := make([]int64, len(keys))
		for i, key := range keys {
			ids[i], costs[i] = id(s, key), 1
		}
		r := rc.Client(t)
		calls := func() []string {
			var out []string
			for _, srv := range rc.Servers {
				info, err := srv.Client().Do(ctx, srv.Client().B().Info().Section("commandstats").Build()).ToString()
				if err != nil {
					t.Fatal(err)
				}
				_, after, _ := strings.Cut(info, "cmdstat_evalsha:calls=")
				n, _, _ := strings.Cut(after, ",")
				out = append(out, n)
			}
			return out
		}
		before := calls()
		call := d.Begin().(*tally)
		defer call.End()
		decs := make([]window.Decision, len(ids))
		call.DecideMany(ids, costs, time.Now(), decs)
		mu.Lock()
		if got := trips["decide"]; got != 1 {
			t.Errorf("decide round trips for %d keys: got %d, want 1", len(keys), got)
		}
		mu.Unlock()
		for i, dec := range decs {
			if !dec.Allowed || dec.Fallback {
				t.Errorf("%s: allowed %v, fallback %v; want allowed through redis", keys[i], dec.Allowed, dec.Fallback)
			}
		}
		for i, n := range calls() {
			if n == before[i] {
				t.Errorf("master %d ran no EVALSHA (%s before and after): the keys were not sent to every master", i, n)
			}
		}
		call.RefundMany(ids, decs, time.Now(), make([]window.Decision, len(ids)))
		mu.Lock()
		if got := trips["refund"]; got != 1 {
			t.Errorf("refund round trips for %d keys: got %d, want 1", len(keys), got)
		}
		mu.Unlock()
		r0 := &d.rules[0]
		for _, key := range keys {
			k := r0.prefix([]byte(key)) + ":" + strconv.FormatInt(r0.periodStart(time.Now()), 10)
			if n, err := r.Do(ctx, r.B().Get().Key(k).Build()).AsInt64(); err != nil && !rueidis.IsRedisNil(err) || n != 0 {
				t.Errorf("%s after the refund: count %d, %v; want 0", key, n, err)
			}
		}
	})

	t.Run("batched", func(t *testing.T) {
		l := window.Limit{Limit: 1000, Period: 24 * time.Hour}
		var flushes, failed atomic.Int64
		newBatched := func(node string) *Client {
			c, err := New(Options{Config: conf(rules.SyncBatched), Pop: "batched", Node: node,
				OnRoundTrip: flushCounter(&flushes, &failed)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		a, b := newBatched("a"), newBatched("b")
		wait.For(t, 5*time.Second, "scripts loaded", func() bool { return a.scriptsLoaded.Load() && b.scriptsLoaded.Load() })
		wait.For(t, 2*time.Second, "two nodes", func() bool { return a.Nodes() == 2 && b.Nodes() == 2 })
		da, sa := newDomain(t, a, l)
		db, sb := newDomain(t, b, l)
		r := rc.Client(t)
		r0 := &da.rules[0]
		// count returns the PoP-wide count of key in Redis (both periods,
		// should the day turn during the test).
		count := func(key string) int64 {
			prefix := r0.prefix([]byte(key))
			start := r0.periodStart(time.Now())
			var n int64
			for _, s := range []int64{start, start - r0.periodSeconds} {
				v, err := r.Do(ctx, r.B().Get().Key(prefix+":"+strconv.FormatInt(s, 10)).Build()).AsInt64()
				if err != nil && !rueidis.IsRedisNil(err) {
					t.Fatalf("GET: %v", err)
				}
				n += v
			}
			return n
		}
		for _, key := range keys {
			for range 5 {
				allow(da, sa, key)
			}
			for range 3 {
				allow(db, sb, key)
			}
		}
		wait.For(t, 3*time.Second, "both nodes' counts in redis", func() bool {
			for _, key := range keys {
				if count(key) != 8 {
					return false
				}
			}
			return true
		})
		on := make(map[int]int)
		for _, key := range keys {
			prefix := r0.prefix([]byte(key))
			on[owner(t, prefix+":"+strconv.FormatInt(r0.periodStart(time.Now()), 10))]++
		}
		t.Logf("clients' counters per master: %v", on)
		if len(on) < 2 {
			t.Fatalf("the flushed keys are on %d master, want several", len(on))
		}
		// One more request per key on b: its next flush merges back the
		// PoP-wide counts of every key, from every master.
		for _, key := range keys {
			allow(db, sb, key)
		}
		wait.For(t, 3*time.Second, "merged PoP-wide counts", func() bool {
			for _, key := range keys {
				if sb.Peek(sb.KeyString(0, key), time.Now()).Current != 9 {
					return false
				}
			}
			return true
		})
		if n := failed.Load(); n != 0 {
			t.Errorf("%d of %d flushes failed", n, flushes.Load())
		}
	})

	total := 0
	for _, n := range rc.CheckTTLs(t) {
		total += n
	}
	t.Logf("%d keys in the cluster, all with a TTL", total)
}
