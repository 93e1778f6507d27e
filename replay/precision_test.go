package replay

import (
	"testing"

	"github.com/edgerate/edge/trace"
	"github.com/edgerate/edge/window"
)

// TestPopulationFine replays the ci population (under the race detector,
// every eighth source and the heavy and abusive ones) at Fine precision
// against the targets docs/accuracy.md states for the full population:
// at most 0.003% of requests misjudged and D3 at most 3%, well under the
// standard precision's figures; and the same report from one shared
// store in time order, with logs to spare, as from a store per source.
func TestPopulationFine(t *testing.T) {
	c := cells(t, "population", 0)[0]
	in := CellInput(c)
	if raceEnabled {
		var keep []int
		for i := range c.Sources {
			if i%8 == 0 || c.Class(i) != trace.Benign {
				keep = append(keep, i)
			}
		}
		in = subset(in, keep)
	}
	std := run(t, in, Options{})
	in.Rule.Precision = window.Fine
	fine := run(t, in, Options{})
	s, f := std.CountAll, fine.CountAll
	t.Logf("misjudged %.5f%% standard, %.5f%% fine; D3 %.3f%% standard, %.3f%% fine",
		100*s.MisjudgedFraction, 100*f.MisjudgedFraction, 100*s.D3, 100*f.D3)
	if std.Precision != "standard" || fine.Precision != "fine" {
		t.Errorf("precisions %q and %q, want standard and fine", std.Precision, fine.Precision)
	}
	if f.MisjudgedFraction > 0.00003 || f.MisjudgedFraction > s.MisjudgedFraction/10 {
		t.Errorf("fine misjudged %g, want at most 0.003%% and a tenth of standard's %g", f.MisjudgedFraction, s.MisjudgedFraction)
	}
	if f.D3 > 0.03 || f.D3 >= s.D3 {
		t.Errorf("fine D3 %g, want at most 3%% and under standard's %g", f.D3, s.D3)
	}
	if fine.Store.FineFallback != 0 {
		t.Errorf("%d decisions fell back to two counters in a store per source", fine.Store.FineFallback)
	}
	// A store per source has a pool that never runs short; so must the
	// shared one, for the two to agree: a key keeps its log while it is
	// tracked, and under pressure (fewer than an eighth free) a key far
	// below its limit gives it back, which changes what it estimates.
	i := run(t, in, Options{Interleaved: true, Capacity: 8 * in.Sources})
	if i.Store.FineFallback != 0 || i.Store.Evicted != 0 {
		t.Errorf("interleaved: store %+v, want no fallback and no eviction", i.Store)
	}
	fine.Store, i.Store = StoreReport{}, StoreReport{}
	if a, b := reportJSON(t, []*Report{fine}), reportJSON(t, []*Report{i}); string(a) != string(b) {
		t.Errorf("streaming and interleaved fine replays differ:\n%s\n%s", a, b)
	}
}
