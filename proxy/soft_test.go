package proxy

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestSoftLimitThroughProxy offers a client at 3× a soft limit of 100 a
// minute for three minutes on the injected clock: it is thinned to about
// the limit, not cut off; each refusal is a 429 with Retry-After: 1 and the
// fields, counted as outcome soft_limited; every tenth of every minute
// lets some through.
func TestSoftLimitThroughProxy(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	r := rule("soft", 100, time.Minute)
	r.Mode, r.Headers = "soft", "always"
	e := newEnv(t, oneDomain(origin.URL, r))
	start := e.clock.Now()
	const perMinute, minutes = 300, 3
	allowed, refused := 0, 0
	for m := range minutes {
		var tenths [10]int
		for i := range perMinute {
			e.clock.ns.Store(start.Add(time.Duration(m)*time.Minute + time.Duration(i)*time.Minute/perMinute).UnixNano())
			resp, _ := e.get("api.example.com", "/")
			switch resp.StatusCode {
			case 200:
				allowed++
				tenths[i*10/perMinute]++
			case 429:
				refused++
				if got := resp.Header.Get("Retry-After"); got != "1" {
					t.Fatalf("minute %d request %d: Retry-After %q, want 1", m, i, got)
				}
				if resp.Header.Get("Ratelimit-Policy") == "" || resp.Header.Get("Ratelimit") == "" {
					t.Fatalf("minute %d request %d: refused without the RateLimit fields", m, i)
				}
			default:
				t.Fatalf("minute %d request %d: status %d", m, i, resp.StatusCode)
			}
		}
		for i, n := range tenths {
			if n == 0 {
				t.Errorf("minute %d, tenth %d: nothing allowed", m, i)
			}
		}
	}
	// About 100 a minute; the first minute, with no history, a little
	// more. The bounds are over 6 standard deviations of the draws away.
	if allowed < 230 || allowed > 400 {
		t.Errorf("allowed %d of %d, want about %d", allowed, perMinute*minutes, 100*minutes)
	}
	soft := e.proxy.metrics.decisions.WithLabelValues("api.example.com", "soft", "block", "soft_limited")
	if got := testutil.ToFloat64(soft); got != float64(refused) {
		t.Errorf(`edge_rule_decisions_total{outcome="soft_limited"} = %v, want %d`, got, refused)
	}
}

// TestReloadMode: a rule's mode reloads, its counters carried: a key over
// a hard limit is still counted over it after switching to soft and back.
func TestReloadMode(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	r := rule("lim", 5, time.Hour)
	e := newEnv(t, oneDomain(origin.URL, r))
	for range 5 {
		e.get("api.example.com", "/")
	}
	for _, mode := range []string{"soft", "hard"} {
		r.Mode = mode
		res, err := e.proxy.Reload(compile(t, oneDomain(origin.URL, r)), mode)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.RulesChanged) != 1 || res.KeysCarried != 1 {
			t.Errorf("to %s: %+v, want the rule changed and its key carried", mode, res)
		}
	}
	if resp, _ := e.get("api.example.com", "/"); resp.StatusCode != 429 {
		t.Errorf("after reloads: got %d, want 429 (counters kept)", resp.StatusCode)
	}
}

// TestConfigViewShowsMode: /v1/config shows a soft rule's mode, and none
// for a hard one.
func TestConfigViewShowsMode(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	soft := rule("soft", 5, time.Minute)
	soft.Mode = "soft"
	e := newEnv(t, oneDomain(origin.URL, rule("hard", 5, time.Minute), soft))
	w := httptest.NewRecorder()
	e.proxy.AdminHandler().ServeHTTP(w, httptest.NewRequest("GET", "/v1/config", nil))
	var cv configView
	if err := json.Unmarshal(w.Body.Bytes(), &cv); w.Code != 200 || err != nil {
		t.Fatalf("GET /v1/config: %d %v", w.Code, err)
	}
	rs := cv.Domains[0].Rules
	if len(rs) != 2 || rs[0].Mode != "" || rs[1].Mode != "soft" || !rs[1].CountBlocked {
		t.Errorf("rules in /v1/config: %+v, want no mode, then soft counting blocked requests", rs)
	}
}
