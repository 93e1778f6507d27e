package window

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// floodHoldsBusyClient floods a store of capacity keys with flood requests
// from fresh random addresses while one client sends at twice its limit,
// spread evenly; it returns the most requests the client got through in any
// period, and checks the store never exceeds its capacity.
func floodHoldsBusyClient(t *testing.T, capacity, flood, periods int) (worst int, st Stats) {
	t.Helper()
	const (
		limit  = 100
		period = 10 * time.Second
	)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	s := newStore(t, capacity, Limit{Limit: limit, Period: period})
	client := s.KeyString(0, "203.0.113.9")
	rng := rand.New(rand.NewPCG(11, 12))
	var buf [4]byte
	perClientReq := flood / periods / (2 * limit)
	for p := range periods {
		allowed := 0
		for i := range 2 * limit {
			now := t0.Add(time.Duration(p)*period + time.Duration(i)*period/(2*limit))
			if s.Allow(client, now).Allowed {
				allowed++
			}
			for range perClientReq {
				binary.LittleEndian.PutUint32(buf[:], rng.Uint32())
				s.Allow(s.Key(0, buf[:]), now)
			}
		}
		worst = max(worst, allowed)
		if n := s.Len(); n > capacity {
			t.Fatalf("period %d: Len() = %d, want ≤ %d", p, n, capacity)
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// The table is reserved up front (about 30 bytes a key); nothing may
	// grow with the flood beyond it.
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > int64(capacity)*32+1<<20 {
		t.Errorf("heap grew by %d bytes for a capacity of %d keys, want ≤ %d", grown, capacity, capacity*32+1<<20)
	}
	runtime.KeepAlive(s)
	if worst > limit*11/10 {
		t.Errorf("the busy client got %d requests through in one period, want ≤ %d (1.1× its limit)", worst, limit*11/10)
	}
	return worst, s.Stats()
}

// TestFloodCannotEvictTheBusyClient is the eviction test at a size that
// suits the race detector: 10,000 keys of capacity, 1 million flood
// requests. TestFlood10M (run by .ci/run without -race) is the full size.
func TestFloodCannotEvictTheBusyClient(t *testing.T) {
	worst, st := floodHoldsBusyClient(t, 10_000, 1_000_000, 20)
	t.Logf("busy client: at most %d of 100 per period; %+v", worst, st)
	if st.Evicted == 0 {
		t.Errorf("the flood evicted nothing: it should have replaced idle keys")
	}
}
