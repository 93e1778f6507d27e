package headers_test

import (
	"fmt"
	"math"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/edgerate/edge/headers"
)

// The tests read the package's output back with httpsfv, an independent
// RFC 9651 parser: refPolicies and refLimits read a RateLimit-Policy and a
// RateLimit value as a client of draft-ietf-httpapi-ratelimit-headers
// would, each member an Item named by a String or Token with an Integer
// parameter (q or r) ≥ 0 and an optional one (w or t) ≥ 0 in seconds.

// refPolicies reads a RateLimit-Policy value.
func refPolicies(v string) ([]headers.Policy, error) {
	var ps []headers.Policy
	err := refList(v, "q", "w", func(name string, q, w int64) {
		ps = append(ps, headers.Policy{Name: name, Quota: q, Window: seconds(w)})
	})
	if err != nil {
		return nil, err
	}
	l, _ := httpsfv.UnmarshalList([]string{v})
	for i, m := range l {
		if qu, ok := m.(httpsfv.Item).Params.Get("qu"); ok {
			if ps[i].Unit, ok = qu.(string); !ok {
				return nil, fmt.Errorf("member %d: qu=%v", i, qu)
			}
		}
	}
	return ps, nil
}

// refLimits reads a RateLimit value.
func refLimits(v string) ([]headers.Limit, error) {
	var ls []headers.Limit
	err := refList(v, "r", "t", func(name string, r, t int64) {
		ls = append(ls, headers.Limit{Name: name, Remaining: r, Reset: seconds(t)})
	})
	if err != nil {
		return nil, err
	}
	return ls, nil
}

func refList(v, req, opt string, add func(name string, req, opt int64)) error {
	l, err := httpsfv.UnmarshalList([]string{v})
	if err != nil {
		return err
	}
	for i, m := range l {
		it, ok := m.(httpsfv.Item)
		if !ok {
			return fmt.Errorf("member %d: %T", i, m)
		}
		var name string
		switch x := it.Value.(type) {
		case string:
			name = x
		case httpsfv.Token:
			name = string(x)
		default:
			return fmt.Errorf("member %d: name %T", i, x)
		}
		rv, _ := it.Params.Get(req)
		r, ok := rv.(int64)
		if !ok || r < 0 {
			return fmt.Errorf("member %d: %s=%v", i, req, rv)
		}
		var o int64
		if ov, ok := it.Params.Get(opt); ok {
			if o, ok = ov.(int64); !ok || o < 0 {
				return fmt.Errorf("member %d: %s=%v", i, opt, ov)
			}
		}
		add(name, r, o)
	}
	return nil
}

// seconds converts whole seconds to a Duration, saturating.
func seconds(s int64) time.Duration {
	if s > math.MaxInt64/int64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(s) * time.Second
}
