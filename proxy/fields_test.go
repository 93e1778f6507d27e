package proxy

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
)

func TestHeadersAlwaysAndNone(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	always := rule("burst", 5, 10*time.Second)
	always.Headers = "always"
	hidden := rule("hidden", 100, time.Hour)
	hidden.Headers = "none"
	e := newEnv(t, oneDomain(origin.URL, always, hidden))
	resp, _ := e.get("api.example.com", "/")
	// At a period start: the request counts in full until the period
	// ends, 10s on, and r grows a nanosecond later.
	want := map[string]string{
		"X-Ratelimit-Limit":     "5",
		"X-Ratelimit-Remaining": "4",
		"X-Ratelimit-Reset":     "11",
		"Ratelimit-Policy":      `"burst";q=5;w=10`,
		"Ratelimit":             `"burst";r=4;t=11`,
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("allowed response: %s = %q, want %q", k, got, v)
		}
	}
}

// TestRateLimitTIsWaitForMoreQuota follows a client through a sliding
// window: t is the wait until r grows by one, a client that waits t gets
// through, and on a 429 t equals Retry-After.
func TestRateLimitTIsWaitForMoreQuota(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	burst := rule("burst", 5, 10*time.Second)
	burst.Headers = "always"
	e := newEnv(t, oneDomain(origin.URL, burst))
	const ms = time.Millisecond
	steps := []struct {
		name      string
		advance   time.Duration
		status    int
		rateLimit string
		retry     string // Retry-After; "" for none
	}{
		{"first", 0, 200, `"burst";r=4;t=11`, ""},
		{"second", 0, 200, `"burst";r=3;t=11`, ""},
		{"third", 0, 200, `"burst";r=2;t=11`, ""},
		{"fourth", 0, 200, `"burst";r=1;t=11`, ""},
		{"fifth, r=0", 0, 200, `"burst";r=0;t=11`, ""},
		// prev 5 at 5.5s into the next period: 2.25 + curr < 5 lets 3
		// through; each r grows once 5×(10s−e)/10s < used − curr, at 6s.
		{"next period", 15500 * ms, 200, `"burst";r=2;t=1`, ""},
		{"next period, second", 0, 200, `"burst";r=1;t=1`, ""},
		// The time until the estimate empties would say 15: the next
		// request passes half a second later.
		{"next period, r=0", 0, 200, `"burst";r=0;t=1`, ""},
		{"over", 0, 429, `"burst";r=0;t=1`, "1"},
		{"at 6s, estimate exactly 5", 500 * ms, 429, `"burst";r=0;t=1`, "1"},
		// 5×3.999/10 + 3 < 5; with curr 4, r grows once 5×(10s−e)/10s < 1,
		// at 8s: 1.999s on.
		{"waited t", ms, 200, `"burst";r=0;t=2`, ""},
	}
	for _, st := range steps {
		e.clock.Advance(st.advance)
		resp, _ := e.get("api.example.com", "/")
		got := []string{strconv.Itoa(resp.StatusCode), resp.Header.Get("Ratelimit"), resp.Header.Get("Retry-After")}
		want := []string{strconv.Itoa(st.status), st.rateLimit, st.retry}
		if !slices.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", st.name, got, want)
		}
		if x := resp.Header.Get("X-Ratelimit-Reset"); !strings.HasSuffix(st.rateLimit, ";t="+x) {
			t.Errorf("%s: X-Ratelimit-Reset = %q, want t of %s", st.name, x, st.rateLimit)
		}
	}
}

func TestOriginFieldsAreMergedNotDuplicated(t *testing.T) {
	tests := []struct {
		name          string
		originRemain  string
		wantRemaining string
	}{
		{"origin more restrictive", "1", "1"},
		{"edge more restrictive", "500", "4"},
		{"origin value unreadable", "lots", "4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h := w.Header()
				h.Set("RateLimit-Policy", `"origin";q=1000;w=3600`)
				h.Set("RateLimit", `"origin";r=999;t=3600`)
				h.Set("X-RateLimit-Limit", "1000")
				h.Set("X-RateLimit-Remaining", tt.originRemain)
				h.Set("X-RateLimit-Reset", "3600")
			}))
			t.Cleanup(origin.Close)
			always := rule("edge", 5, time.Minute)
			always.Headers = "always"
			e := newEnv(t, oneDomain(origin.URL, always))
			resp, _ := e.get("api.example.com", "/")
			for _, f := range []string{"Ratelimit-Policy", "Ratelimit"} {
				items, err := httpsfv.UnmarshalList(resp.Header.Values(f))
				if err != nil || len(items) != 2 {
					t.Errorf("%s = %q (%v), want the origin's and edge's members in one list", f, resp.Header.Values(f), err)
				}
			}
			for _, f := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
				if n := len(resp.Header.Values(f)); n != 1 {
					t.Errorf("%s sent %d times, want once", f, n)
				}
			}
			if got := resp.Header.Get("X-Ratelimit-Remaining"); got != tt.wantRemaining {
				t.Errorf("X-RateLimit-Remaining = %q, want %q (the more restrictive)", got, tt.wantRemaining)
			}
		})
	}
}

func TestBlockedResponseReportsRefundedQuota(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	wide := rule("wide", 10, time.Minute)
	wide.Headers = "always"
	e := newEnv(t, oneDomain(origin.URL, wide, rule("narrow", 1, time.Minute)))
	e.get("api.example.com", "/")
	resp, _ := e.get("api.example.com", "/")
	if resp.StatusCode != 429 {
		t.Fatalf("got %d, want 429", resp.StatusCode)
	}
	// The blocked request was given back to "wide": it reports 9 remaining
	// (one forwarded request), not 8.
	if got := resp.Header.Get("Ratelimit"); !strings.Contains(got, `"wide";r=9;`) {
		t.Errorf("RateLimit = %q, want wide's r=9 after the refund", got)
	}
}
