package window

import (
	"github.com/edgerate/edge/internal/algorithm"
	"testing"
	"time"
)

// queueStore is a store of one LeakyBucket queue rule.
func queueStore(t *testing.T, limit int64, period time.Duration, burst int64, maxDelay time.Duration) (*Store, Key) {
	t.Helper()
	s, err := New(Options{Capacity: 16, Limits: []Limit{{
		Algorithm: algorithm.LeakyBucket, Limit: limit, Period: period, Burst: burst, MaxDelay: maxDelay,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return s, s.KeyString(0, "client")
}

// TestQueueDelays sends requests at given offsets and checks each one's
// Delay, or its refusal and exact RetryAfter. nginx's limit_req with rate
// r, burst b and no nodelay serves the first request at once and delays
// the next b by 1/r, 2/r, … b/r: here burst 1 and max_delay b/r.
func TestQueueDelays(t *testing.T) {
	const ms = time.Millisecond
	type req struct {
		at    time.Duration // after the start
		cost  int64
		delay time.Duration // when allowed
		retry time.Duration // when refused: RetryAfter
	}
	cases := []struct {
		name     string
		limit    int64
		burst    int64
		maxDelay time.Duration
		reqs     []req
	}{
		{
			name: "nginx rate 10r/s burst 5", limit: 10, burst: 1, maxDelay: 500 * ms,
			reqs: []req{
				{cost: 1, delay: 0}, {cost: 1, delay: 100 * ms}, {cost: 1, delay: 200 * ms},
				{cost: 1, delay: 300 * ms}, {cost: 1, delay: 400 * ms}, {cost: 1, delay: 500 * ms},
				{cost: 1, retry: 100 * ms}, {cost: 1, retry: 100 * ms},
				// At 100ms the first queued one has gone: one more fits.
				{at: 100 * ms, cost: 1, delay: 500 * ms},
				{at: 100 * ms, cost: 1, retry: 100 * ms},
			},
		},
		{
			name: "spaced 1/r apart after the burst: the same delay each", limit: 10, burst: 1, maxDelay: 500 * ms,
			reqs: []req{
				{cost: 1, delay: 0}, {cost: 1, delay: 100 * ms}, {cost: 1, delay: 200 * ms},
				{at: 100 * ms, cost: 1, delay: 200 * ms}, {at: 200 * ms, cost: 1, delay: 200 * ms},
				{at: 300 * ms, cost: 1, delay: 200 * ms}, {at: 1000 * ms, cost: 1, delay: 0},
			},
		},
		{
			name: "burst 3 passes at once, then a queue", limit: 10, burst: 3, maxDelay: 250 * ms,
			reqs: []req{
				{cost: 1}, {cost: 1}, {cost: 1},
				{cost: 1, delay: 100 * ms}, {cost: 1, delay: 200 * ms}, {cost: 1, retry: 50 * ms},
			},
		},
		{
			name: "a unit of a third of a second, rounded up", limit: 3, burst: 1, maxDelay: time.Second,
			reqs: []req{
				{cost: 1}, {cost: 1, delay: 333333334}, {cost: 1, delay: 666666667},
				{cost: 1, delay: time.Second}, {cost: 1, retry: 333333334},
			},
		},
		{
			name: "cost: a turn of several units", limit: 10, burst: 3, maxDelay: 400 * ms,
			reqs: []req{
				{cost: 3}, {cost: 2, delay: 200 * ms}, {cost: 1, delay: 300 * ms}, {cost: 2, retry: 100 * ms},
				// Cost 0 waits for room for one unit and takes none.
				{cost: 0, delay: 400 * ms}, {cost: 1, delay: 400 * ms}, {cost: 0, retry: 100 * ms},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, k := queueStore(t, tc.limit, time.Second, tc.burst, tc.maxDelay)
			start := time.Unix(1_700_000_000, 0)
			for i, r := range tc.reqs {
				d := s.AllowN(k, start.Add(r.at), r.cost)
				allowed := r.retry == 0
				if d.Allowed != allowed || d.Delay != r.delay || d.RetryAfter != r.retry {
					t.Errorf("request %d at %v cost %d: got allowed %v delay %v retry %v, want %v %v %v",
						i, r.at, r.cost, d.Allowed, d.Delay, d.RetryAfter, allowed, r.delay, r.retry)
				}
			}
		})
	}
}

// TestQueueRetryAfterExact: a refused request is refused again at
// RetryAfter − 1ns and queued with the longest delay at RetryAfter.
func TestQueueRetryAfterExact(t *testing.T) {
	cases := []struct {
		name     string
		limit    int64
		burst    int64
		maxDelay time.Duration
	}{
		{"whole units", 10, 1, 500 * time.Millisecond},
		{"thirds of a second", 3, 2, 700 * time.Millisecond},
		{"a delay shorter than a unit", 1, 1, time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, k := queueStore(t, tc.limit, time.Second, tc.burst, tc.maxDelay)
			now := time.Unix(1_700_000_000, 0)
			var refused Decision
			for i := 0; i < 100; i++ {
				if refused = s.Allow(k, now); !refused.Allowed {
					break
				}
			}
			if refused.Allowed || refused.RetryAfter <= 0 {
				t.Fatalf("got %+v, want a refusal with a wait", refused)
			}
			var before Decision
			snapshot(s, k, func() { before = s.Allow(k, now.Add(refused.RetryAfter-1)) })
			if before.Allowed {
				t.Errorf("at RetryAfter − 1ns: got allowed (delay %v), want refused", before.Delay)
			}
			at := s.Allow(k, now.Add(refused.RetryAfter))
			if !at.Allowed || at.Delay != tc.maxDelay {
				t.Errorf("at RetryAfter: got allowed %v delay %v, want true %v", at.Allowed, at.Delay, tc.maxDelay)
			}
			// Reset is when a request would fit without waiting: after the
			// queued one's delay and its unit.
			want := at.Delay + (time.Second+time.Duration(tc.limit)-1)/time.Duration(tc.limit)
			if at.Remaining != 0 || at.Reset != want {
				t.Errorf("queued: got remaining %d reset %v, want 0 %v", at.Remaining, at.Reset, want)
			}
		})
	}
}

// TestQueueRefundGivesTheTurnBack: a queued request refunded (refused by
// another rule) frees its turn for the next one; one not refunded (a
// client gone while waiting) keeps it.
func TestQueueRefundGivesTheTurnBack(t *testing.T) {
	cases := []struct {
		name      string
		refund    bool
		wantDelay time.Duration
	}{
		{"refunded", true, 100 * time.Millisecond},
		{"kept", false, 200 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, k := queueStore(t, 10, time.Second, 1, time.Second)
			now := time.Unix(1_700_000_000, 0)
			s.Allow(k, now)
			d := s.Allow(k, now)
			if !d.Allowed || d.Delay != 100*time.Millisecond {
				t.Fatalf("got %+v, want queued for 100ms", d)
			}
			if tc.refund {
				s.Refund(k, d, now)
			}
			if got := s.Allow(k, now).Delay; got != tc.wantDelay {
				t.Errorf("next request: got delay %v, want %v", got, tc.wantDelay)
			}
		})
	}
}

// TestQueueNotCached: a refusal of a queue is not cached past the moment
// the queue takes requests again.
func TestQueueNotCached(t *testing.T) {
	s, k := queueStore(t, 10, time.Second, 1, 200*time.Millisecond)
	now := time.Unix(1_700_000_000, 0)
	for range 3 {
		s.Allow(k, now)
	}
	refused := s.Allow(k, now)
	if refused.Allowed || refused.RetryAfter != 100*time.Millisecond {
		t.Fatalf("got %+v, want refused for 100ms", refused)
	}
	if got := s.Allow(k, now.Add(refused.RetryAfter)); !got.Allowed {
		t.Errorf("at RetryAfter: got refused (retry %v), want queued", got.RetryAfter)
	}
}

// TestQueueNotCachedOverBurst: a request of a queue whose cost is more than
// the bucket holds is refused without caching a refusal for the requests
// of cost 1 that the queue still takes.
func TestQueueNotCachedOverBurst(t *testing.T) {
	s, k := queueStore(t, 10, time.Second, 2, 500*time.Millisecond)
	now := time.Unix(1_700_000_000, 0)
	for range 3 {
		s.Allow(k, now)
	}
	if got := s.AllowN(k, now, 3); got.Allowed || got.RetryAfter != 0 {
		t.Fatalf("cost 3: got %+v, want refused, no RetryAfter", got)
	}
	got := s.Allow(k, now)
	if !got.Allowed || got.Delay != 200*time.Millisecond {
		t.Errorf("cost 1 after: got allowed %v, Delay %v; want allowed, Delay 200ms", got.Allowed, got.Delay)
	}
}

// TestQueueCarriedAtNewLimit: a queue's level, requests waiting included,
// is carried whole to a rule of another limit: the next request queues
// behind those already waiting.
func TestQueueCarriedAtNewLimit(t *testing.T) {
	cases := []struct {
		name      string
		limit     int64
		wantDelay time.Duration
	}{
		// Six units of 100ms (level 600ms, one passed and five waiting)
		// are 300ms at 20 a second: the next request waits for all six.
		{"limit doubled", 20, 300 * time.Millisecond},
		{"limit kept", 10, 600 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old, k := queueStore(t, 10, time.Second, 1, time.Second)
			now := time.Unix(1_700_000_000, 0)
			for range 6 {
				old.Allow(k, now)
			}
			dst, err := New(Options{Capacity: 16, SeedFrom: old, Limits: []Limit{{
				Algorithm: algorithm.LeakyBucket, Limit: tc.limit, Period: time.Second, Burst: 1, MaxDelay: time.Second,
			}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := old.CarryAt(dst, []int{0}, now); err != nil {
				t.Fatal(err)
			}
			if d := dst.Allow(dst.KeyString(0, "client"), now); !d.Allowed || d.Delay != tc.wantDelay {
				t.Errorf("after carrying: got allowed %v delay %v, want true %v", d.Allowed, d.Delay, tc.wantDelay)
			}
		})
	}
}

// TestJudgeBucketQueue: a queue's Decision computed from the level a
// shared store reports is the one its own store gives: an allowed request
// waits until the level it found drains to let it fit, a refused one may
// retry once its turn is within MaxDelay. Limit 10 a second (a unit is
// 100ms), burst 1, max_delay 500ms: the level goes up to 600ms, above
// twice the bucket.
func TestJudgeBucketQueue(t *testing.T) {
	const ms = time.Millisecond
	queue := Limit{Algorithm: algorithm.LeakyBucket, Limit: 10, Period: time.Second, Burst: 1, MaxDelay: 500 * ms}
	meter := queue
	meter.MaxDelay = 0
	tests := []struct {
		name      string
		l         Limit
		b         BucketCounts
		cost      int64
		wantDelay time.Duration
		wantRetry time.Duration
	}{
		{"first fits", queue, BucketCounts{Allowed: true, Level: Level{Nanos: int64(100 * ms)}}, 1, 0, 0},
		{"third waits two turns", queue, BucketCounts{Allowed: true, Level: Level{Nanos: int64(300 * ms)}}, 1, 200 * ms, 0},
		{"cost 0 waits for room", queue, BucketCounts{Allowed: true, Level: Level{Nanos: int64(200 * ms)}}, 0, 200 * ms, 0},
		{"sixth waits max_delay", queue, BucketCounts{Allowed: true, Level: Level{Nanos: int64(600 * ms)}}, 1, 500 * ms, 0},
		{"refused until its turn is within max_delay", queue, BucketCounts{Level: Level{Nanos: int64(550 * ms)}}, 1, 0, 50 * ms},
		{"meter never waits", meter, BucketCounts{Allowed: true, Level: Level{Nanos: int64(100 * ms)}}, 1, 0, 0},
		{"meter refused until a unit drains", meter, BucketCounts{Level: Level{Nanos: int64(150 * ms)}}, 1, 0, 150 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.l.JudgeBucket(tt.b, tt.cost)
			if d.Allowed != tt.b.Allowed || d.Delay != tt.wantDelay || d.RetryAfter != tt.wantRetry {
				t.Errorf("got allowed %v, Delay %v, RetryAfter %v; want %v, %v, %v",
					d.Allowed, d.Delay, d.RetryAfter, tt.b.Allowed, tt.wantDelay, tt.wantRetry)
			}
		})
	}
}
