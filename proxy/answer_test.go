package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestAnswerOutcomesCounted: every kind of answer edge makes for a
// request of a domain is counted under its one outcome name in
// edge_requests_total, and the status page's totals show it by that name.
func TestAnswerOutcomesCounted(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close() // connections to it are refused: 502
	units := rules.RuleConfig{Name: "units", Limit: 100, Period: time.Minute, CostHeader: "X-Units", MaxCost: 5}
	cfg := oneDomain(deadURL, units)
	cfg.Domains[0].MaxRequestBody = 10
	e := newEnv(t, cfg)
	e.proxy.Record(e.clock.Now())
	tests := []struct {
		name    string
		method  string
		hdr     map[string]string
		body    string
		status  int
		outcome string
	}{
		{"cost over max_cost", "GET", map[string]string{"X-Units": "9"}, "", 400, outcomeBadCost},
		{"body over max_request_body", "POST", nil, strings.Repeat("x", 11), 413, outcomeBodyRefused},
		{"origin unreachable", "GET", nil, "", 502, outcomeOriginDown},
		{"came back to this node", "GET", map[string]string{"Via": "1.1 " + e.proxy.Via()}, "", 508, outcomeLoop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := testutil.ToFloat64(e.proxy.metrics.requests.WithLabelValues("api.example.com", tt.outcome))
			resp, _ := e.do(tt.method, "api.example.com", "/", tt.hdr, tt.body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if got := testutil.ToFloat64(e.proxy.metrics.requests.WithLabelValues("api.example.com", tt.outcome)) - before; got != 1 {
				t.Errorf("edge_requests_total{outcome=%q} grew by %v, want 1", tt.outcome, got)
			}
		})
	}
	e.clock.Advance(time.Second)
	e.proxy.Record(e.clock.Now())
	v := getStatusView(t, e, "")
	got := v.Domains[0].Totals.Answered
	for _, tt := range tests {
		if got[tt.outcome] != 1 {
			t.Errorf("status page: answered[%q] = %v, want 1 (all: %v)", tt.outcome, got[tt.outcome], got)
		}
	}
	if got[outcomeShed] != 0 || got[outcomeOriginTimeout] != 0 {
		t.Errorf("status page: answered = %v, want shed and origin_timeout at 0", got)
	}
}

// TestAnswerRenderersAgree: an answer rendered through net/http and
// appended as bytes are the same bytes (Date aside, which both take from
// the clock), for GET and HEAD, so that a refusal is identical on both
// paths by construction.
func TestAnswerRenderersAgree(t *testing.T) {
	var a answer
	a.reset(http.StatusTooManyRequests, outcomeBlocked)
	a.set(fieldXContentTypeOptions, nosniff)
	vals, from := startMade(a.vals, fieldRetryAfter)
	vals = append(vals, "7"...)
	a.vals = a.endMade(vals, fieldRetryAfter, from)
	a.set(fieldCacheControl, noStore)
	a.set(fieldContentType, contentTypeText)
	a.closing()
	a.body = append(a.body, "rate limited: retry in 7s\n"...)
	for _, method := range []string{"GET", "HEAD"} {
		t.Run(method, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.write(w) }))
			defer srv.Close()
			got := rawExchange(t, srv.Listener.Addr().String(), method+" / HTTP/1.1\r\nHost: a\r\n\r\n")
			want := string(a.appendTo(nil, time.Now(), method == "HEAD"))
			if stripDate(got) != stripDate(want) {
				t.Errorf("net/http wrote\n%q\nappendTo\n%q", got, want)
			}
		})
	}
}

// TestRedirectAnswerReused: a redirect made in an answer whose values held
// another answer's (the pooled answers of both paths) has its Location
// whole, as one made in a fresh answer.
func TestRedirectAnswerReused(t *testing.T) {
	p := &Proxy{}
	p.SetHTTPSPort(8443)
	for _, prev := range []string{"", "7", strings.Repeat("x", 200)} {
		var a answer
		a.reset(http.StatusTooManyRequests, outcomeBlocked)
		vals, from := startMade(a.vals, fieldRetryAfter)
		a.vals = a.endMade(append(vals, prev...), fieldRetryAfter, from)
		a.redirectAnswer(p.httpsURL(a.vals[:0], "secure.example.net:8080", "/s?x=1"))
		rec := httptest.NewRecorder()
		a.write(rec)
		want := "https://secure.example.net:8443/s?x=1"
		if got := rec.Header().Values("Location"); len(got) != 1 || got[0] != want {
			t.Errorf("after an answer with %d bytes of values: Location %q, want %q", len(prev), got, want)
		}
		if raw := string(a.appendTo(nil, time.Now(), false)); !strings.Contains(raw, "\r\nLocation: "+want+"\r\n") {
			t.Errorf("after an answer with %d bytes of values, appendTo wrote %q", len(prev), raw)
		}
	}
}

// rawExchange sends raw on a new connection to addr and returns all the
// server writes until it closes the connection.
func rawExchange(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c) // the answer closes the connection
	return string(b)
}

// stripDate removes the Date field's value.
func stripDate(s string) string {
	i := strings.Index(s, "\r\nDate: ")
	if i < 0 {
		return s
	}
	j := strings.Index(s[i+2:], "\r\n")
	return s[:i+8] + s[i+2+j:]
}

// TestFieldNamesInNetHTTPOrder: an answer writes its fields in the order of
// fieldName, which must be net/http's order (sorted by name) for appendTo
// to write what net/http writes.
func TestFieldNamesInNetHTTPOrder(t *testing.T) {
	for n := fieldName(1); n < numFieldNames; n++ {
		if fieldNames[n-1] >= fieldNames[n] {
			t.Errorf("fieldNames[%d] = %q sorts before fieldNames[%d] = %q", n, fieldNames[n], n-1, fieldNames[n-1])
		}
	}
}
