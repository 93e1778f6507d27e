package headers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/edgerate/edge/headers"
)

func BenchmarkAppendPolicy(b *testing.B) {
	p := headers.Policy{Name: "per-ip-burst", Quota: 100, Window: time.Minute}
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		buf = headers.AppendPolicy(buf[:0], p)
	}
}

func BenchmarkAppendLimit(b *testing.B) {
	l := headers.Limit{Name: "per-ip-burst", Remaining: 42, Reset: 17500 * time.Millisecond}
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		buf = headers.AppendLimit(buf[:0], l)
	}
}

func BenchmarkSetRetryAfter(b *testing.B) {
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		headers.SetRetryAfter(h, 17500*time.Millisecond)
	}
}

// The full set of fields for one allowed response, as the proxy sends them.
func BenchmarkSetAll(b *testing.B) {
	ps := []headers.Policy{{Name: "burst", Quota: 100, Window: time.Minute}, {Name: "daily", Quota: 10000, Window: 24 * time.Hour}}
	ls := []headers.Limit{{Name: "burst", Remaining: 42, Reset: 17 * time.Second}, {Name: "daily", Remaining: 9000, Reset: 5 * time.Hour}}
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		headers.SetPolicies(h, ps...)
		headers.SetLimits(h, ls...)
		headers.SetXRateLimit(h, 100, 42, 17*time.Second)
	}
}
