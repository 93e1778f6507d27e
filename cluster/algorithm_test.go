package cluster

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
)

// exactClient is a Client in exact mode on srv that fails closed, with a
// budget roomy enough for the race detector: a decision that Redis did not
// make shows as Unavailable.
func exactClient(t *testing.T, srv *redistest.Server) *Client {
	t.Helper()
	cfg := testConfig(srv.Addr, rules.SyncExact, rules.FailClosed)
	cfg.Budget = 250 * time.Millisecond
	c := newClient(t, cfg, "n1")
	wait.For(t, 2*time.Second, "scripts loaded", c.scriptsLoaded.Load)
	return c
}

// public is what a Decision says to the proxy.
type public struct {
	Allowed           bool
	Remaining         int64
	RetryAfter, Reset time.Duration
	Mitigated         bool
	Delay             time.Duration // a queue's wait for the request's turn
}

func publicOf(d window.Decision) public {
	return public{d.Allowed, d.Remaining, d.RetryAfter, d.Reset, d.Mitigated, d.Delay}
}

// TestExactMatchesStore runs random traces (costs 0 to 5, random gaps,
// charges after the fact, refunds) of a few clients through a domain's own
// window.Store and through Redis in exact mode, the scripts judging at
// the trace's times, and requires the same Decision for every request,
// under every algorithm, with and without count_blocked and a mitigation.
func TestExactMatchesStore(t *testing.T) {
	berlin, newYork := location(t, "Europe/Berlin"), location(t, "America/New_York")
	srv := redistest.Start(t)
	c := exactClient(t, srv)
	limits := []struct {
		name string
		l    window.Limit
	}{
		{"sliding", window.Limit{Limit: 7, Period: 10 * time.Second}},
		{"sliding count_blocked", window.Limit{Limit: 5, Period: 3 * time.Second, CountBlocked: true}},
		{"sliding mitigation", window.Limit{Limit: 6, Period: 2 * time.Second, Mitigation: 3 * time.Second}},
		{"fixed", window.Limit{Algorithm: algorithm.FixedWindow, Limit: 7, Period: 10 * time.Second}},
		{"fixed count_blocked", window.Limit{Algorithm: algorithm.FixedWindow, Limit: 4, Period: 3 * time.Second, CountBlocked: true}},
		{"fixed mitigation", window.Limit{Algorithm: algorithm.FixedWindow, Limit: 6, Period: time.Second, Mitigation: 2 * time.Second}},
		// Lyft's year, longer than window.MaxSpan: the trace runs some 75
		// years on from 2027, to near the end of Lua's exact integers (µs
		// below 2⁵³, the year 2255).
		{"sliding year", window.Limit{Limit: 3, Period: 365 * 24 * time.Hour}},
		{"fixed year count_blocked", window.Limit{Algorithm: algorithm.FixedWindow, Limit: 3, Period: 365 * 24 * time.Hour, CountBlocked: true}},
		{"token", window.Limit{Algorithm: algorithm.TokenBucket, Limit: 7, Period: 10 * time.Second, Burst: 9}},
		{"token burst 4", window.Limit{Algorithm: algorithm.TokenBucket, Limit: 3, Period: 7 * time.Second, Burst: 4}},
		{"token count_blocked", window.Limit{Algorithm: algorithm.TokenBucket, Limit: 6, Period: 3 * time.Second, Burst: 6, CountBlocked: true}},
		{"token mitigation", window.Limit{Algorithm: algorithm.TokenBucket, Limit: 9, Period: 2 * time.Second, Burst: 5, Mitigation: 1500 * time.Millisecond}},
		{"leaky", window.Limit{Algorithm: algorithm.LeakyBucket, Limit: 7, Period: 3 * time.Second}},
		{"leaky count_blocked mitigation", window.Limit{Algorithm: algorithm.LeakyBucket, Limit: 11, Period: 5 * time.Second, Burst: 8, CountBlocked: true, Mitigation: time.Second}},
		// Queues: requests wait for their turn on the shared level.
		{"leaky queue", window.Limit{Algorithm: algorithm.LeakyBucket, Limit: 7, Period: 3 * time.Second, MaxDelay: 800 * time.Millisecond}},
		{"leaky queue longer than the bucket", window.Limit{Algorithm: algorithm.LeakyBucket, Limit: 5, Period: time.Second, Burst: 2, MaxDelay: 1500 * time.Millisecond}},
		{"leaky queue count_blocked mitigation", window.Limit{Algorithm: algorithm.LeakyBucket, Limit: 11, Period: 5 * time.Second, Burst: 8, MaxDelay: 2 * time.Second, CountBlocked: true, Mitigation: time.Second}},
		// A unit of 3.6ns, a fraction of a nanosecond with denominator 10⁹.
		{"token huge limit", window.Limit{Algorithm: algorithm.TokenBucket, Limit: 1_000_000_000, Period: time.Hour, Burst: 4}},
		// A bucket that takes 1143h to fill: twice that, in ns, is near 2⁵³.
		{"leaky slow count_blocked", window.Limit{Algorithm: algorithm.LeakyBucket, Limit: 7, Period: 1000 * time.Hour, Burst: 8, CountBlocked: true}},
		// A quota's Period only spaces the trace's requests: its calendar
		// periods are days, weeks or months, and a trace crosses dozens.
		{"quota daily", window.Limit{Algorithm: algorithm.Quota, Reset: algorithm.Daily, Limit: 7, Period: 24 * time.Hour}},
		{"quota weekly count_blocked", window.Limit{Algorithm: algorithm.Quota, Reset: algorithm.Weekly, Location: berlin, Limit: 20, Period: 5 * 24 * time.Hour, CountBlocked: true}},
		{"quota monthly mitigation", window.Limit{Algorithm: algorithm.Quota, Reset: algorithm.Monthly, Location: newYork, Limit: 60, Period: 20 * 24 * time.Hour, Mitigation: 3 * 24 * time.Hour}},
		{"quota daily mitigation count_blocked", window.Limit{Algorithm: algorithm.Quota, Reset: algorithm.Daily, Location: newYork, Limit: 5, Period: 24 * time.Hour, Mitigation: 2 * time.Hour, CountBlocked: true}},
	}
	for li, tt := range limits {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(li), 14))
			local, err := window.New(window.Options{Capacity: 64, Limits: []window.Limit{tt.l}})
			if err != nil {
				t.Fatal(err)
			}
			shared, store := newDomain(t, c, tt.l)
			shared.scriptTime = true
			// Whole microseconds, as Redis's clock has them, at a random
			// point of the period.
			now := time.UnixMicro(1_800_000_000_000_000 + rng.Int64N(int64(tt.l.Period/time.Microsecond)))
			clients := []string{"a" + strconv.Itoa(li), "b" + strconv.Itoa(li), "c" + strconv.Itoa(li)}
			for i := range 600 {
				now = now.Add(time.Duration(rng.Int64N(int64(tt.l.Period/4/time.Microsecond))) * time.Microsecond)
				key := clients[rng.IntN(len(clients))]
				sid, lid := id(store, key), id(local, key)
				if rng.IntN(8) == 0 {
					n := 1 + rng.Int64N(5)
					call := shared.Begin()
					call.Charge(sid, n, now)
					call.End()
					c.flush() // a window's charge reaches Redis with the batch
					local.Charge(lid.Key, n, now)
					continue
				}
				cost := rng.Int64N(6)
				want := local.AllowN(lid.Key, now, cost)
				call := shared.Begin()
				got := call.Decide(sid, cost, now)
				if got.Unavailable || got.Fallback {
					t.Fatalf("request %d: not decided by redis: %+v", i, got)
				}
				if publicOf(got) != publicOf(want) {
					t.Fatalf("request %d (client %s, cost %d, at %v): redis decided %+v, the store %+v",
						i, key, cost, now.UnixMicro(), publicOf(got), publicOf(want))
				}
				if rng.IntN(6) == 0 {
					// Refused by another rule after all: taken back.
					want = local.Refund(lid.Key, want, now)
					got = call.Refund(sid, got, now)
					if publicOf(got) != publicOf(want) {
						t.Fatalf("request %d refunded: redis says %+v, the store %+v", i, publicOf(got), publicOf(want))
					}
				}
				call.End()
			}
		})
	}
	checkTTLs(t, srv)
}

// TestExactOnRedisClock: in production the scripts judge on Redis's own
// clock (TIME): each algorithm lets exactly its limit (or burst) through,
// refuses the next request with the wait the rule implies, and every key
// it writes has a TTL no longer than its state needs (and a second for a
// bucket).
func TestExactOnRedisClock(t *testing.T) {
	srv := redistest.Start(t)
	c := exactClient(t, srv)
	r := srv.Client()
	tests := []struct {
		name    string
		l       window.Limit
		allowed int
		// the refused request's RetryAfter is in (wantMin, wantMax]
		wantMin, wantMax time.Duration
		maxTTL           time.Duration
	}{
		{"sliding", window.Limit{Limit: 3, Period: time.Hour}, 3, 0, time.Hour + 1, 2 * time.Hour},
		{"fixed", window.Limit{Algorithm: algorithm.FixedWindow, Limit: 3, Period: time.Hour}, 3, 0, time.Hour, time.Hour},
		{"sliding year", window.Limit{Limit: 3, Period: year}, 3, 0, year + 1, 2 * year},
		{"fixed year", window.Limit{Algorithm: algorithm.FixedWindow, Limit: 3, Period: year}, 3, 0, year, year},
		{"token", window.Limit{Algorithm: algorithm.TokenBucket, Limit: 6, Period: time.Hour, Burst: 2}, 2, 9 * time.Minute, 10 * time.Minute, 20*time.Minute + time.Second},
		{"leaky", window.Limit{Algorithm: algorithm.LeakyBucket, Limit: 4, Period: time.Hour}, 4, 14 * time.Minute, 15 * time.Minute, time.Hour + time.Second},
		// The burst, then one request queued 15 minutes; the next one's turn
		// is 30 minutes away, 10 more than the queue waits.
		{"leaky queue", window.Limit{Algorithm: algorithm.LeakyBucket, Limit: 4, Period: time.Hour, MaxDelay: 20 * time.Minute}, 5, 9 * time.Minute, 10 * time.Minute, 75*time.Minute + time.Second},
		{"quota", window.Limit{Algorithm: algorithm.Quota, Reset: algorithm.Daily, Limit: 3}, 3, 0, 24 * time.Hour, 24*time.Hour + time.Second},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, store := newDomain(t, c, tt.l)
			for i := range tt.allowed {
				if dec, _ := allow(d, store, tt.name); !dec.Allowed || dec.Fallback {
					t.Fatalf("request %d: got %+v, want allowed by redis", i, dec)
				}
			}
			dec, _ := allow(d, store, tt.name)
			if dec.Allowed || dec.Fallback || dec.RetryAfter <= tt.wantMin || dec.RetryAfter > tt.wantMax {
				t.Errorf("request %d: got %+v, want refused by redis, RetryAfter in (%v, %v]", tt.allowed, dec, tt.wantMin, tt.wantMax)
			}
			keys, err := r.Do(ctx, r.B().Keys().Pattern(d.rules[0].prefix([]byte(tt.name))+"*").Build()).AsStrSlice()
			if err != nil || len(keys) == 0 {
				t.Fatalf("keys: %v, %v; want some", keys, err)
			}
			for _, k := range keys {
				ttl, err := r.Do(ctx, r.B().Pttl().Key(k).Build()).AsInt64()
				if err != nil || ttl <= 0 || time.Duration(ttl)*time.Millisecond > tt.maxTTL {
					t.Errorf("PTTL %s: got %dms, %v; want in (0, %v]", k, ttl, err, tt.maxTTL)
				}
			}
			st, err := d.Peek(ctx, id(store, tt.name), time.Now())
			if err != nil || !st.Shared || !st.Tracked || st.Remaining != 0 {
				t.Errorf("Peek: got %+v, %v; want shared, tracked, nothing remaining", st, err)
			}
			if ok, err := d.Reset(ctx, id(store, tt.name), time.Now()); !ok || err != nil {
				t.Fatalf("Reset: got %v, %v", ok, err)
			}
			if dec, _ := allow(d, store, tt.name); !dec.Allowed {
				t.Errorf("after Reset: got %+v, want allowed", dec)
			}
		})
	}
}

// TestBatchedCost: batched mode decides a sliding window's requests of any
// cost locally, as the store does, and shares their costs, refunds
// included, with the next flush.
func TestBatchedCost(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, testConfig(srv.Addr, rules.SyncBatched, rules.FailLocal), "n1")
	wait.For(t, 2*time.Second, "scripts loaded", c.scriptsLoaded.Load)
	d, store := newDomain(t, c, window.Limit{Limit: 10, Period: time.Hour})
	now := time.Now()
	call := d.Begin()
	defer call.End()
	steps := []struct {
		cost   int64
		refund bool
		want   bool
	}{{3, false, true}, {3, true, true}, {3, false, true}, {3, false, true}, {3, false, false}, {1, false, true}, {0, false, false}}
	for i, s := range steps {
		dec := call.Decide(id(store, "x"), s.cost, now)
		if dec.Allowed != s.want || dec.Fallback {
			t.Fatalf("step %d, cost %d: got %+v, want allowed %v, not a fallback", i, s.cost, dec, s.want)
		}
		if s.refund {
			call.Refund(id(store, "x"), dec, now)
		}
	}
	c.flush()
	r := srv.Client()
	key := d.rules[0].prefix([]byte("x")) + ":" + strconv.FormatInt(d.rules[0].periodStart(now), 10)
	got, err := r.Do(context.Background(), r.B().Get().Key(key).Build()).AsInt64()
	if err != nil || got != 10 {
		t.Errorf("redis count after the flush: got %d, %v; want 10 (3 + 3 + 3 + 1, a refunded 3 not counted)", got, err)
	}
}

// batchedNodes returns two batched nodes on srv, each with a domain of one
// rule counted by l, that flush only when the test tells them to.
func batchedNodes(t *testing.T, srv *redistest.Server, l window.Limit) (cs [2]*Client, ds [2]*Domain, ss [2]*window.Store) {
	t.Helper()
	for i := range cs {
		cfg := testConfig(srv.Addr, rules.SyncBatched, rules.FailLocal)
		cfg.BatchInterval = time.Hour // flushed by the test only, in its order
		cs[i] = newClient(t, cfg, "n"+strconv.Itoa(i))
		wait.For(t, 2*time.Second, "scripts loaded", cs[i].scriptsLoaded.Load)
		ds[i], ss[i] = newDomain(t, cs[i], l)
	}
	return cs, ds, ss
}

// TestBatchedTokenBucket: in batched mode each node decides a bucket
// locally and every flush takes the units it took from the shared bucket,
// which may go down to −burst tokens: the overshoot of local decisions is
// paid back by waiting, on every node that touched the key.
func TestBatchedTokenBucket(t *testing.T) {
	srv := redistest.Start(t)
	l := window.Limit{Algorithm: algorithm.TokenBucket, Limit: 10, Period: time.Hour}
	cs, ds, ss := batchedNodes(t, srv, l)
	take := func(node, n int, want bool) window.Decision {
		t.Helper()
		var dec window.Decision
		for j := range n {
			if dec, _ = allow(ds[node], ss[node], "x"); dec.Allowed != want || dec.Fallback {
				t.Fatalf("node %d, request %d: got %+v, want allowed %v, not a fallback", node, j, dec, want)
			}
		}
		return dec
	}
	take(0, 8, true)
	take(1, 8, true) // 16 units taken in all: 6 past the burst
	cs[0].flush()
	cs[1].flush()
	take(0, 1, true) // node 0 knows only of its own 8
	cs[0].flush()    // and now of all 17
	take(0, 1, false)
	dec := take(1, 1, false) // node 1 merged 16 at its flush
	// 16 units in the bucket of 10: one more fits once 7 have drained, 6
	// minutes each.
	if unit := time.Hour / 10; dec.RetryAfter <= 7*unit-time.Minute || dec.RetryAfter > 7*unit {
		t.Errorf("node 1 refused with RetryAfter %v, want about %v", dec.RetryAfter, 7*unit)
	}
	checkTTLs(t, srv)
}

// TestBatchedFixedWindow: in batched mode a fixed window's counts are
// shared as a sliding window's are, its previous period ignored.
func TestBatchedFixedWindow(t *testing.T) {
	srv := redistest.Start(t)
	l := window.Limit{Algorithm: algorithm.FixedWindow, Limit: 5, Period: time.Hour}
	cs, ds, ss := batchedNodes(t, srv, l)
	steps := []struct {
		node  int
		flush bool // flush the node instead of a request
		want  bool
	}{
		{node: 0, want: true}, {node: 0, want: true}, {node: 0, want: true},
		{node: 1, want: true}, {node: 1, want: true}, {node: 1, want: true}, // 6: one past the limit
		{node: 0, flush: true}, {node: 1, flush: true},
		{node: 1, want: false}, // node 1 merged all 6
	}
	for i, s := range steps {
		if s.flush {
			cs[s.node].flush()
			continue
		}
		if dec, _ := allow(ds[s.node], ss[s.node], "x"); dec.Allowed != s.want || dec.Fallback {
			t.Fatalf("step %d, node %d: got %+v, want allowed %v", i, s.node, dec, s.want)
		}
	}
	checkTTLs(t, srv)
}

// location loads a time zone for a test, or fails it.
func location(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

// TestQuotaAcrossMidnight: a daily quota through Redis refuses up to the
// last microsecond of a day and starts afresh at midnight, in the rule's
// time zone; a script run on a Redis clock that has passed the midnight the
// node computed counts in the next day.
func TestQuotaAcrossMidnight(t *testing.T) {
	srv := redistest.Start(t)
	c := exactClient(t, srv)
	tokyo := location(t, "Asia/Tokyo")
	l := window.Limit{Algorithm: algorithm.Quota, Reset: algorithm.Daily, Location: tokyo, Limit: 2}
	d, store := newDomain(t, c, l)
	d.scriptTime = true
	midnight := time.Date(2027, 3, 1, 0, 0, 0, 0, tokyo)
	before := midnight.Add(-time.Microsecond)
	steps := []struct {
		name string
		at   time.Time
		want public
	}{
		{"first", before.Add(-time.Hour), public{Allowed: true, Remaining: 1, Reset: time.Hour + time.Microsecond}},
		{"second", before, public{Allowed: true, Remaining: 0, Reset: time.Microsecond}},
		{"third waits a microsecond", before, public{Remaining: 0, RetryAfter: time.Microsecond, Reset: time.Microsecond}},
		{"at midnight", midnight, public{Allowed: true, Remaining: 1, Reset: 24 * time.Hour}},
	}
	for _, s := range steps {
		call := d.Begin()
		got := call.Decide(id(store, "x"), 1, s.at)
		call.End()
		if got.Fallback || publicOf(got) != s.want {
			t.Errorf("%s: got %+v, want %+v", s.name, publicOf(got), s.want)
		}
	}

	// The node's clock says 23:59:59.999999, Redis's midnight.
	r := &d.rules[0]
	prefix := r.prefix([]byte("y"))
	d.scriptTime = false
	idx, end := l.QuotaPeriod(before)
	next, nextEnd := l.QuotaPeriod(end)
	args := []string{"d", "2", "0", "0", "1",
		strconv.FormatInt(idx, 10), strconv.FormatInt(end.UnixMicro(), 10),
		strconv.FormatInt(next, 10), strconv.FormatInt(nextEnd.UnixMicro(), 10),
		strconv.FormatInt(midnight.UnixMicro(), 10)}
	vals, err := c.exec(context.Background(), quotaScript, []string{prefix}, args).AsIntSlice()
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{1, 1, 1, 24 * 3600 * 1_000_000, 0, next}; !slices.Equal(vals, want) || next != idx+1 {
		t.Errorf("script past the node's midnight: got %v, want %v (index %d after %d)", vals, want, next, idx)
	}
	checkTTLs(t, srv)
}

// TestBatchedQuota: in batched mode each node decides a quota on its own
// store and shares its count with the next flush; a node that flushes
// takes the PoP's count of the period in, and refuses once it is used up.
func TestBatchedQuota(t *testing.T) {
	srv := redistest.Start(t)
	l := window.Limit{Algorithm: algorithm.Quota, Reset: algorithm.Monthly, Limit: 5}
	var nodes [2]struct {
		c     *Client
		d     *Domain
		store *window.Store
	}
	for i := range nodes {
		nodes[i].c = newClient(t, testConfig(srv.Addr, rules.SyncBatched, rules.FailLocal), "n"+strconv.Itoa(i+1))
		wait.For(t, 2*time.Second, "scripts loaded", nodes[i].c.scriptsLoaded.Load)
		nodes[i].d, nodes[i].store = newDomain(t, nodes[i].c, l)
	}
	now := time.Now()
	steps := []struct {
		name  string
		node  int
		flush bool // the node flushes after deciding
		want  bool
	}{
		{"node 1, first", 0, false, true},
		{"node 1, second", 0, false, true},
		{"node 1, third, then flushes", 0, true, true},
		{"node 2 alone, then flushes and learns of 3", 1, true, true},
		{"node 2, the fifth of the PoP", 1, false, true},
		{"node 2, the sixth", 1, false, false},
	}
	for _, s := range steps {
		n := &nodes[s.node]
		call := n.d.Begin()
		got := call.Decide(id(n.store, "x"), 1, now)
		call.End()
		if got.Allowed != s.want || got.Fallback {
			t.Errorf("%s: got %+v, want allowed %v, not a fallback", s.name, got, s.want)
		}
		if s.flush {
			n.c.flush()
		}
	}
	checkTTLs(t, srv)
}

// year is Lyft's longest unit, 365 days: longer than window.MaxSpan.
const year = 365 * 24 * time.Hour

// TestExactYearAtBoundaries: a year's windows in Redis decide as the
// store does at the edges of their epoch-aligned periods (a microsecond
// before and at each start, Redis's clock having whole microseconds),
// from before the epoch to 2250, near the end of Lua's exact integers.
func TestExactYearAtBoundaries(t *testing.T) {
	srv := redistest.Start(t)
	c := exactClient(t, srv)
	const P = int64(year / time.Microsecond)
	for _, tt := range []struct {
		l window.Limit
		// the steps allowed (T) and refused (F): a period of a year, not
		// of window.MaxSpan
		want string
	}{
		{window.Limit{Limit: 10, Period: year}, "TTFTFTFFTFTFTFTT"},
		{window.Limit{Algorithm: algorithm.FixedWindow, Limit: 10, Period: year, CountBlocked: true}, "TTFFFFTTTTTTFTFT"},
	} {
		l := tt.l
		for _, base := range []time.Time{
			time.Date(1950, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
			time.Date(2113, 12, 31, 0, 0, 0, 0, time.UTC),
			time.Date(2250, 1, 1, 0, 0, 0, 0, time.UTC),
		} {
			t.Run(l.Algorithm.String()+"/"+strconv.Itoa(base.Year()), func(t *testing.T) {
				local, err := window.New(window.Options{Capacity: 64, Limits: []window.Limit{l}})
				if err != nil {
					t.Fatal(err)
				}
				shared, store := newDomain(t, c, l)
				shared.scriptTime = true
				w := base.UnixMicro() / P
				if base.UnixMicro()%P < 0 {
					w--
				}
				S := w * P
				// µs after S, and the cost asked there.
				steps := []struct{ at, cost int64 }{
					{0, 4}, {0, 4}, {0, 4}, {P / 2, 1}, {P - 1, 2}, {P - 1, 1},
					{P, 1}, {P, 3}, {P + 1, 1}, {P + P/10, 1}, {P + P/10 + 1, 1}, {P + P/10 + 1, 1},
					{2*P - 1, 5}, {2 * P, 10}, {2 * P, 1}, {4*P + 1, 1},
				}
				var allowed []byte
				for i, st := range steps {
					now := time.UnixMicro(S + st.at)
					want := local.AllowN(id(local, "k").Key, now, st.cost)
					call := shared.Begin()
					got := call.Decide(id(store, "k"), st.cost, now)
					call.End()
					if got.Unavailable || got.Fallback || publicOf(got) != publicOf(want) {
						t.Fatalf("step %d (%dµs into the period, cost %d): redis decided %+v, the store %+v",
							i, st.at, st.cost, publicOf(got), publicOf(want))
					}
					allowed = append(allowed, "FT"[btoi(got.Allowed)])
				}
				if string(allowed) != tt.want {
					t.Fatalf("allowed %s, want %s", allowed, tt.want)
				}
			})
		}
	}
	checkTTLs(t, srv)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
