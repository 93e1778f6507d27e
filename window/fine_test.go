package window

import (
	"github.com/edgerate/edge/internal/algorithm"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// refTick is the tick of t (ns since the epoch) in a period of p ns,
// computed with big integers, independently of the store: ⌊t×fineTicks/p⌋.
func refTick(t, p int64) int64 {
	q := new(big.Int).Mul(big.NewInt(t), big.NewInt(fineTicks))
	m := new(big.Int)
	q.DivMod(q, big.NewInt(p), m) // Euclidean: floor for p > 0
	return q.Int64()
}

// refTickStart is the first ns of tick k: ⌈k×p/fineTicks⌉.
func refTickStart(k, p int64) int64 {
	n := new(big.Int).Mul(big.NewInt(k), big.NewInt(p))
	n.Add(n, big.NewInt(fineTicks-1))
	q := new(big.Int)
	q.Div(n, big.NewInt(fineTicks))
	return q.Int64()
}

// exactLog is the reference of a Fine key: every unit's tick, and a unit
// counts while fewer than fineTicks ticks old.
type exactLog struct {
	ticks  []int64
	period int64
}

func (r *exactLog) count(t int64) (n int, now int64) {
	now = refTick(t, r.period)
	for _, k := range r.ticks {
		if now-k < fineTicks {
			n++
		}
	}
	return n, now
}

// retry is the wait from t until fewer than target units count.
func (r *exactLog) retry(t int64, target int) time.Duration {
	n, now := r.count(t)
	if n < target {
		return 0
	}
	live := r.ticks[len(r.ticks)-n:]
	k := live[len(live)-target] // the target-th newest
	_ = now
	return time.Duration(refTickStart(k+fineTicks, r.period) - t)
}

// TestFineExact replays Poisson sources near and over their limit through
// a Fine rule and an exact log of ticks side by side: once the units
// placed at promotion have left the window (two periods in), every
// decision, Remaining and RetryAfter is the exact log's.
func TestFineExact(t *testing.T) {
	for _, tt := range []struct {
		name         string
		limit        int64
		period       time.Duration
		rho          float64
		countBlocked bool
		cost         int64
	}{
		{"at the limit, count all", 100, time.Minute, 1.0, true, 1},
		{"at the limit, count admitted", 100, time.Minute, 1.0, false, 1},
		{"just under", 100, time.Minute, 0.9, true, 1},
		{"over, count admitted", 100, time.Minute, 1.3, false, 1},
		{"abusive, count all", 100, time.Minute, 20, true, 1},
		{"small limit", 3, time.Second, 1.1, true, 1},
		{"odd period", 50, 7777 * time.Millisecond, 1.0, false, 1},
		{"cost 3", 60, time.Minute, 1.0, false, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lim := Limit{Limit: tt.limit, Period: tt.period, CountBlocked: tt.countBlocked, Precision: algorithm.Fine}
			s, err := New(Options{Capacity: 16, Limits: []Limit{lim}})
			if err != nil {
				t.Fatal(err)
			}
			k := s.KeyString(0, "client")
			ref := exactLog{period: int64(tt.period)}
			rng := rand.New(rand.NewPCG(1, 2))
			mean := float64(tt.period) / (tt.rho * float64(tt.limit) / float64(tt.cost))
			at := t0.UnixNano()
			// Units placed at a promotion are exact once they have left
			// the window: a period on.
			promoted, logs := int64(0), 0
			checked, refused := 0, 0
			for at < t0.UnixNano()+20*int64(tt.period) || checked < 1000 {
				at += int64(rng.ExpFloat64()*mean) + 1
				n, _ := ref.count(at)
				target := int(tt.limit - tt.cost + 1)
				want := n < target
				d := s.AllowN(k, time.Unix(0, at), tt.cost)
				// The log counts what the store counted, so that the two
				// judge the same history even where the units placed at
				// promotion made them differ.
				if d.Allowed || tt.countBlocked {
					for range tt.cost {
						ref.ticks = append(ref.ticks, refTick(at, ref.period))
					}
				}
				if l := s.Stats().FineLogs; l != logs {
					if logs = l; l == 1 {
						promoted = at
					}
				}
				if logs == 0 || at-promoted < int64(tt.period)+int64(time.Millisecond) {
					continue
				}
				checked++
				if d.Allowed != want {
					t.Fatalf("at %v: allowed %v, exact %v (count %d)", time.Duration(at-t0.UnixNano()), d.Allowed, want, n)
				}
				after, _ := ref.count(at)
				if wantRem := max(tt.limit-int64(after), 0); d.Remaining != wantRem {
					t.Fatalf("at %v: remaining %d, want %d", time.Duration(at-t0.UnixNano()), d.Remaining, wantRem)
				}
				if !d.Allowed {
					refused++
					if want := max(ref.retry(at, target), 1); d.RetryAfter != want {
						t.Fatalf("at %v: RetryAfter %v, want %v", time.Duration(at-t0.UnixNano()), d.RetryAfter, want)
					}
				}
			}
			if checked < 100 || refused == 0 {
				t.Fatalf("checked %d decisions, %d refused: the case tests too little", checked, refused)
			}
			if st := s.Stats(); st.FineFallback != 0 {
				t.Errorf("stats %+v, want no fallback", st)
			}
		})
	}
}

// nearLimit sends k 60 requests of its 100 at now, and one more, which
// takes a log if one is free.
func nearLimit(s *Store, k Key, now time.Time) Decision {
	s.AllowN(k, now, 60)
	return s.Allow(k, now)
}

// TestFinePool: a Fine rule's keys near their limit take logs while the
// pool has them, and count in two counters (FineFallback) when it has
// none; a log comes back when its key is reset, or expired and reclaimed.
func TestFinePool(t *testing.T) {
	lim := Limit{Limit: 100, Period: time.Minute, Precision: algorithm.Fine}
	s, err := New(Options{Capacity: 1, Limits: []Limit{lim, lim}})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(s.params[0].fine.heads); got != 1 {
		t.Fatalf("pool of a 1-key store: %d logs, want 1", got)
	}
	a, b := s.KeyString(0, "a"), s.KeyString(0, "b")
	nearLimit(s, a, t0)
	if st := s.Stats(); st.FineLogs != 1 || st.FineFallback != 0 {
		t.Fatalf("after a: %+v, want 1 log, no fallback", st)
	}
	// b has no room in a 1-key store: it is counted in the overflow
	// counter, which is a window like any other.
	s2, _ := New(Options{Capacity: 2, Limits: []Limit{lim}})
	a2, b2 := s2.KeyString(0, "a"), s2.KeyString(0, "b")
	nearLimit(s2, a2, t0)
	nearLimit(s2, b2, t0)
	if st := s2.Stats(); st.FineLogs != 1 || st.FineFallback != 1 {
		t.Fatalf("two keys, one log: %+v, want 1 log and 1 fallback", st)
	}
	if !s2.Reset(a2) {
		t.Fatal("reset a: not tracked")
	}
	if st := s2.Stats(); st.FineLogs != 0 {
		t.Fatalf("after reset: %d logs, want 0", st.FineLogs)
	}
	s2.Allow(b2, t0)
	if st := s2.Stats(); st.FineLogs != 1 {
		t.Fatalf("b after the reset: %d logs, want 1", st.FineLogs)
	}
	// Silent for a period, a key keeps its log, empty, with no pressure
	// on the pool (of one log).
	if d := s2.Allow(b2, t0.Add(time.Minute+time.Second)); d.Remaining != 99 {
		t.Fatalf("after a silent period: %+v, want 99 remaining", d)
	}
	if st := s2.Stats(); st.FineLogs != 1 {
		t.Fatalf("after a silent period: %d logs, want 1", st.FineLogs)
	}
	// An expired key's log comes back when its slot is reclaimed.
	c2 := s2.KeyString(0, "c")
	nearLimit(s2, b2, t0.Add(3*time.Minute))
	later := t0.Add(10 * time.Minute)
	for i := range 64 {
		s2.Allow(s2.KeyString(0, "x"+string(rune('a'+i))), later)
	}
	s2.Allow(c2, later)
	if st := s2.Stats(); st.FineLogs != 0 || st.ExpiredReclaimed == 0 {
		t.Fatalf("after b expired and was reclaimed: %+v, want 0 logs", st)
	}
	_ = b
}

// TestFinePressure: while fewer than an eighth of the logs are free, a
// key gives its log back once its count falls below a quarter of its
// limit; with logs to spare it keeps it while it sends.
func TestFinePressure(t *testing.T) {
	lim := Limit{Limit: 100, Period: time.Minute, Precision: algorithm.Fine}
	s, err := New(Options{Capacity: 128, Limits: []Limit{lim}})
	if err != nil {
		t.Fatal(err)
	}
	logs := len(s.params[0].fine.heads)
	if logs < 8 {
		t.Fatalf("pool of %d logs; the test needs 8 or more", logs)
	}
	var keys []Key
	for i := range logs {
		k := s.KeyString(0, "k"+string(rune('A'+i)))
		keys = append(keys, k)
		nearLimit(s, k, t0)
	}
	if st := s.Stats(); st.FineLogs != logs {
		t.Fatalf("%d logs taken, want %d", st.FineLogs, logs)
	}
	// 70 seconds on, the 61 units have left the window: one request
	// leaves a count of 1, under a quarter, and the pool is full.
	s.Allow(keys[0], t0.Add(70*time.Second))
	if st := s.Stats(); st.FineLogs != logs-1 {
		t.Fatalf("under pressure: %d logs, want %d", st.FineLogs, logs-1)
	}
	// ⌊logs/8⌋ free is no pressure: the next key keeps its log while it
	// is below a quarter of its limit.
	spare := logs / 8
	for i := 1; i < len(keys); i++ {
		s.Allow(keys[i], t0.Add(70*time.Second))
	}
	if st := s.Stats(); st.FineLogs != logs-spare {
		t.Fatalf("with %d free: %d logs, want %d", spare, st.FineLogs, logs-spare)
	}
}

// TestFineEdges covers the bug classes every limiter hits, under Fine
// precision, on a key with a log.
func TestFineEdges(t *testing.T) {
	lim := Limit{Limit: 100, Period: time.Minute, Precision: algorithm.Fine, Mitigation: 10 * time.Second}
	s, err := New(Options{Capacity: 128, Limits: []Limit{lim}})
	if err != nil {
		t.Fatal(err)
	}
	k := s.KeyString(0, "k")
	nearLimit(s, k, t0)
	if s.Stats().FineLogs != 1 {
		t.Fatal("no log")
	}
	// n > limit: refused, RetryAfter 0, nothing counted.
	if d := s.AllowN(k, t0, 101); d.Allowed || d.RetryAfter != 0 {
		t.Errorf("cost 101: %+v, want refused with no RetryAfter", d)
	}
	if d := s.AllowN(k, t0, 39); !d.Allowed || d.Remaining != 0 {
		t.Errorf("cost 39 of the last 39: %+v, want allowed with 0 remaining", d)
	}
	// Refused: a mitigation of 10s starts; RetryAfter is the later of
	// it and the window's wait (60s: every unit is at t0).
	d := s.Allow(k, t0.Add(time.Second))
	if d.Allowed || !d.Mitigated || d.RetryAfter != 59*time.Second {
		t.Errorf("over: %+v, want refused, mitigated, RetryAfter 59s", d)
	}
	// Time going backwards, within the period and to an earlier one: no
	// panic, still refused.
	for _, at := range []time.Time{t0.Add(-time.Millisecond), t0.Add(-time.Hour), time.Unix(-1e9, 0)} {
		if d := s.Allow(k, at); d.Allowed || d.RetryAfter <= 0 {
			t.Errorf("at %v: %+v, want refused with a wait", at, d)
		}
	}
	// Exactly at RetryAfter the window allows again.
	if d := s.Allow(k, t0.Add(time.Minute)); !d.Allowed {
		t.Errorf("at t0+60s: %+v, want allowed", d)
	}
	// A gap of two periods or more: everything has left.
	if d := s.Allow(k, t0.Add(5*time.Minute)); !d.Allowed || d.Remaining != 99 {
		t.Errorf("after a gap: %+v, want allowed with 99 left", d)
	}
	// Before 1970 on a fresh key.
	k2 := s.KeyString(0, "old")
	old := time.Unix(-86400*400, 123)
	nearLimit(s, k2, old)
	if s.Stats().FineLogs != 2 {
		t.Fatal("no log before 1970")
	}
	if d := s.AllowN(k2, old, 39); !d.Allowed || d.Remaining != 0 {
		t.Errorf("before 1970: %+v, want allowed with 0 left", d)
	}
	// Its units count from the start of their tick (1/32768 of the
	// period), 123ns before old.
	if d := s.Allow(k2, old.Add(time.Second)); d.Allowed || d.RetryAfter != 59*time.Second-123 {
		t.Errorf("before 1970, over: %+v, want refused for 59s − 123ns", d)
	}
}

// TestFineRefundChargePeek: Refund takes a log's units back, Charge adds
// units to it, and Peek reads its exact count.
func TestFineRefundChargePeek(t *testing.T) {
	lim := Limit{Limit: 100, Period: time.Minute, Precision: algorithm.Fine}
	s, err := New(Options{Capacity: 16, Limits: []Limit{lim}})
	if err != nil {
		t.Fatal(err)
	}
	k := s.KeyString(0, "k")
	nearLimit(s, k, t0)
	at := t0.Add(30 * time.Second)
	if st := s.Peek(k, at); st.Estimate != 61 || st.Remaining != 39 || !st.Tracked {
		t.Errorf("peek: %+v, want estimate 61, 39 remaining", st)
	}
	d := s.AllowN(k, at, 10)
	if d.Remaining != 29 {
		t.Errorf("after 10: remaining %d, want 29", d.Remaining)
	}
	if d = s.Refund(k, d, at); d.Remaining != 39 {
		t.Errorf("refunded: remaining %d, want 39", d.Remaining)
	}
	s.Charge(k, 39, at)
	st := s.Peek(k, at)
	if st.Estimate != 100 || st.Remaining != 0 || st.RetryAfter != 30*time.Second {
		t.Errorf("charged: %+v, want estimate 100, none remaining, RetryAfter 30s", st)
	}
	if st.Current != 100 || st.Previous != 0 {
		t.Errorf("charged: previous %d current %d, want 0 and 100", st.Previous, st.Current)
	}
	// Over the log's size, the count is estimated from the eighths.
	s.Charge(k, 100, at)
	if st := s.Peek(k, at); st.Estimate != 200 {
		t.Errorf("charged past the log: estimate %v, want 200", st.Estimate)
	}
}

// TestFineCarry: a reload keeps a Fine key's count, to a Standard rule
// and to a Fine one (which counts it in two counters until it takes a log
// again).
func TestFineCarry(t *testing.T) {
	fine := Limit{Limit: 100, Period: time.Minute, Precision: algorithm.Fine}
	std := Limit{Limit: 100, Period: time.Minute}
	for _, to := range []Limit{std, fine} {
		t.Run(to.Precision.String(), func(t *testing.T) {
			s, _ := New(Options{Capacity: 16, Limits: []Limit{fine}})
			k := s.KeyString(0, "k")
			nearLimit(s, k, t0.Add(10*time.Second))
			s.AllowN(k, t0.Add(70*time.Second), 20) // 61 in the previous period, 20 now
			dst, _ := New(Options{Capacity: 16, Limits: []Limit{to}, SeedFrom: s})
			if n, err := s.Carry(dst, []int{0}); n != 1 || err != nil {
				t.Fatalf("carry: %d, %v", n, err)
			}
			at := t0.Add(70 * time.Second)
			before, after := s.Peek(k, at), dst.Peek(dst.KeyString(0, "k"), at)
			if after.Current != 20 || after.Estimate < before.Estimate || after.Estimate > before.Estimate+1 {
				t.Errorf("carried %+v from %+v: want current 20 and the same estimate", after, before)
			}
			if dst.Stats().FineLogs != 0 {
				t.Error("carried into a log")
			}
		})
	}
}

// TestFineNoAllocs: a decision on a key with a log allocates nothing, nor
// does taking or giving back a log.
func TestFineNoAllocs(t *testing.T) {
	s, _ := New(Options{Capacity: 1024, Limits: []Limit{{Limit: 100, Period: time.Minute, Precision: algorithm.Fine}}})
	k := s.KeyString(0, "k")
	at := t0
	allocs := testing.AllocsPerRun(1000, func() {
		at = at.Add(37 * time.Millisecond)
		s.Allow(k, at)
		if s.Stats().FineLogs == 0 {
			nearLimit(s, k, at)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations a decision, want 0", allocs)
	}
}

// TestFineSaturated: counts at 2³²−1 carried or merged into a Fine rule
// stay counts, never taken for the mark of a key with a log.
func TestFineSaturated(t *testing.T) {
	std := Limit{Limit: 100, Period: time.Minute}
	fine := Limit{Limit: 100, Period: time.Minute, Precision: algorithm.Fine}
	s, _ := New(Options{Capacity: 16, Limits: []Limit{std}})
	k := s.KeyString(0, "k")
	s.Charge(k, MaxCost, t0)
	for range 5000 {
		s.Charge(k, MaxCost, t0) // saturates at 2³²−1
	}
	s.Allow(k, t0.Add(time.Minute)) // the saturated count is now the previous one
	dst, _ := New(Options{Capacity: 16, Limits: []Limit{fine}, SeedFrom: s})
	if n, err := s.Carry(dst, []int{0}); n != 1 || err != nil {
		t.Fatalf("carry: %d, %v", n, err)
	}
	dk := dst.KeyString(0, "k")
	if d := dst.Allow(dk, t0.Add(time.Minute)); d.Allowed {
		t.Errorf("carried saturated key allowed: %+v", d)
	}
	if dst.Merge(dk, t0.Add(time.Minute), 1<<40, 1<<40) && dst.Stats().FineLogs > 1 {
		t.Error("merged counts taken for a log")
	}
	if d := dst.Allow(dk, t0.Add(time.Minute)); d.Allowed {
		t.Errorf("merged saturated key allowed: %+v", d)
	}
}

// TestFineSweep: while the pool runs short, decisions of a Fine rule
// reclaim the slots of expired keys, and with them their logs.
func TestFineSweep(t *testing.T) {
	lim := Limit{Limit: 100, Period: time.Minute, Precision: algorithm.Fine}
	s, err := New(Options{Capacity: 1024, Limits: []Limit{lim}, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	logs := len(s.params[0].fine.heads)
	if logs/8 < 4 {
		t.Fatalf("pool of %d logs; the test needs an eighth to be more than an admission sweeps", logs)
	}
	for i := range logs {
		nearLimit(s, s.KeyString(0, strconv.Itoa(i)), t0)
	}
	if got := s.Stats().FineLogs; got != logs {
		t.Fatalf("%d logs taken, want %d", got, logs)
	}
	// Two periods on every key has expired; one key keeps deciding, at
	// cost 0 so that it neither takes a log nor is ever blocked (and
	// answered by the blocked-key cache, which sweeps nothing).
	k := s.KeyString(0, "active")
	for i := range 2000 {
		s.AllowN(k, t0.Add(3*time.Minute+time.Duration(i)*time.Millisecond), 0)
	}
	st := s.Stats()
	if st.FineLogs > logs-logs/8 || st.ExpiredReclaimed == 0 {
		t.Errorf("after 2000 decisions: %+v; want logs of expired keys reclaimed until the pool is no longer short", st)
	}
}
