package window

import (
	"github.com/edgerate/edge/internal/algorithm"
	"testing"
	"time"
)

// TestMergeBucket: a shared level (and what the node took since it sent
// its share) raises a bucket, never lowers it, stops at −burst tokens, and
// leaves a window alone.
func TestMergeBucket(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	bucket := Limit{Algorithm: algorithm.TokenBucket, Limit: 10, Period: 10 * time.Second} // 1 unit a second
	units := func(n int64) Level { return bucket.Units(n) }
	tests := []struct {
		name          string
		l             Limit
		taken         int64 // units taken locally first
		level         Level
		pending       int64
		wantOK        bool
		wantRemaining int64 // after merging, as Peek says
	}{
		{"raised to the shared level", bucket, 2, units(6), 0, true, 4},
		{"raised with what is pending", bucket, 2, units(6), 3, true, 1},
		{"never lowered", bucket, 7, units(3), 0, true, 3},
		{"down to -burst at most", bucket, 0, units(30), 0, true, 0},
		{"untracked key taken in", bucket, 0, units(5), 0, true, 5},
		{"a window is left alone", Limit{Limit: 10, Period: time.Minute}, 0, Level{Nanos: int64(time.Second)}, 0, false, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, 16, tt.l)
			k := s.KeyString(0, "x")
			if tt.taken > 0 {
				if d := s.AllowN(k, t0, tt.taken); !d.Allowed {
					t.Fatalf("taking %d: %+v", tt.taken, d)
				}
			}
			if got := s.MergeBucket(k, t0, tt.level, tt.pending); got != tt.wantOK {
				t.Errorf("MergeBucket = %v, want %v", got, tt.wantOK)
			}
			if got := s.Peek(k, t0).Remaining; got != tt.wantRemaining {
				t.Errorf("Remaining after the merge: got %d, want %d", got, tt.wantRemaining)
			}
		})
	}
	// At −burst tokens the wait for one is burst + 1 units.
	s := newStore(t, 16, bucket)
	k := s.KeyString(0, "x")
	s.MergeBucket(k, t0, units(30), 0)
	if d := s.Allow(k, t0); d.Allowed || d.RetryAfter != 11*time.Second {
		t.Errorf("at -burst: got %+v, want refused with RetryAfter 11s", d)
	}
}

// TestMergeFixedWindow: a fixed window takes in the shared count of its
// current period only (its previous period does not count); a bucket takes
// nothing from Merge.
func TestMergeFixedWindow(t *testing.T) {
	const P = time.Minute
	t0 := time.Unix(1_800_000_000, 0) // a period start
	tests := []struct {
		name       string
		l          Limit
		start      time.Duration // of the merged period, after t0
		prev, curr int64
		wantOK     bool
		wantCurr   int64
	}{
		{"current period raised, previous ignored", Limit{Algorithm: algorithm.FixedWindow, Limit: 20, Period: P}, 0, 9, 7, true, 7},
		{"a past period ignored", Limit{Algorithm: algorithm.FixedWindow, Limit: 20, Period: P}, -P, 0, 7, false, 2},
		{"a bucket takes nothing", Limit{Algorithm: algorithm.TokenBucket, Limit: 20, Period: P}, 0, 0, 7, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, 16, tt.l)
			k := s.KeyString(0, "x")
			s.AllowN(k, t0, 2)
			if got := s.Merge(k, t0.Add(tt.start), tt.prev, tt.curr); got != tt.wantOK {
				t.Errorf("Merge = %v, want %v", got, tt.wantOK)
			}
			if st := s.Peek(k, t0); st.Previous != 0 || st.Current != tt.wantCurr && !tt.l.Algorithm.Bucket() {
				t.Errorf("got previous %d current %d, want 0 and %d", st.Previous, st.Current, tt.wantCurr)
			}
		})
	}
}
