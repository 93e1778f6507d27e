//go:build !race

package window

import "testing"

// TestFlood10M: max_keys 100,000, a flood of 10 million random source
// addresses, and a client at twice its limit throughout: the client is
// held to at most 1.1× its limit in every period and the store stays within
// its bound. Too slow under the race detector; .ci/run runs it without.
func TestFlood10M(t *testing.T) {
	if testing.Short() {
		t.Skip("10 million requests")
	}
	worst, st := floodHoldsBusyClient(t, 100_000, 10_000_000, 50)
	t.Logf("busy client: at most %d of 100 per period; %+v", worst, st)
}
