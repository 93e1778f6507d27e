package cluster

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

var shareFull = flag.Bool("share.full", false, "TestShareSplit: simulate 100,000 windows per case (docs/cluster.md) instead of 2,000")

// TestShareSplit simulates a client sending exactly its limit each window,
// every request to a node picked at random, against nodes that each allow
// their share of the limit (sync: share). It asserts LaunchDarkly's target
// for the Poisson split, each node wrongly refusing the client in at most
// 5% of windows at confidence 0.95, and prints the table in docs/cluster.md:
//
//	go test ./cluster/ -run TestShareSplit -v -share.full
func TestShareSplit(t *testing.T) {
	windows := 2000
	if *shareFull {
		windows = 100000
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%d windows per case; a client sends exactly the limit each window, each request to a node at random\n\n", windows)
	fmt.Fprintln(&out, "| nodes | limit | split | node share | refused by a node (mean, worst node) | refused by the PoP | most the PoP allows |")
	fmt.Fprintln(&out, "|---|---|---|---|---|---|---|")
	rng := rand.New(rand.NewPCG(15, 15))
	for _, nodes := range []int{2, 3, 10} {
		for _, limit := range []int64{10, 100, 1000} {
			pop := 1 - 0.05/float64(nodes) // holds the PoP to 5% by the union bound
			for _, s := range []struct {
				name  string
				share int64
			}{
				{"exact (Redis)", limit},
				{"even", EvenShare(limit, nodes)},
				{"poisson 0.95", PoissonShare(limit, nodes, 0.95)},
				{fmt.Sprintf("poisson %.4g", pop), PoissonShare(limit, nodes, pop)},
			} {
				exact := s.name == "exact (Redis)"
				r := simulateShare(rng, nodes, limit, s.share, exact, windows)
				most := min(s.share*int64(nodes), limit*int64(nodes))
				if exact {
					most = limit
				}
				fmt.Fprintf(&out, "| %d | %d | %s | %d | %.2f%%, %.2f%% | %.2f%% | %d (%+.0f%%) |\n",
					nodes, limit, s.name, s.share, 100*r.nodeMean, 100*r.nodeWorst, 100*r.pop,
					most, 100*float64(most-limit)/float64(limit))
				if s.name == "poisson 0.95" && r.nodeWorst > 0.05+0.02 {
					t.Errorf("%d nodes, limit %d, poisson 0.95: a node refused the client in %.2f%% of windows, want at most 5%% (+2%% sampling)",
						nodes, limit, 100*r.nodeWorst)
				}
				if exact && r.pop != 0 {
					t.Errorf("%d nodes, limit %d: the exact count refused a client at the limit", nodes, limit)
				}
			}
		}
	}
	if testing.Verbose() {
		fmt.Print(out.String())
	}
}

type shareResult struct {
	nodeMean, nodeWorst float64 // share of windows in which a node refused at least one request
	pop                 float64 // share of windows in which any node refused
}

// simulateShare runs windows windows of limit requests spread at random
// over nodes nodes, each allowing share a window (or, with exact, one
// count shared by all, allowing limit).
func simulateShare(rng *rand.Rand, nodes int, limit, share int64, exact bool, windows int) shareResult {
	refusedBy := make([]int, nodes)
	popRefused := 0
	got := make([]int64, nodes)
	for range windows {
		clear(got)
		for range limit {
			got[rng.IntN(nodes)]++
		}
		if exact {
			continue // limit requests against one shared count of limit: none refused
		}
		any := false
		for i, g := range got {
			if g > share {
				refusedBy[i]++
				any = true
			}
		}
		if any {
			popRefused++
		}
	}
	var r shareResult
	for _, n := range refusedBy {
		f := float64(n) / float64(windows)
		r.nodeMean += f / float64(nodes)
		r.nodeWorst = max(r.nodeWorst, f)
	}
	r.pop = float64(popRefused) / float64(windows)
	return r
}
