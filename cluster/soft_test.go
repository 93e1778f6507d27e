package cluster

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
)

// TestSoftShared: a soft limit of 1000 a minute shared by two nodes, in
// exact mode (on an injected clock and seeded draws) and batched (each
// node flushing every simulated second). A client at several multiples of
// the limit, sliding and fixed windows, its requests evenly spaced from a
// period's start or 40% into one and alternating between the nodes, is
// admitted within ±5% of the limit in total over 20 periods, with some
// admitted in every tenth of every period: each node thins by the PoP's
// offered rate, not its own. Below the limit nothing is refused.
func TestSoftShared(t *testing.T) {
	const limit, periods = 1000, 20
	srv := redistest.Start(t)
	for _, sync := range []rules.SyncMode{rules.SyncExact, rules.SyncBatched} {
		cfg := testConfig(srv.Addr, sync, rules.FailLocal)
		cfg.BatchInterval = time.Hour // flushed by the test, at simulated times
		cfg.Budget = time.Second      // no request decided without Redis on a slow machine
		nodes := [2]*Client{newClient(t, cfg, "a-"+sync.String()), newClient(t, cfg, "b-"+sync.String())}
		for _, tc := range []struct {
			name   string
			alg    algorithm.Algorithm
			rate   float64
			offset time.Duration // into the first period
		}{
			{"0.9x fixed", algorithm.FixedWindow, 0.9, 0},
			{"0.9x", algorithm.SlidingWindow, 0.9, 24 * time.Second},
			{"1.1x", algorithm.SlidingWindow, 1.1, 0},
			{"1.5x fixed", algorithm.FixedWindow, 1.5, 24 * time.Second},
			{"3x", algorithm.SlidingWindow, 3, 24 * time.Second},
		} {
			t.Run(sync.String()+"/"+tc.name, func(t *testing.T) {
				var ds [2]*Domain
				var stores [2]*window.Store
				for i, c := range nodes {
					s, err := window.New(window.Options{Capacity: 64, SoftSeed: uint64(i + 1), Limits: []window.Limit{
						{Algorithm: tc.alg, Limit: limit, Period: time.Minute, Soft: true, CountBlocked: true},
					}})
					if err != nil {
						t.Fatal(err)
					}
					stores[i] = s
					ds[i], err = c.Domain("site", []Rule{{Name: "soft-" + sync.String() + "-" + strings.ReplaceAll(tc.name, " ", "-"), Key: "ip"}}, s)
					if err != nil {
						t.Fatal(err)
					}
					ds[i].scriptTime = true
					rng := rand.New(rand.NewPCG(uint64(i), 15))
					ds[i].draw = rng.Uint64
					t.Cleanup(ds[i].Close)
				}
				per := int(tc.rate * limit)
				gap := time.Minute / time.Duration(per)
				flushEvery := max(per/60, 1) // about once a simulated second
				start := time.Unix(1_800_000_000, 0).Truncate(time.Minute).Add(tc.offset)
				allowed, refused := 0, 0
				for w := range periods {
					var tenths [10]int
					for i := range per {
						at := start.Add(time.Duration(w)*time.Minute + time.Duration(i)*gap)
						n := i % 2
						call := ds[n].Begin()
						d := call.Decide(window.ID{Key: stores[n].KeyString(0, "client"), Name: []byte("client")}, 1, at)
						call.End()
						if d.Fallback {
							t.Fatalf("period %d request %d decided without Redis", w, i)
						}
						if d.Allowed {
							allowed++
							tenths[i*10/per]++
						} else {
							refused++
						}
						if i%flushEvery == flushEvery-1 {
							nodes[0].flush()
							nodes[1].flush()
						}
					}
					for i, n := range tenths {
						if n == 0 {
							t.Errorf("period %d, tenth %d: nothing allowed", w, i)
						}
					}
				}
				t.Logf("%s, %s over two nodes: %d allowed of %d offered (limit %d over %d periods)", sync, tc.name, allowed, allowed+refused, limit*periods, periods)
				if tc.rate < 1 {
					if refused > 0 {
						t.Errorf("%d refused below the limit", refused)
					}
					return
				}
				if lo, hi := 0.95*limit*periods, 1.05*limit*periods; float64(allowed) < lo || float64(allowed) > hi {
					t.Errorf("allowed %d, want within ±5%% of %d", allowed, limit*periods)
				}
			})
		}
	}
}
