package window

import (
	"math/big"
	"math/rand/v2"
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
			lim := Limit{Limit: tt.limit, Period: tt.period, CountBlocked: tt.countBlocked, Precision: Fine}
			s, err := New(Options{Capacity: 16, Limits: []Limit{lim}})
			if err != nil {
				t.Fatal(err)
			}
			k := s.KeyString(0, "client")
			ref := exactLog{period: int64(tt.period)}
			rng := rand.New(rand.NewPCG(1, 2))
			mean := float64(tt.period) / (tt.rho * float64(tt.limit) / float64(tt.cost))
			at := t0.UnixNano()
			checkFrom := at + 2*int64(tt.period)
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
				if at < checkFrom {
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
			if st := s.Stats(); st.FineLogs != 1 || st.FineFallback != 0 {
				t.Errorf("stats %+v, want one log and no fallback", st)
			}
		})
	}
}
