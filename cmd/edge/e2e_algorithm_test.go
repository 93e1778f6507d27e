package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
)

// TestEndToEndAlgorithms runs the built binary with one rule of each
// algorithm and checks what a client sees of each: the requests allowed,
// the refusal, Retry-After and the policy fields; and a cost header's 400.
// Periods of 720h keep the real clock's few milliseconds from mattering:
// a bucket refills one unit in days, and the fixed window's end is
// computed from the clock.
func TestEndToEndAlgorithms(t *testing.T) {
	bin := buildEdge(t)
	held, free := make(chan struct{}, 2), make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			<-free
		}
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	var freeOnce sync.Once
	defer freeOnce.Do(func() { close(free) })

	edge := startBinaryWith(t, bin, origin.URL, `
domains:
  - hosts: ["sliding.test"]
    rules: [{name: sw, limit: 2, period: 720h}]
  - hosts: ["fixed.test"]
    rules: [{name: fw, algorithm: fixed_window, limit: 2, period: 720h}]
  - hosts: ["token.test"]
    rules: [{name: tb, algorithm: token_bucket, limit: 3, period: 720h, burst: 2}]
  - hosts: ["leaky.test"]
    rules: [{name: lb, algorithm: leaky_bucket, limit: 3, period: 720h, burst: 2}]
  - hosts: ["quota.test"]
    rules: [{name: q, algorithm: quota, limit: 2, reset: monthly, timezone: Pacific/Chatham}]
  - hosts: ["concurrency.test"]
    rules: [{name: c, algorithm: concurrency, limit: 2}]
  - hosts: ["cost.test"]
    rules: [{name: priced, algorithm: token_bucket, limit: 10, period: 720h, cost_header: X-Cost, max_cost: 4}]
`)
	public := edge.public

	send := func(host string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+public+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", host, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	// seconds reads a header of whole seconds.
	seconds := func(resp *http.Response, field string) int64 {
		n, err := strconv.ParseInt(resp.Header.Get(field), 10, 64)
		if err != nil {
			t.Errorf("%s = %q: %v", field, resp.Header.Get(field), err)
		}
		return n
	}
	const period = 720 * 3600 // seconds
	tests := []struct {
		host, name  string
		policy      string
		retryMin    int64 // Retry-After of the refusal, within [retryMin, retryMax]
		retryMax    int64
		jsonPrefix  string
		limitHeader string
	}{
		// Both requests are in the current period: counted in full until it
		// ends, and at full weight for a while after (docs/algorithms.md's worked t).
		{host: "sliding.test", name: "sw", policy: `"sw";q=2;w=2592000`, retryMin: 1, retryMax: 2 * period,
			jsonPrefix: `{"error":"rate_limited","rule":"sw","retry_after":`, limitHeader: "2"},
		// Refused until the epoch-aligned period ends.
		{host: "fixed.test", name: "fw", policy: `"fw";q=2;w=2592000`, retryMin: 1, retryMax: period,
			jsonPrefix: `{"error":"rate_limited","rule":"fw","retry_after":`, limitHeader: "2"},
		// 2 tokens at once; one more every 720h/3 = 864000 s. q=2 and w the
		// time to fill 2: 2 × 2592000 / 3 = 1728000 s.
		{host: "token.test", name: "tb", policy: `"tb";q=2;w=1728000`, retryMin: 864000 - 60, retryMax: 864000,
			jsonPrefix: `{"error":"rate_limited","rule":"tb","retry_after":`, limitHeader: "2"},
		{host: "leaky.test", name: "lb", policy: `"lb";q=2;w=1728000`, retryMin: 864000 - 60, retryMax: 864000,
			jsonPrefix: `{"error":"rate_limited","rule":"lb","retry_after":`, limitHeader: "2"},
		// Refused until midnight on the 1st on the Chatham Islands
		// (UTC+12:45 or +13:45): a zone from the database in the binary.
		// A quota's policy has no w.
		{host: "quota.test", name: "q", policy: `"q";q=2`,
			jsonPrefix: `{"error":"quota_exceeded","rule":"q","retry_after":`, limitHeader: "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range 2 {
				if resp, _ := send(tt.host, nil); resp.StatusCode != 200 {
					t.Fatalf("request %d: got %d, want 200", i, resp.StatusCode)
				}
			}
			before := time.Now()
			resp, body := send(tt.host, map[string]string{"Accept": "application/json"})
			if resp.StatusCode != 429 {
				t.Fatalf("3rd request: got %d, want 429", resp.StatusCode)
			}
			retry := seconds(resp, "Retry-After")
			if tt.name == "fw" {
				// The period ends at the next multiple of 720h since the epoch.
				end := (before.Unix()/period + 1) * period
				tt.retryMin, tt.retryMax = end-time.Now().Unix()-1, end-before.Unix()+1
			}
			if tt.name == "q" {
				chatham, err := time.LoadLocation("Pacific/Chatham")
				if err != nil {
					t.Fatal(err)
				}
				y, m, _ := before.In(chatham).Date()
				end := time.Date(y, m+1, 1, 0, 0, 0, 0, chatham).Unix()
				tt.retryMin, tt.retryMax = end-time.Now().Unix()-1, end-before.Unix()+1
			}
			if retry < tt.retryMin || retry > tt.retryMax {
				t.Errorf("Retry-After = %d, want %d..%d", retry, tt.retryMin, tt.retryMax)
			}
			if got := resp.Header.Get("Ratelimit-Policy"); got != tt.policy {
				t.Errorf("RateLimit-Policy = %q, want %q", got, tt.policy)
			}
			if got, want := resp.Header.Get("Ratelimit"), fmt.Sprintf(`"%s";r=0;t=%d`, tt.name, retry); got != want {
				t.Errorf("RateLimit = %q, want %q", got, want)
			}
			if got := resp.Header.Get("X-Ratelimit-Limit"); got != tt.limitHeader {
				t.Errorf("X-RateLimit-Limit = %q, want %q", got, tt.limitHeader)
			}
			if !strings.HasPrefix(body, tt.jsonPrefix+strconv.FormatInt(retry, 10)) {
				t.Errorf("body = %q, want it to start %s%d", body, tt.jsonPrefix, retry)
			}
			if tt.name == "tb" || tt.name == "lb" {
				// 3 units per 2592000 s.
				want := `,"cost":1,"remaining":0,"restore_rate":` + strconv.FormatFloat(3.0/period, 'f', -1, 64) + "}\n"
				if !strings.HasSuffix(body, want) {
					t.Errorf("body = %q, want it to end %q", body, want)
				}
			}
		})
	}

	// Two requests held at the origin take both slots; the third is
	// refused at once; once they end, the key's slots are free again.
	t.Run("concurrency", func(t *testing.T) {
		statuses := make(chan int, 2)
		for range 2 {
			go func() {
				req, _ := http.NewRequest("GET", "http://"+public+"/hold", nil)
				req.Host = "concurrency.test"
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					statuses <- 0
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				statuses <- resp.StatusCode
			}()
		}
		<-held
		<-held
		resp, body := send("concurrency.test", map[string]string{"Accept": "application/json"})
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("3rd request in flight: %d, Retry-After %q; want 429, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if got, want := resp.Header.Get("Ratelimit-Policy"), `"c";q=2;qu="concurrent-requests"`; got != want {
			t.Errorf("RateLimit-Policy = %q, want %q", got, want)
		}
		if want := `{"error":"too_many_concurrent_requests","rule":"c","retry_after":1}` + "\n"; body != want {
			t.Errorf("body = %q, want %q", body, want)
		}
		freeOnce.Do(func() { close(free) })
		for range 2 {
			if got := <-statuses; got != 200 {
				t.Errorf("held request: %d, want 200", got)
			}
		}
		// The slots are given back as edge's handlers end, just after the
		// clients have their answers.
		wait.For(t, 5*time.Second, "a free slot", func() bool {
			resp, _ := send("concurrency.test", nil)
			return resp.StatusCode == 200
		})
	})

	t.Run("cost header", func(t *testing.T) {
		for _, c := range []struct {
			cost   string
			status int
			body   string
		}{
			{"junk", 400, "bad cost: X-Cost must be sent once, as a whole number from 0 to 4\n"},
			{"5", 400, "cost too high: X-Cost must be at most 4\n"},
			{"-1", 400, "bad cost: X-Cost must be sent once, as a whole number from 0 to 4\n"},
			{"4", 200, "ok"},
			{"4", 200, "ok"},
			{"2", 200, "ok"}, // 10 − 4 − 4 = 2 left
			{"1", 429, ""},
			{"0", 429, ""}, // cost 0 is refused too: the bucket is empty
		} {
			resp, body := send("cost.test", map[string]string{"X-Cost": c.cost})
			if resp.StatusCode != c.status || (c.body != "" && body != c.body) {
				t.Errorf("X-Cost %s: got %d %q, want %d %q", c.cost, resp.StatusCode, body, c.status, c.body)
			}
			if c.status == 400 && resp.Header.Get("Retry-After") != "" {
				t.Errorf("X-Cost %s: a 400 with Retry-After %q", c.cost, resp.Header.Get("Retry-After"))
			}
		}
	})

	edge.stop(t)
}
