package origin

import (
	"fmt"
	"slices"
	"testing"
)

// chosen counts the servers n first tries at t0 went to, by name, each
// with key(i) as its hash key (nil: none).
func chosen(g *Upstream, n int, key func(i int) []byte) map[string]int {
	out := make(map[string]int)
	for i := range n {
		var k []byte
		if key != nil {
			k = key(i)
		}
		if s := pick(g, t0, k, 200, 0); s != nil {
			out[s.Name]++
		} else {
			out[""]++
		}
	}
	return out
}

func name(i int) string { return fmt.Sprintf("http://10.0.0.%d:80", i+1) }

// TestDrainTakesServerOutOfRotation: a drained server is chosen by no
// policy, in panic mode neither, while the others share its requests;
// undrained it is chosen again; with every server drained no server is
// chosen, for a group of one too.
func TestDrainTakesServerOutOfRotation(t *testing.T) {
	o := CheckOptions{HealthyAfter: 1, UnhealthyAfter: 1}
	tests := []struct {
		name    string
		servers int
		balance Balance
		drain   []int
		down    []int // taken out by active checks
		want    []int // the servers chosen, each at least once; none else
	}{
		{"round robin", 3, RoundRobin, []int{1}, nil, []int{0, 2}},
		{"least requests", 3, LeastRequests, []int{0}, nil, []int{1, 2}},
		{"random two", 3, RandomTwo, []int{2}, nil, []int{0, 1}},
		{"hash", 3, Hash, []int{1}, nil, []int{0, 2}},
		{"two of three", 3, RoundRobin, []int{0, 2}, nil, []int{1}},
		// Two of four down, one drained: one of the three in rotation
		// healthy is under half, so panic mode balances over the three,
		// never the drained one.
		{"panic mode", 4, RoundRobin, []int{3}, []int{0, 1}, []int{0, 1, 2}},
		// One down of the two in rotation: half healthy, no panic.
		{"drained not counted in panic's half", 3, RoundRobin, []int{2}, []int{0}, []int{1}},
		{"all drained", 3, RoundRobin, []int{0, 1, 2}, nil, nil},
		{"the only server", 1, RoundRobin, []int{0}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			drains := new(Drains)
			g := group(t, tt.servers, UpstreamOptions{Balance: tt.balance, Drains: drains})
			for _, i := range tt.down {
				g.Servers()[i].Checked(false, "status 500", o, t0)
			}
			for _, i := range tt.drain {
				if !drains.Drain(name(i)) {
					t.Fatalf("Drain(%s) reported no change", name(i))
				}
			}
			got := chosen(g, 300, func(i int) []byte { return fmt.Appendf(nil, "key-%d", i) })
			want := make(map[string]bool)
			for _, i := range tt.want {
				want[name(i)] = true
			}
			if tt.want == nil {
				want[""] = true // no server
			}
			for s := range got {
				if !want[s] {
					t.Errorf("chose %q %d times, want only %v", s, got[s], tt.want)
				}
			}
			for s := range want {
				if got[s] == 0 {
					t.Errorf("never chose %q, want each of %v (got %v)", s, tt.want, got)
				}
			}
			if tt.want == nil {
				trip := g.Start(t0, nil)
				if s := next(&trip, t0); s != nil || trip.Tries != 0 {
					t.Errorf("Next = %v after %d tries, want nil and none", s, trip.Tries)
				}
			}
			for _, i := range tt.drain {
				drains.Undrain(name(i))
			}
			if got := chosen(g, 300, func(i int) []byte { return fmt.Appendf(nil, "key-%d", i) }); len(tt.down) == 0 && len(got) != tt.servers {
				t.Errorf("undrained, chose %v, want all %d servers", got, tt.servers)
			}
		})
	}
}

// TestDrainMovesOnlyItsHashKeys: a drained server's keys go to their
// next server in hash order (where a retry of theirs would go), the
// others' keys stay; undrained, its keys come back.
func TestDrainMovesOnlyItsHashKeys(t *testing.T) {
	drains := new(Drains)
	g := group(t, 4, UpstreamOptions{Balance: Hash, Retries: RetryOptions{Attempts: 1, On: FailConnect, Budget: 1}, Drains: drains})
	const keys = 2000
	before, second := make([]string, keys), make([]string, keys)
	for i := range keys {
		k := fmt.Appendf(nil, "user-%d", i)
		trip := g.Start(t0, k)
		s := next(&trip, t0)
		trip.End(s, 0, FailConnect, 0, t0)
		before[i] = s.Name
		if trip.MayRetry(FailConnect, true, t0) {
			s = next(&trip, t0)
			trip.End(s, 200, 0, 0, t0)
			second[i] = s.Name
		}
	}
	drains.Drain(name(1))
	moved := 0
	for i := range keys {
		s := pick(g, t0, fmt.Appendf(nil, "user-%d", i), 200, 0)
		switch {
		case before[i] == name(1):
			moved++
			if second[i] != "" && s.Name != second[i] {
				t.Fatalf("key %d of the drained server went to %s, want its next server %s", i, s.Name, second[i])
			}
		case s.Name != before[i]:
			t.Fatalf("key %d moved from %s to %s, but its server is not drained", i, before[i], s.Name)
		}
	}
	if moved < keys/8 || moved > keys*3/8 {
		t.Errorf("%d of %d keys were on the drained server, want about a quarter", moved, keys)
	}
	drains.Undrain(name(1))
	for i := range keys {
		if s := pick(g, t0, fmt.Appendf(nil, "user-%d", i), 200, 0); s.Name != before[i] {
			t.Fatalf("undrained, key %d went to %s, want %s again", i, s.Name, before[i])
		}
	}
}

// TestDrainLetsTripsInFlightEnd: a try started before the drain ends as
// any other (its server keeps counting it until End), and a retry after
// a drain goes to a server in rotation; with none left it is refused as
// no_server.
func TestDrainLetsTripsInFlightEnd(t *testing.T) {
	drains := new(Drains)
	g := group(t, 3, UpstreamOptions{Retries: RetryOptions{Attempts: 2, On: FailConnect, Budget: 1}, Drains: drains})
	trip := g.Start(t0, nil)
	s := next(&trip, t0)
	drains.Drain(s.Name)
	if s.InFlight() != 1 {
		t.Fatalf("in flight %d after the drain, want the try's 1", s.InFlight())
	}
	trip.End(s, 0, FailConnect, 0, t0)
	if s.InFlight() != 0 {
		t.Errorf("in flight %d after End, want 0", s.InFlight())
	}
	for _, o := range g.Servers() {
		if o != s {
			drains.Drain(o.Name)
			break
		}
	}
	if !trip.MayRetry(FailConnect, true, t0) {
		t.Fatal("no retry with one server in rotation left untried")
	}
	r := next(&trip, t0)
	if r == nil || drains.Drained(r.Name) {
		t.Fatalf("retry went to %v, want the one server in rotation", r)
	}
	trip.End(r, 0, FailConnect, 0, t0)
	if trip.MayRetry(FailConnect, true, t0) {
		t.Error("a third try allowed with two of three servers drained")
	}
	if n := g.RetryCounts()["no_server"]; n != 1 {
		t.Errorf("no_server retries %d, want 1", n)
	}
}

// TestDrainsSharedAndCarried: one Drains serves several groups (a
// domain's routes), and Carry keeps only the names asked for.
func TestDrainsSharedAndCarried(t *testing.T) {
	drains := new(Drains)
	a := group(t, 2, UpstreamOptions{Drains: drains})
	b := group(t, 3, UpstreamOptions{Drains: drains, Balance: LeastRequests})
	drains.Drain(name(0))
	if drains.Drain(name(0)) {
		t.Error("a second Drain of the same server reported a change")
	}
	for _, g := range []*Upstream{a, b} {
		if got := chosen(g, 100, nil); got[name(0)] != 0 {
			t.Errorf("a group of %d servers chose the drained one %d times", len(g.Servers()), got[name(0)])
		}
	}
	drains.Drain(name(2))
	kept := drains.Carry(func(n string) bool { return n != name(2) })
	if got, want := kept.Names(), []string{name(0)}; !slices.Equal(got, want) {
		t.Errorf("carried %q, want %q", got, want)
	}
	if got, want := drains.Names(), []string{name(0), name(2)}; !slices.Equal(got, want) {
		t.Errorf("the original holds %q after Carry, want %q", got, want)
	}
	if (*Drains)(nil).Drained(name(0)) || len((*Drains)(nil).Carry(func(string) bool { return true }).Names()) != 0 {
		t.Error("a nil Drains drains something")
	}
	if drains.Undrain(name(1)) {
		t.Error("Undrain of a server not drained reported a change")
	}
}
