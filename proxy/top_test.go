package proxy

import (
	"testing"
	"time"

	"github.com/edgerate/edge/window"
)

func TestTopTalkersBounded(t *testing.T) {
	top := newTopTalkers[window.Key]()
	s := newEnv(t, oneDomain("http://127.0.0.1:9", rule("r", 1, time.Minute))).proxy.state.Load().domains[0].store
	heavy := s.KeyString(0, "heavy")
	for i := range 100_000 {
		top.observe(s.KeyString(0, string(rune(i))), false, func() string { return "flood" })
		if i%10 == 0 {
			top.observe(heavy, true, func() string { return "heavy" })
		}
	}
	got := top.top(5)
	if len(top.heap.items) != topSize || len(top.index) != topSize {
		t.Fatalf("tracked %d keys, want the bound %d", len(top.heap.items), topSize)
	}
	if got[0].text != "heavy" || got[0].count < 10_000 || got[0].blocked != 10_000 {
		t.Errorf("top = %+v, want heavy first with ≥10000 counted and 10000 blocked", got[0])
	}
}
