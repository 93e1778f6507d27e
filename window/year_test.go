package window

import (
	"github.com/edgerate/edge/internal/algorithm"
	"strconv"
	"testing"
	"time"
)

// year is Lyft's longest unit: 365 days, longer than MaxSpan.
const year = 365 * 24 * time.Hour

// TestYearWindow counts a window of a year, longer than MaxSpan, at the
// edges of its epoch-aligned periods, with clocks from before the epoch to
// the end of int64 nanoseconds (past 2114 a block is no longer cached: its
// end does not fit the cache's 63 bits, so every request is judged from
// the table). Every wait is exact to the nanosecond: refused one
// nanosecond before it, allowed at it.
func TestYearWindow(t *testing.T) {
	const P = int64(year)
	bases := []struct {
		name string
		at   time.Time
	}{
		{"1901", time.Date(1901, 3, 1, 0, 0, 0, 0, time.UTC)},
		{"2026", time.Date(2026, 12, 1, 4, 55, 0, 0, time.UTC)},
		{"2113", time.Date(2113, 12, 31, 0, 0, 0, 0, time.UTC)},
		{"2258", time.Date(2258, 6, 1, 0, 0, 0, 0, time.UTC)},
	}
	for _, b := range bases {
		n := b.at.UnixNano()
		w := n / P
		if n%P < 0 {
			w--
		}
		S := w * P // the start of the period holding b.at
		at := func(ns int64) time.Time { return time.Unix(0, S+ns) }
		t.Run(b.name+"/sliding", func(t *testing.T) {
			s := newStore(t, 10, Limit{Limit: 10, Period: year, Mitigation: time.Hour})
			if got := s.Limit(0); got.Period != year || got.Mitigation != 0 {
				t.Fatalf("counts by %+v, want a year's period and no mitigation", got)
			}
			k := s.KeyString(0, "a")
			for i := range 10 {
				if d := s.Allow(k, at(0)); !d.Allowed || d.Remaining != int64(9-i) {
					t.Fatalf("request %d at the period's start: %+v", i, d)
				}
			}
			steps := []struct {
				name    string
				ns      int64
				allowed bool
				retry   time.Duration // when refused
			}{
				// 10 counted at the start: the estimate is 10 until the
				// next period starts, and 10×(P−e)/P after.
				{"over at the start", 0, false, year + 1},
				{"last ns of the period", P - 1, false, 2},
				{"first ns of the next", P, false, 1},
				{"a ns later", P + 1, true, 0},
				// curr 1: allowed once 10×(P−e)/P < 9, e > P/10.
				{"over again", P + 1, false, year / 10},
				{"a ns early", P + P/10, false, 1},
				{"on time", P + P/10 + 1, true, 0},
				// Two periods on, nothing is left.
				{"two periods on", 3*P + 5, true, 0},
			}
			for _, st := range steps {
				d := s.Allow(k, at(st.ns))
				if d.Allowed != st.allowed || d.Mitigated || (!d.Allowed && d.RetryAfter != st.retry) {
					t.Fatalf("%s: %+v, want allowed %v, RetryAfter %v", st.name, d, st.allowed, st.retry)
				}
			}
			if d := s.Allow(k, at(3*P+5)); d.Remaining != 8 {
				t.Fatalf("two periods on, the second request left %d, want 8", d.Remaining)
			}
			// The same counts judged by a shared store (package cluster).
			l := s.Limit(0)
			if d := l.JudgeCost(Counts{Previous: 10, Current: 1, Elapsed: 1}, 1); d.Allowed || d.RetryAfter != year/10 {
				t.Fatalf("JudgeCost: %+v, want refused for %v", d, year/10)
			}
		})
		t.Run(b.name+"/fixed", func(t *testing.T) {
			s := newStore(t, 10, Limit{Algorithm: algorithm.FixedWindow, Limit: 3, Period: year, CountBlocked: true})
			k := s.KeyString(0, "a")
			if d := s.Allow(k, at(0)); !d.Allowed || d.Reset != year {
				t.Fatalf("first ns of the period: %+v, want allowed, Reset a year", d)
			}
			for i := range 2 {
				if d := s.Allow(k, at(P-1)); !d.Allowed || d.Reset != 1 {
					t.Fatalf("request %d in the last ns: %+v, want allowed, Reset 1ns", i, d)
				}
			}
			for range 3 { // blocked, and cached from the second on
				if d := s.Allow(k, at(P-1)); d.Allowed || d.RetryAfter != 1 {
					t.Fatalf("over in the last ns: %+v, want refused for 1ns", d)
				}
			}
			if d := s.Allow(k, at(P)); !d.Allowed || d.Remaining != 2 || d.Reset != year {
				t.Fatalf("first ns of the next period: %+v, want allowed, 2 left, Reset a year", d)
			}
			s.Allow(k, at(P+P/2))
			s.Allow(k, at(P+P/2))
			if d := s.Allow(k, at(P+P/2)); d.Allowed || d.RetryAfter != year/2 {
				t.Fatalf("over mid-period: %+v, want refused for half a year", d)
			}
			if d := s.Allow(k, at(2*P-1)); d.Allowed || d.RetryAfter != 1 {
				t.Fatalf("a ns before the end: %+v, want refused for 1ns", d)
			}
			// Periods later, nothing is left.
			if d := s.Allow(k, at(3*P)); !d.Allowed || d.Remaining != 2 {
				t.Fatalf("two periods on: %+v", d)
			}
		})
	}
}

// TestYearIsLyftsPeriod: a year window's periods are Lyft's: its fixed
// window is keyed by (now ÷ 31536000) × 31536000 in Unix seconds and
// resets that many seconds later (src/limiter/cache_key.go,
// utils.CalculateReset).
func TestYearIsLyftsPeriod(t *testing.T) {
	s := newStore(t, 10, Limit{Algorithm: algorithm.FixedWindow, Limit: 5, Period: year})
	for i, now := range []time.Time{
		time.Date(2026, 12, 1, 4, 55, 7, 0, time.UTC),
		time.Date(2026, 12, 10, 0, 0, 0, 0, time.UTC), // 1,796,256,000 s = 56.96 years of 365 days
		time.Unix(57*31536000, 0),                     // the start of a Lyft year
		time.Unix(57*31536000-1, 0),
	} {
		const divider = 60 * 60 * 24 * 365
		start := now.Unix() / divider * divider
		reset := time.Duration(divider-now.Unix()%divider) * time.Second
		d := s.Allow(s.KeyString(0, strconv.Itoa(i)), now)
		if d.Reset != reset {
			t.Fatalf("at %v: Reset %v, want Lyft's %v (period start %d)", now, d.Reset, reset, start)
		}
	}
}

// TestOnlyPlainWindowsCountPastMaxSpan: a limit whose entries keep a time
// after the period's start (a soft window's warm-up, a fine log's ticks, a
// bucket's state) counts at most MaxSpan, as before.
func TestOnlyPlainWindowsCountPastMaxSpan(t *testing.T) {
	span := MaxSpan.Truncate(time.Millisecond)
	tests := []struct {
		name string
		l    Limit
		want time.Duration
	}{
		{"sliding", Limit{Limit: 1, Period: year}, year},
		{"fixed", Limit{Algorithm: algorithm.FixedWindow, Limit: 1, Period: year}, year},
		{"with a mitigation", Limit{Limit: 1, Period: year, Mitigation: time.Hour}, year},
		{"a leap year", Limit{Limit: 1, Period: year + 24*time.Hour}, MaxWindowPeriod},
		{"longer", Limit{Limit: 1, Period: 2 * year}, MaxWindowPeriod},
		{"soft", Limit{Limit: 1, Period: year, Soft: true}, span},
		{"soft fixed", Limit{Algorithm: algorithm.FixedWindow, Limit: 1, Period: year, Soft: true}, span},
		{"fine", Limit{Limit: 1, Period: year, Precision: algorithm.Fine}, span},
		{"fine above its largest limit", Limit{Limit: MaxFineLimit + 1, Period: year, Precision: algorithm.Fine}, year},
		{"token bucket", Limit{Algorithm: algorithm.TokenBucket, Limit: 1, Period: year}, span},
		{"leaky bucket", Limit{Algorithm: algorithm.LeakyBucket, Limit: 1, Period: year}, span},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, 10, tt.l)
			if got := s.Limit(0); got.Period != tt.want || got.Mitigation != 0 {
				t.Fatalf("counts by %+v, want a period of %v and no mitigation", got, tt.want)
			}
		})
	}
}
