package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestEndToEndSoftLimit runs the built binary with a soft rule of 10 per
// 720h and offers 100 requests at once: some get through (a soft limit
// thins, it does not cut off), far fewer than offered, each refusal a 429
// with Retry-After: 1, and the refusals are counted as outcome
// soft_limited. The draws are the binary's own (unseeded), so the bounds
// are loose: with no history, the k-th request of the burst is let
// through with probability about 1/k, about 5 of 100 in all.
func TestEndToEndSoftLimit(t *testing.T) {
	bin := buildEdge(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	edge := startBinaryWith(t, bin, origin.URL, `
domains:
  - hosts: ["soft.test"]
    rules: [{name: thin, mode: soft, limit: 10, period: 720h}]
`)
	allowed, refused := 0, 0
	for i := range 100 {
		req, err := http.NewRequest("GET", "http://"+edge.public+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "soft.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case 200:
			allowed++
		case 429:
			refused++
			if got := resp.Header.Get("Retry-After"); got != "1" {
				t.Errorf("request %d: Retry-After %q, want 1", i, got)
			}
		default:
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	if allowed < 1 || allowed > 30 {
		t.Errorf("allowed %d of 100, want some, about 5", allowed)
	}

	mresp, err := http.Get("http://" + edge.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(mresp.Body)
	mresp.Body.Close()
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	var soft float64
	for _, m := range families["edge_rule_decisions_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "outcome" && l.GetValue() == "soft_limited" {
				soft += m.GetCounter().GetValue()
			}
		}
	}
	if soft != float64(refused) {
		t.Errorf(`edge_rule_decisions_total{outcome="soft_limited"} = %v, want %d`, soft, refused)
	}
}
