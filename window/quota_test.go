package window

import (
	"fmt"
	"github.com/edgerate/edge/internal/algorithm"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, wherever the tests run
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

// TestQuotaBoundaries spends a quota just before each boundary, checks the
// refusal's Retry-After runs exactly to the boundary (refused 1ns before
// it, allowed at it), and the length of the period that ends there: a
// month end, a leap day, days of 23 and 25 hours where daylight saving
// time starts and ends, and a week that starts on Monday.
func TestQuotaBoundaries(t *testing.T) {
	berlin, newYork := mustZone(t, "Europe/Berlin"), mustZone(t, "America/New_York")
	cases := []struct {
		name     string
		reset    algorithm.Reset
		loc      *time.Location
		boundary time.Time // local midnight that ends the period
		length   time.Duration
	}{
		{"month end", algorithm.Monthly, time.UTC, time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC), 31 * 24 * time.Hour},
		{"february 2028 has a leap day", algorithm.Monthly, time.UTC, time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC), 29 * 24 * time.Hour},
		{"leap day itself", algorithm.Daily, time.UTC, time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC), 24 * time.Hour},
		{"day before leap day", algorithm.Daily, time.UTC, time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC), 24 * time.Hour},
		{"berlin spring forward", algorithm.Daily, berlin, time.Date(2026, 3, 30, 0, 0, 0, 0, berlin), 23 * time.Hour},
		{"berlin fall back", algorithm.Daily, berlin, time.Date(2026, 10, 26, 0, 0, 0, 0, berlin), 25 * time.Hour},
		{"new york spring forward", algorithm.Daily, newYork, time.Date(2026, 3, 9, 0, 0, 0, 0, newYork), 23 * time.Hour},
		{"new york fall back", algorithm.Daily, newYork, time.Date(2026, 11, 2, 0, 0, 0, 0, newYork), 25 * time.Hour},
		{"berlin month with a fall back", algorithm.Monthly, berlin, time.Date(2026, 11, 1, 0, 0, 0, 0, berlin), 31*24*time.Hour + time.Hour},
		{"week ends on monday", algorithm.Weekly, newYork, time.Date(2026, 12, 7, 0, 0, 0, 0, newYork), 7 * 24 * time.Hour},
		{"week across new year", algorithm.Weekly, time.UTC, time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
		{"week with spring forward", algorithm.Weekly, berlin, time.Date(2026, 3, 30, 0, 0, 0, 0, berlin), 7*24*time.Hour - time.Hour},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.boundary.Weekday(); c.reset == algorithm.Weekly && got != time.Monday {
				t.Fatalf("boundary is a %s, want a Monday", got)
			}
			s := newStore(t, 8, Limit{Algorithm: algorithm.Quota, Limit: 3, Reset: c.reset, Location: c.loc})
			k := s.KeyString(0, "client")
			start := c.boundary.Add(-c.length)
			for i, at := range []time.Time{start, start.Add(time.Hour), c.boundary.Add(-time.Nanosecond)} {
				if d := s.Allow(k, at); !d.Allowed {
					t.Fatalf("request %d at %s: got %+v, want allowed", i, at, d)
				}
			}
			// Refused from the period's start to its last nanosecond.
			for _, at := range []time.Time{start, c.boundary.Add(-time.Nanosecond)} {
				d := s.Allow(k, at)
				if got, want := d.RetryAfter, c.boundary.Sub(at); d.Allowed || got != want {
					t.Fatalf("at %s: got allowed %v, RetryAfter %v, want refused, RetryAfter %v", at, d.Allowed, got, want)
				}
				if d.Reset != d.RetryAfter || d.Remaining != 0 {
					t.Fatalf("at %s: got Reset %v, Remaining %d, want Reset = RetryAfter, 0", at, d.Reset, d.Remaining)
				}
			}
			d := s.Allow(k, c.boundary)
			if !d.Allowed || d.Remaining != 2 {
				t.Fatalf("at the boundary: got %+v, want allowed with 2 remaining", d)
			}
			next := s.params[0].cal.compute(c.boundary.UnixNano())
			if got, want := time.Duration(next.start-c.boundary.UnixNano()), time.Duration(0); got != want {
				t.Fatalf("next period starts %v after the boundary, want %v", got, want)
			}
		})
	}
}

// TestQuotaCost checks cost against a quota: allowed iff count + cost ≤
// limit, cost 0 iff the count is under the limit, a cost above the limit
// refused with no wait, and a refused request counted only under
// CountBlocked.
func TestQuotaCost(t *testing.T) {
	at := time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)
	toEnd := time.Date(2026, 6, 11, 0, 0, 0, 0, time.UTC).Sub(at)
	cases := []struct {
		name         string
		countBlocked bool
		costs        []int64
		wantAllowed  []bool
		wantRetry    time.Duration // of the last request
		wantCurrent  int64
	}{
		{"fills exactly", false, []int64{4, 6}, []bool{true, true}, 0, 10},
		{"one unit too many", false, []int64{4, 7}, []bool{true, false}, toEnd, 4},
		{"cost zero with room", false, []int64{9, 0}, []bool{true, true}, 0, 9},
		{"cost zero when full", false, []int64{10, 0}, []bool{true, false}, toEnd, 10},
		{"cost above the limit", false, []int64{11}, []bool{false}, 0, 0},
		{"refusals counted", true, []int64{8, 5}, []bool{true, false}, toEnd, 13},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t, 8, Limit{Algorithm: algorithm.Quota, Limit: 10, Reset: algorithm.Daily, CountBlocked: c.countBlocked})
			k := s.KeyString(0, "client")
			var d Decision
			for i, cost := range c.costs {
				if d = s.AllowN(k, at, cost); d.Allowed != c.wantAllowed[i] {
					t.Fatalf("request %d of cost %d: got %+v, want allowed %v", i, cost, d, c.wantAllowed[i])
				}
			}
			if d.RetryAfter != c.wantRetry {
				t.Fatalf("got RetryAfter %v, want %v", d.RetryAfter, c.wantRetry)
			}
			if got := s.Peek(k, at).Current; got != c.wantCurrent {
				t.Fatalf("got count %d, want %d", got, c.wantCurrent)
			}
		})
	}
}

// TestQuotaRefundAndMitigation checks that a refund returns units within
// their period, and that a mitigation longer than the period outlasts the
// reset.
func TestQuotaRefundAndMitigation(t *testing.T) {
	at := time.Date(2026, 6, 10, 23, 0, 0, 0, time.UTC)
	s := newStore(t, 8, Limit{Algorithm: algorithm.Quota, Limit: 1, Reset: algorithm.Daily, Mitigation: 2 * time.Hour})
	k := s.KeyString(0, "client")
	d := s.Allow(k, at)
	if !d.Allowed {
		t.Fatalf("first: got %+v, want allowed", d)
	}
	if got := s.Refund(k, d, at); got.Remaining != 1 || got.Reset != 0 {
		t.Fatalf("refund: got Remaining %d, Reset %v, want 1, 0", got.Remaining, got.Reset)
	}
	s.Allow(k, at)
	d = s.Allow(k, at)
	if got, want := d.RetryAfter, 2*time.Hour; d.Allowed || !d.Mitigated || got != want {
		t.Fatalf("over: got %+v, want refused, mitigated, RetryAfter %v", d, want)
	}
	if d = s.Allow(k, at.Add(time.Hour+time.Minute)); d.Allowed || !d.Mitigated {
		t.Fatalf("after the reset, in the mitigation: got %+v, want refused", d)
	}
	if d = s.Allow(k, at.Add(2*time.Hour)); !d.Allowed {
		t.Fatalf("after the mitigation: got %+v, want allowed", d)
	}
}

// TestQuotaClockBack checks that a clock going back to the previous period
// does not return spent quota.
func TestQuotaClockBack(t *testing.T) {
	day := time.Date(2026, 6, 10, 0, 0, 0, 0, time.UTC)
	s := newStore(t, 8, Limit{Algorithm: algorithm.Quota, Limit: 1, Reset: algorithm.Daily})
	k := s.KeyString(0, "client")
	if d := s.Allow(k, day); !d.Allowed {
		t.Fatalf("first: got %+v, want allowed", d)
	}
	if d := s.Allow(k, day.Add(-time.Minute)); d.Allowed {
		t.Fatalf("a minute back, in yesterday: got %+v, want refused", d)
	}
}

// TestQuotaKeysAreNeverEvicted fills a store with quota keys that have
// spent little of their quota, which a window's key would be evicted for;
// new keys then go to the overflow counter, and every quota key keeps its
// count until its reset, when it may be reclaimed.
func TestQuotaKeysAreNeverEvicted(t *testing.T) {
	at := time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)
	const n = 64
	s := newStore(t, n,
		Limit{Algorithm: algorithm.Quota, Limit: 1000, Reset: algorithm.Monthly},
		Limit{Limit: 1000, Period: time.Minute})
	for i := range n {
		if d := s.Allow(s.KeyString(0, fmt.Sprint(i)), at); !d.Allowed || d.Overflow {
			t.Fatalf("quota key %d: got %+v, want allowed in its own slot", i, d)
		}
	}
	for i := range 10 * n {
		for rule := range 2 {
			if d := s.Allow(s.KeyString(rule, fmt.Sprint("new", i)), at.Add(time.Duration(i)*time.Second)); !d.Overflow {
				t.Fatalf("new key %d of rule %d: got %+v, want counted as overflow", i, rule, d)
			}
		}
	}
	for i := range n {
		if st := s.Peek(s.KeyString(0, fmt.Sprint(i)), at); !st.Tracked || st.Current != 1 {
			t.Fatalf("quota key %d: got %+v, want tracked with count 1", i, st)
		}
	}
	if st := s.Stats(); st.Evicted != 0 || st.ExpiredReclaimed != 0 {
		t.Fatalf("Stats() = %+v, want nothing evicted or reclaimed", st)
	}
	nextMonth := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	if d := s.Allow(s.KeyString(1, "after the reset"), nextMonth); d.Overflow {
		t.Fatalf("a new key after the reset: got %+v, want a slot of an expired quota key", d)
	}
}

// TestQuotaAllocations checks that a decision allocates nothing, within a
// period and with a clock that goes back to the previous one.
func TestQuotaAllocations(t *testing.T) {
	s := newStore(t, 8, Limit{Algorithm: algorithm.Quota, Limit: 1 << 30, Reset: algorithm.Weekly, Location: mustZone(t, "Europe/Berlin")})
	k := s.KeyString(0, "client")
	at := time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)
	s.Allow(k, at)
	if got := testing.AllocsPerRun(100, func() { s.Allow(k, at) }); got != 0 {
		t.Fatalf("got %v allocations a decision, want 0", got)
	}
	// A clock going back and forth across a boundary: the earlier period
	// is computed each time and never cached.
	back := at.Add(-7 * 24 * time.Hour)
	if got := testing.AllocsPerRun(100, func() { s.Allow(k, back); s.Allow(k, at) }); got != 0 {
		t.Fatalf("clock going back and forth: got %v allocations, want 0", got)
	}
}

// TestQuotaCarry checks that counters carry to a rule with the same reset
// and zone, and that a changed reset or zone is refused.
func TestQuotaCarry(t *testing.T) {
	at := time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)
	old := Limit{Algorithm: algorithm.Quota, Limit: 5, Reset: algorithm.Daily, Identity: 7}
	cases := []struct {
		name    string
		next    Limit
		wantErr bool
	}{
		{"limit changed", Limit{Algorithm: algorithm.Quota, Limit: 9, Reset: algorithm.Daily, Identity: 7}, false},
		{"reset changed", Limit{Algorithm: algorithm.Quota, Limit: 5, Reset: algorithm.Weekly, Identity: 7}, true},
		{"zone changed", Limit{Algorithm: algorithm.Quota, Limit: 5, Reset: algorithm.Daily, Identity: 7, Location: mustZone(t, "Europe/Berlin")}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t, 8, old)
			s.AllowN(s.KeyString(0, "client"), at, 3)
			dst, err := New(Options{Capacity: 8, Limits: []Limit{c.next}, SeedFrom: s})
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.CarryAt(dst, []int{0}, at)
			if got := err != nil; got != c.wantErr {
				t.Fatalf("got error %v, want error %v", err, c.wantErr)
			}
			if c.wantErr {
				return
			}
			if got := dst.Peek(dst.KeyString(0, "client"), at).Current; got != 3 {
				t.Fatalf("got count %d after carry, want 3", got)
			}
		})
	}
}
