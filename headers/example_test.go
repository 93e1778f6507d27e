package headers_test

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/edgerate/edge/headers"
)

func Example() {
	h := http.Header{}
	// A rejected request: the burst policy is spent for another 4.2s.
	headers.SetRetryAfter(h, 4200*time.Millisecond)
	headers.SetXRateLimit(h, 100, 0, 4200*time.Millisecond)
	headers.SetPolicies(h,
		headers.Policy{Name: "burst", Quota: 100, Window: time.Minute},
		headers.Policy{Name: "daily", Quota: 1000, Window: 24 * time.Hour},
	)
	headers.SetLimits(h, headers.Limit{Name: "burst", Remaining: 0, Reset: 4200 * time.Millisecond})
	for _, k := range slices.Sorted(maps.Keys(h)) {
		fmt.Printf("%s: %s\n", k, h.Get(k))
	}
	// Output:
	// Ratelimit: "burst";r=0;t=5
	// Ratelimit-Policy: "burst";q=100;w=60, "daily";q=1000;w=86400
	// Retry-After: 5
	// X-Ratelimit-Limit: 100
	// X-Ratelimit-Remaining: 0
	// X-Ratelimit-Reset: 5
}

func ExampleAppendLimit() {
	// On the hot path, reuse one buffer per response writer.
	buf := make([]byte, 0, 64)
	buf = headers.AppendLimit(buf, headers.Limit{Name: "café \"main\"", Remaining: -3, Reset: 1500 * time.Millisecond})
	fmt.Println(string(buf))
	// Output: "caf? \"main\"";r=0;t=2
}
