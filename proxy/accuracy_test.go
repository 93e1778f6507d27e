package proxy

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/edgerate/edge/replay"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/trace"
	"github.com/edgerate/edge/window"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// accuracyTrace is a minute and a half of Poisson traffic from n clients,
// each at 0.8 to 1.4 times limit per period: near the limit, where the
// window misjudges. Records are in time order.
func accuracyTrace(n int, limit int, period time.Duration) []trace.Record {
	rng := rand.New(rand.NewPCG(19, 1))
	start := time.Unix(1_800_000_000, 0).UnixMicro()
	var recs []trace.Record
	for i := range n {
		rate := (0.8 + 0.6*float64(i)/float64(n)) * float64(limit) / float64(period.Microseconds())
		src := "198.51.100." + strconv.Itoa(i+1)
		for at := start; at < start+90_000_000; at += int64(rng.ExpFloat64()/rate) + 1 {
			recs = append(recs, trace.Record{Time: at, Source: src, Method: "GET", Path: "/"})
		}
	}
	slices.SortStableFunc(recs, func(a, b trace.Record) int { return int(a.Time - b.Time) })
	return recs
}

// TestAccuracyMetricMatchesReplay replays a trace through the proxy, on
// its clock, and checks edge_window_sampled_total and
// edge_window_misjudged_total against edge replay's figures for the same
// sample (replay.Options.Sample): a rule that does not count blocked
// requests against replay's count-admitted sample, one that does against
// its count-all sample, in which the sample is replay's exact comparison.
func TestAccuracyMetricMatchesReplay(t *testing.T) {
	const every, limit, period = 3, 10, 10 * time.Second
	cfg := rules.Config{
		AccuracySample: every,
		Domains: []rules.DomainConfig{
			{Name: "admitted", Hosts: []string{"a.example.com"}, Respond: &rules.ResponseConfig{Body: "ok"},
				Rules: []rules.RuleConfig{{Name: "per-ip", Limit: limit, Period: period}}},
			{Name: "all", Hosts: []string{"b.example.com"}, Respond: &rules.ResponseConfig{Body: "ok"},
				Rules: []rules.RuleConfig{{Name: "per-ip", Limit: limit, Period: period, CountBlocked: true}}},
		},
	}
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var now time.Time
	p, err := New(Options{Table: table, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	recs := accuracyTrace(30, limit, period)
	for _, rec := range recs {
		now = time.UnixMicro(rec.Time)
		for _, host := range []string{"a.example.com", "b.example.com"} {
			req := httptest.NewRequest("GET", "http://"+host+"/", nil)
			req.RemoteAddr = rec.Source + ":40000"
			w := httptest.NewRecorder()
			p.ServeHTTP(w, req)
			if w.Code != http.StatusOK && w.Code != http.StatusTooManyRequests {
				t.Fatalf("%s: status %d", host, w.Code)
			}
		}
	}

	ins := replay.LogInputs(recs, replay.TableRules(table, ""), table.IPv6Prefix)
	for _, tc := range []struct {
		domain string
		counts func(*replay.SampleReport) replay.SampleCounts
	}{
		{"admitted", func(s *replay.SampleReport) replay.SampleCounts { return s.CountAdmitted }},
		{"all", func(s *replay.SampleReport) replay.SampleCounts { return s.CountAll }},
	} {
		t.Run(tc.domain, func(t *testing.T) {
			i := slices.IndexFunc(ins, func(in replay.Input) bool { return in.Name == tc.domain+"/per-ip" })
			rep, err := replay.Run(context.Background(), ins[i], replay.Options{Sample: every, Interleaved: true})
			if err != nil {
				t.Fatal(err)
			}
			want := tc.counts(rep.Sample)
			m := p.metrics
			got := replay.SampleCounts{
				Judged:         int64(testutil.ToFloat64(m.sampled.WithLabelValues(tc.domain, "per-ip"))),
				WronglyAllowed: int64(testutil.ToFloat64(m.misjudged.WithLabelValues(tc.domain, "per-ip", "allowed"))),
				WronglyLimited: int64(testutil.ToFloat64(m.misjudged.WithLabelValues(tc.domain, "per-ip", "limited"))),
			}
			want.MisjudgedFraction = 0
			if got != want {
				t.Errorf("proxy metrics %+v, replay's sample %+v", got, want)
			}
			if rep.Sample.Sources == 0 || rep.Sample.Sources == rep.Sources || want.WronglyAllowed == 0 || want.WronglyLimited == 0 {
				t.Errorf("sample of %d of %d sources misjudged %d allowed, %d limited: the trace does not test the metric",
					rep.Sample.Sources, rep.Sources, want.WronglyAllowed, want.WronglyLimited)
			}
		})
	}
}

// TestBenchClientIsNotSampled keeps BenchmarkServeHTTP's default cases on
// the unsampled path: its client must stay out of a 1-in-1000 sample.
func TestBenchClientIsNotSampled(t *testing.T) {
	src := rules.KeySource{Client: netip.MustParsePrefix("203.0.113.9/32")}
	key := rules.AppendKey(nil, []rules.KeyPart{{Kind: rules.KeyIP}}, &src)
	if window.Sampled(key, rules.DefaultAccuracySample) {
		t.Fatal("BenchmarkServeHTTP's client is in the default sample; pick another address")
	}
}

// TestAccuracySampleAfterReload checks that a reload, which carries the
// window's counters over but starts the sample afresh, does not count the
// history the new logs lack as misjudgments: the new logs judge from one
// period on.
func TestAccuracySampleAfterReload(t *testing.T) {
	cfg := rules.Config{
		AccuracySample: 1,
		Domains: []rules.DomainConfig{{Name: "d", Hosts: []string{"a.example.com"}, Respond: &rules.ResponseConfig{Body: "ok"},
			Rules: []rules.RuleConfig{{Name: "per-ip", Limit: 5, Period: 10 * time.Second}}}},
	}
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clock := newClock()
	p, err := New(Options{Table: table, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	send := func() int {
		req := httptest.NewRequest("GET", "http://a.example.com/", nil)
		req.RemoteAddr = "198.51.100.7:40000"
		w := httptest.NewRecorder()
		p.ServeHTTP(w, req)
		clock.Advance(100 * time.Millisecond)
		return w.Code
	}
	m := p.metrics
	counts := func() (sampled, misjudged float64) {
		return testutil.ToFloat64(m.sampled.WithLabelValues("d", "per-ip")),
			testutil.ToFloat64(m.misjudged.WithLabelValues("d", "per-ip", "allowed")) +
				testutil.ToFloat64(m.misjudged.WithLabelValues("d", "per-ip", "limited"))
	}
	for range 5 {
		send()
	}
	if s, mis := counts(); s != 5 || mis != 0 {
		t.Fatalf("before the reload: %v judged, %v misjudged; want 5, 0", s, mis)
	}
	if _, err := p.Reload(table, "again"); err != nil {
		t.Fatal(err)
	}
	if code := send(); code != http.StatusTooManyRequests {
		t.Fatalf("after the reload: status %d, want 429 from the carried counters", code)
	}
	if s, mis := counts(); s != 5 || mis != 0 {
		t.Errorf("within a period of the reload: %v judged, %v misjudged; want 5, 0 (not judged)", s, mis)
	}
	clock.Advance(25 * time.Second) // the new log has seen a whole period
	if code := send(); code != http.StatusOK {
		t.Fatalf("later: status %d, want 200", code)
	}
	if s, mis := counts(); s != 6 || mis != 0 {
		t.Errorf("a period after the reload: %v judged, %v misjudged; want 6, 0", s, mis)
	}
}
