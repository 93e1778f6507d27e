package window

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// burst is n requests of one key at t0+at.
type burst struct {
	at time.Duration
	n  int
}

// TestResetIsWaitForMoreQuota checks Decision.Reset, the "t" of the
// RateLimit field, against a brute-force scan: from the decision's instant,
// with no more requests, the key's remaining quota is recomputed from its
// counts over time until it first exceeds the Remaining the decision
// reported. Reset must be that wait to the nanosecond, equal RetryAfter when
// blocked, and be 0 only when the full limit remains. Judge, given the same
// counts (what a shared store in exact mode reports), must agree.
func TestResetIsWaitForMoreQuota(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name    string
		limit   Limit
		history []burst // the decision checked is the last request's
		refund  bool    // take the last request back (another rule blocked it)
		share   int64   // decide with AllowLimit(share), as a node cut off from its PoP
		want    Decision
	}{
		{
			// The request stays in the estimate at full weight until the
			// period ends; just after it, the estimate drops below 1.
			name:    "first request, r>0",
			limit:   Limit{Limit: 5, Period: 10 * time.Second},
			history: []burst{{0, 1}},
			want:    Decision{Allowed: true, Remaining: 4, Reset: 10*time.Second + 1},
		},
		{
			// prev 6, curr 2 at 3s: 6×7/10 = 4.2, so r = 10−2−4 = 4; r is 5
			// once 6×(10s−e)/10s < 4, that is e > 3.333…s.
			name:    "r>0 with a previous period",
			limit:   Limit{Limit: 10, Period: 10 * time.Second},
			history: []burst{{0, 6}, {13 * time.Second, 2}},
			want:    Decision{Allowed: true, Remaining: 4, Reset: 333333334},
		},
		{
			// prev 5 at 5.5s: 2.25 + 3 < 5 lets 3 through and leaves r=0.
			// The next request is allowed once 5×(10s−e)/10s < 2, e > 6s:
			// t=1, where the time until the estimate empties said 15.
			name:    "r=0 allowed",
			limit:   Limit{Limit: 5, Period: 10 * time.Second},
			history: []burst{{0, 5}, {15500 * ms, 3}},
			want:    Decision{Allowed: true, Remaining: 0, Reset: 500*ms + 1},
		},
		{
			// Cloudflare's worked example (see TestCloudflareExample): the
			// allowed request leaves 50 − 19 − ⌊42×45/60⌋ = 0, and the
			// estimate falls below 50 once 42×(45s−Δ)/60s < 31.
			name:    "Cloudflare's example",
			limit:   Limit{Limit: 50, Period: time.Minute},
			history: []burst{{0, 42}, {75 * time.Second, 19}},
			want:    Decision{Allowed: true, Remaining: 0, Reset: 714285715},
		},
		{
			name:    "r=0 allowed, last of an empty history",
			limit:   Limit{Limit: 5, Period: 10 * time.Second},
			history: []burst{{2 * time.Second, 5}},
			want:    Decision{Allowed: true, Remaining: 0, Reset: 8*time.Second + 1},
		},
		{
			name:    "blocked",
			limit:   Limit{Limit: 5, Period: 10 * time.Second},
			history: []burst{{2 * time.Second, 6}},
			want:    Decision{Reset: 8*time.Second + 1, RetryAfter: 8*time.Second + 1},
		},
		{
			// prev 5 at 15.5s, 3 allowed, the 4th blocked: the same wait as
			// "r=0 allowed".
			name:    "blocked with a previous period",
			limit:   Limit{Limit: 5, Period: 10 * time.Second},
			history: []burst{{0, 5}, {15500 * ms, 4}},
			want:    Decision{Reset: 500*ms + 1, RetryAfter: 500*ms + 1},
		},
		{
			// The mitigation is kept to the millisecond after the period
			// start, rounded up: started at 2.0000005s it ends at 32.001s.
			name:    "blocked, mitigation started",
			limit:   Limit{Limit: 3, Period: 10 * time.Second, Mitigation: 30 * time.Second},
			history: []burst{{2 * time.Second, 3}, {2*time.Second + 500, 1}},
			want:    Decision{Reset: 30*time.Second + ms - 500, RetryAfter: 30*time.Second + ms - 500, Mitigated: true},
		},
		{
			// Answered from the blocked-key cache.
			name:    "blocked during a mitigation",
			limit:   Limit{Limit: 3, Period: 10 * time.Second, Mitigation: 30 * time.Second},
			history: []burst{{2 * time.Second, 4}, {17 * time.Second, 2}},
			want:    Decision{Reset: 15 * time.Second, RetryAfter: 15 * time.Second, Mitigated: true},
		},
		{
			// count_blocked: 9 counted by 1.5s, so the estimate stays over
			// the limit long after the 1s mitigation: 9×(10s−e′)/10s < 3
			// next period, e′ > 6.667s.
			name:    "mitigation shorter than the estimate's wait",
			limit:   Limit{Limit: 3, Period: 10 * time.Second, Mitigation: time.Second, CountBlocked: true},
			history: []burst{{0, 3}, {time.Second, 1}, {1500 * ms, 5}},
			want:    Decision{Reset: 8500*ms + 6666666667, RetryAfter: 8500*ms + 6666666667, Mitigated: true},
		},
		{
			name:    "count_blocked, blocked",
			limit:   Limit{Limit: 2, Period: time.Minute, CountBlocked: true},
			history: []burst{{0, 2}, {30 * time.Second, 4}},
			// curr 6: 6×(60s−e′)/60s < 2 once e′ > 40s, next period.
			want: Decision{Reset: 70*time.Second + 1, RetryAfter: 70*time.Second + 1},
		},
		{
			name:    "count_blocked, allowed r=0",
			limit:   Limit{Limit: 2, Period: time.Minute, CountBlocked: true},
			history: []burst{{30 * time.Second, 2}},
			want:    Decision{Allowed: true, Remaining: 0, Reset: 30*time.Second + 1},
		},
		{
			name:    "after a gap of periods",
			limit:   Limit{Limit: 5, Period: 10 * time.Second},
			history: []burst{{0, 5}, {35 * time.Second, 1}},
			want:    Decision{Allowed: true, Remaining: 4, Reset: 5*time.Second + 1},
		},
		{
			// At a boundary the estimate is prev′ = 3 at full weight plus 1;
			// it drops below 4 a nanosecond later.
			name:    "at a period boundary",
			limit:   Limit{Limit: 5, Period: 10 * time.Second},
			history: []burst{{0, 3}, {10 * time.Second, 1}},
			want:    Decision{Allowed: true, Remaining: 1, Reset: 1},
		},
		{
			name:    "a nanosecond before a period boundary",
			limit:   Limit{Limit: 5, Period: 10 * time.Second},
			history: []burst{{0, 3}, {10*time.Second - 1, 1}},
			want:    Decision{Allowed: true, Remaining: 1, Reset: 2},
		},
		{
			name:    "refunded, nothing left counted",
			limit:   Limit{Limit: 5, Period: 10 * time.Second},
			history: []burst{{3 * time.Second, 1}},
			refund:  true,
			want:    Decision{Allowed: true, Remaining: 5, Reset: 0},
		},
		{
			name:    "refunded, earlier requests counted",
			limit:   Limit{Limit: 5, Period: 10 * time.Second},
			history: []burst{{0, 2}, {3 * time.Second, 1}},
			refund:  true,
			want:    Decision{Allowed: true, Remaining: 3, Reset: 7*time.Second + 1},
		},
		{
			name:    "node share of the limit, r=0",
			limit:   Limit{Limit: 9, Period: 10 * time.Second},
			history: []burst{{0, 3}, {12 * time.Second, 1}},
			share:   3,
			// prev 3 at 2s: 2.4+1 < 3; used 1+2 = 3. 3×(10s−e)/10s < 2 once
			// e > 3.333…s.
			want: Decision{Allowed: true, Remaining: 0, Reset: 1333333334},
		},
		{
			name:    "720h period, r>0",
			limit:   Limit{Limit: 1_000_000, Period: 720 * time.Hour},
			history: []burst{{0, 999_999}, {1420 * time.Hour, 990}},
			// ⌊999999×20/720⌋ = 27777, r = 1000000 − 990 − 27777; r grows
			// once 999999×(720h−e)/720h < 27777.
			want: Decision{Allowed: true, Remaining: 971233, Reset: 1944001945},
		},
		{
			name:    "720h period, blocked",
			limit:   Limit{Limit: 1_000_000, Period: 720 * time.Hour},
			history: []burst{{time.Hour, 1_000_001}},
			want:    Decision{Reset: 719*time.Hour + 1, RetryAfter: 719*time.Hour + 1},
		},
		{
			name:    "720h period, mitigated for 400h",
			limit:   Limit{Limit: 3, Period: 720 * time.Hour, Mitigation: 400 * time.Hour},
			history: []burst{{0, 3}, {719 * time.Hour, 1}},
			// The estimate is below the limit 1h+1ns on; the mitigation
			// lasts longer.
			want: Decision{Reset: 400 * time.Hour, RetryAfter: 400 * time.Hour, Mitigated: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, 16, tt.limit)
			k := s.KeyString(0, "client")
			now, d := playHistory(s, k, tt.limit.Period, tt.history, tt.share)
			if tt.refund {
				d = s.Refund(k, d, now)
			}
			got := Decision{Allowed: d.Allowed, Remaining: d.Remaining, Reset: d.Reset, RetryAfter: d.RetryAfter, Mitigated: d.Mitigated}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			checkReset(t, s, k, tt.limit, tt.share, now, d)
		})
	}
}

// TestResetMatchesScanRandom runs checkReset on random histories.
func TestResetMatchesScanRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 7))
	periods := []time.Duration{time.Second, 10 * time.Second, time.Minute, time.Hour, 720 * time.Hour}
	for i := range 300 {
		l := Limit{
			Limit:        1 + rng.Int64N(20),
			Period:       periods[rng.IntN(len(periods))],
			CountBlocked: rng.IntN(3) == 0,
		}
		if rng.IntN(3) == 0 {
			l.Mitigation = time.Duration(rng.Int64N(int64(min(l.Period, 400*time.Hour))))
		}
		var h []burst
		at := time.Duration(0)
		for range 1 + rng.IntN(6) {
			at += time.Duration(rng.Int64N(int64(l.Period)))
			h = append(h, burst{at, 1 + rng.IntN(int(2*l.Limit))})
		}
		s := newStore(t, 16, l)
		k := s.KeyString(0, "client")
		now, d := playHistory(s, k, l.Period, h, 0)
		checkReset(t, s, k, l, 0, now, d)
		if t.Failed() {
			t.Fatalf("history %d: limit %+v, requests %v", i, l, h)
		}
	}
}

// playHistory sends history's requests for k, at times after the start of
// a period of p, and returns the instant and the decision of the last one.
func playHistory(s *Store, k Key, p time.Duration, history []burst, share int64) (time.Time, Decision) {
	start := time.Unix(0, t0.UnixNano()/int64(p)*int64(p))
	var now time.Time
	var d Decision
	for _, b := range history {
		now = start.Add(b.at)
		for range b.n {
			if share > 0 {
				d = s.AllowLimit(k, now, share)
			} else {
				d = s.Allow(k, now)
			}
		}
	}
	return now, d
}

// checkReset checks d, decided for k at now, against a scan of k's quota
// over time (see TestResetIsWaitForMoreQuota).
func checkReset(t *testing.T, s *Store, k Key, l Limit, share int64, now time.Time, d Decision) {
	t.Helper()
	st := s.Peek(k, now)
	limit := l.Limit
	if share > 0 {
		limit = min(share, limit)
	}
	remainingAt := func(at time.Duration) int64 { return refRemaining(limit, l.Period, st, now, now.Add(at)) }
	if got := remainingAt(0); got != d.Remaining {
		t.Fatalf("Remaining = %d, the counts %+v give %d", d.Remaining, st, got)
	}
	if !d.Allowed && d.Reset != d.RetryAfter {
		t.Errorf("blocked: Reset %v, RetryAfter %v: want them equal", d.Reset, d.RetryAfter)
	}
	// Scan forward in steps, checking that remaining never falls, to the
	// first step where it grew; then narrow to the nanosecond.
	horizon := 2*l.Period + l.Mitigation + time.Millisecond
	step := max(horizon/4000, 1)
	var want time.Duration = -1
	last := d.Remaining
	for at := step; at <= horizon+step; at += step {
		r := remainingAt(at)
		if r < last {
			t.Fatalf("remaining fell from %d to %d at +%v", last, r, at)
		}
		if last = r; r > d.Remaining {
			lo, hi := at-step, at // not grown at lo, grown at hi
			for hi-lo > 1 {
				mid := lo + (hi-lo)/2
				if remainingAt(mid) > d.Remaining {
					hi = mid
				} else {
					lo = mid
				}
			}
			want = hi
			break
		}
	}
	if want < 0 {
		// Never grows: the full limit is left.
		if d.Remaining != limit || d.Reset != 0 {
			t.Errorf("remaining %d never grows (limit %d): Reset = %v, want 0", d.Remaining, limit, d.Reset)
		}
		return
	}
	if d.Reset != want {
		t.Errorf("Reset = %v, but remaining first grows past %d at +%v", d.Reset, d.Remaining, want)
	}
	if d.Remaining == 0 && d.Reset < time.Second && ceilSec(d.Reset) != 1 {
		t.Errorf("r=0: t = %d, want at least 1", ceilSec(d.Reset))
	}
	if share > 0 {
		return // Peek and Judge describe the rule's own limit
	}
	// The store agrees: Peek sees the growth exactly then.
	if r := s.Peek(k, now.Add(want)).Remaining; r <= d.Remaining {
		t.Errorf("Peek at +%v: remaining %d, want more than %d", want, r, d.Remaining)
	}
	if r := s.Peek(k, now.Add(want-1)).Remaining; r != d.Remaining {
		t.Errorf("Peek at +%v: remaining %d, want still %d", want-1, r, d.Remaining)
	}
	// So does Judge, given the counts a shared store would report.
	var mitigation time.Duration
	if !st.MitigatedUntil.IsZero() {
		mitigation = st.MitigatedUntil.Sub(now)
	}
	elapsed := time.Duration(now.UnixNano() % int64(l.Period))
	j := l.Judge(Counts{Allowed: d.Allowed, Previous: st.Previous, Current: st.Current, Elapsed: elapsed, Mitigation: mitigation})
	if j.Remaining != d.Remaining || j.Reset != d.Reset || j.RetryAfter != d.RetryAfter {
		t.Errorf("Judge of the same counts = %+v, want Remaining %d, Reset %v, RetryAfter %v", j, d.Remaining, d.Reset, d.RetryAfter)
	}
}

// refRemaining recomputes, from the definition and in exact integers, how
// many requests a key in state st at now may send at t ≥ now if it sends
// nothing in between: limit − curr − ⌊prev×(P−e)/P⌋, at least 0, and 0
// while mitigated.
func refRemaining(limit int64, period time.Duration, st State, now, t time.Time) int64 {
	if !st.MitigatedUntil.IsZero() && t.Before(st.MitigatedUntil) {
		return 0
	}
	P := int64(period)
	prev, curr := st.Previous, st.Current
	switch t.UnixNano()/P - now.UnixNano()/P {
	case 0:
	case 1:
		prev, curr = curr, 0
	default:
		prev, curr = 0, 0
	}
	e := t.UnixNano() % P
	w := new(big.Int).Mul(big.NewInt(prev), big.NewInt(P-e))
	w.Quo(w, big.NewInt(P))
	return max(limit-curr-w.Int64(), 0)
}

func ceilSec(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
