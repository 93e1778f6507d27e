// Package headers formats the rate-limit response fields that edge sends:
// Retry-After (RFC 9110, Section 10.2.3), the de-facto X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset triple, and the RateLimit and
// RateLimit-Policy fields of draft-ietf-httpapi-ratelimit-headers, which are
// RFC 9651 Structured Field Lists.
//
// The package knows nothing about counters or rules: it turns plain values
// into bytes. Formatting is on the hot path of every response, so the Append
// functions write into a caller's buffer and do not allocate when it has
// room; the Set functions are convenience wrappers that store one value in
// an http.Header.
//
// Every value is clamped rather than rejected, so that whatever the caller
// passes, the output is a valid field:
//
//   - counts (limit, quota, remaining) are clamped to [0, MaxInteger], the
//     range of an RFC 9651 Integer (Section 3.3.1);
//   - durations are sent as whole seconds, rounded up (a client told to wait
//     1s after 1.2s would come back too early), clamped to [0, MaxSeconds];
//     Retry-After is at least 1;
//   - names are sent as RFC 9651 Strings (Section 3.3.3): see AppendPolicy.
//
// All functions are safe for concurrent use; http.Header values are not, so
// the caller must own the header it passes to a Set function. Nothing here
// logs.
package headers

import (
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"
)

// Field names, in the canonical form of textproto.CanonicalMIMEHeaderKey.
//
// The Set functions assign to the http.Header map directly (h[key] = v)
// rather than through Header.Set, which would canonicalise the key again on
// every call of the hot path. That is only correct if the key is already
// canonical, and the canonical form of "RateLimit" is "Ratelimit": a map key
// spelt "RateLimit" would be invisible to h.Get("RateLimit") and would sit
// beside an origin's "Ratelimit" entry, so the response would carry the
// field twice. Field names are case-insensitive (RFC 9110, Section 5.1), and
// HTTP/2 and HTTP/3 send them in lower case anyway.
const (
	FieldRetryAfter          = "Retry-After"
	FieldRateLimit           = "Ratelimit"
	FieldRateLimitPolicy     = "Ratelimit-Policy"
	FieldXRateLimitLimit     = "X-Ratelimit-Limit"
	FieldXRateLimitRemaining = "X-Ratelimit-Remaining"
	FieldXRateLimitReset     = "X-Ratelimit-Reset"
)

// MaxInteger is the largest Integer an RFC 9651 structured field may carry
// (15 decimal digits, Section 3.3.1). Counts above it are sent as MaxInteger.
const MaxInteger = 999_999_999_999_999

// MaxSeconds is the largest number of seconds this package sends, about 68
// years. Durations are capped there rather than at the 292 years a
// time.Duration can hold because RFC 9111, Section 1.2.2 expects recipients
// of delta-seconds to cope with values up to 2^31, and clients that parse
// Retry-After into a signed 32-bit integer are common; 2^31-1 overflows none
// of them and is still "practically never".
const MaxSeconds = 1<<31 - 1

// Policy is one item of a RateLimit-Policy field: a named quota of Quota
// units per Window. The zero value is a policy named "" with a quota of 0
// and no stated window.
type Policy struct {
	// Name identifies the policy; RateLimit items refer to it by the same name.
	Name string
	// Quota is the number of units (requests) allowed per window, the "q"
	// parameter. It is clamped to [0, MaxInteger].
	Quota int64
	// Window is the length of the window, the "w" parameter, sent in whole
	// seconds rounded up and capped at MaxSeconds. A Window ≤ 0 means "not
	// stated": "w" is optional in the draft, and a zero-length window has no
	// meaning, so it is omitted rather than sent as w=0.
	Window time.Duration
	// Unit is the quota unit, the "qu" parameter, sent as a String when
	// not "": the draft's units are "requests" (the default, so "" and
	// "requests" mean the same), "content-bytes" and "concurrent-requests".
	Unit string
}

// Limit is one item of a RateLimit field: the current state of the policy
// with the same Name. The zero value is a limit named "" with nothing
// remaining and a reset of 0 seconds.
type Limit struct {
	// Name is the name of the Policy this limit reports on.
	Name string
	// Remaining is the number of units left in the current window, the "r"
	// parameter. It is clamped to [0, MaxInteger], so an over-spent
	// counter reads as 0, never as a negative number.
	Remaining int64
	// Reset is the time until more quota is available, the "t" parameter:
	// "the number of seconds until additional quota associated with the
	// quota policy is made available" (draft-ietf-httpapi-ratelimit-headers,
	// Section 4.1.2), not necessarily the whole quota. It is sent in whole
	// seconds rounded up and clamped to [0, MaxSeconds], so a positive wait
	// is never sent as 0. It is always sent; 0 means nothing is due to be
	// freed (Remaining is the full quota).
	Reset time.Duration
}

// RetryAfterSeconds returns the delay-seconds value that AppendRetryAfter
// writes for d: d rounded up to whole seconds, at least 1 and at most
// MaxSeconds.
//
// The minimum is 1 because "Retry-After: 0" invites an immediate retry that
// would be rejected again. Rounding up means the value is never smaller than
// the "t" that AppendLimit writes for the same duration, as the draft asks
// (Retry-After SHOULD NOT point earlier than t).
func RetryAfterSeconds(d time.Duration) int64 {
	return max(ceilSeconds(d), 1)
}

// AppendRetryAfter appends the Retry-After value for d, as described at
// RetryAfterSeconds, to dst and returns the extended buffer.
func AppendRetryAfter(dst []byte, d time.Duration) []byte {
	return appendInt(dst, RetryAfterSeconds(d))
}

// AppendPolicy appends p as one RateLimit-Policy list item to dst and
// returns the extended buffer, for example
//
//	"burst";q=100;w=60
//	"parallel";q=2;qu="concurrent-requests"
//
// The name is written as an RFC 9651 String: '"' and '\' are escaped with a
// backslash, and every character outside printable ASCII (0x20-0x7E), which
// a String cannot hold, is replaced by one '?'. A character is a UTF-8
// sequence, or a single byte where the input is not valid UTF-8, so "café"
// becomes "caf?". Names come from configuration, so a replacement is a
// config mistake made visible, not something to fail a response for.
//
// To write several items, separate them with ", " or use AppendPolicies.
func AppendPolicy(dst []byte, p Policy) []byte {
	dst = appendString(dst, p.Name)
	dst = append(dst, ";q="...)
	dst = appendInt(dst, clampCount(p.Quota))
	if p.Window > 0 {
		dst = append(dst, ";w="...)
		dst = appendInt(dst, ceilSeconds(p.Window))
	}
	if p.Unit != "" {
		dst = append(dst, ";qu="...)
		dst = appendString(dst, p.Unit)
	}
	return dst
}

// AppendPolicies appends ps as a RateLimit-Policy field value, items joined
// by ", ", to dst and returns the extended buffer. With no policies it
// appends nothing; an empty List must not be sent at all (RFC 9651,
// Section 4.1), which SetPolicies takes care of.
func AppendPolicies(dst []byte, ps ...Policy) []byte {
	for i, p := range ps {
		if i > 0 {
			dst = append(dst, ", "...)
		}
		dst = AppendPolicy(dst, p)
	}
	return dst
}

// AppendLimit appends l as one RateLimit list item to dst and returns the
// extended buffer, for example
//
//	"burst";r=42;t=17
//
// The name is written as AppendPolicy writes it. To write several items,
// separate them with ", " or use AppendLimits.
func AppendLimit(dst []byte, l Limit) []byte {
	return appendLimitParams(appendString(dst, l.Name), l.Remaining, l.Reset)
}

// AppendName appends name as AppendPolicy and AppendLimit write it.
func AppendName(dst []byte, name string) []byte { return appendString(dst, name) }

// AppendLimitNamed is AppendLimit for a name already written by
// AppendName: a caller that sends the same name often writes it once.
func AppendLimitNamed(dst []byte, name string, remaining int64, reset time.Duration) []byte {
	return appendLimitParams(append(dst, name...), remaining, reset)
}

func appendLimitParams(dst []byte, remaining int64, reset time.Duration) []byte {
	dst = append(dst, ";r="...)
	dst = appendInt(dst, clampCount(remaining))
	dst = append(dst, ";t="...)
	return appendInt(dst, ceilSeconds(reset))
}

// AppendLimits appends ls as a RateLimit field value, items joined by ", ",
// to dst and returns the extended buffer. With no limits it appends nothing.
func AppendLimits(dst []byte, ls ...Limit) []byte {
	for i, l := range ls {
		if i > 0 {
			dst = append(dst, ", "...)
		}
		dst = AppendLimit(dst, l)
	}
	return dst
}

// SetRetryAfter sets the Retry-After field of h to d in seconds, as
// described at RetryAfterSeconds, replacing any value it had.
func SetRetryAfter(h http.Header, d time.Duration) {
	// Direct assignment with a canonical key: see the Field constants.
	h[FieldRetryAfter] = []string{strconv.FormatInt(RetryAfterSeconds(d), 10)}
}

// SetXRateLimit sets the X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset fields of h, replacing any values they had. limit and
// remaining are clamped to [0, MaxInteger]; reset is sent in whole seconds
// rounded up, clamped to [0, MaxSeconds], so 0 when it is not positive.
// The reset is a delta, not a Unix time: it needs no clock agreement with
// the client, as in the IETF draft's "t".
func SetXRateLimit(h http.Header, limit, remaining int64, reset time.Duration) {
	// Three numbers of at most 15 digits each fit in one small buffer,
	// converted to a single string and sliced, and the three one-element
	// value slices share one backing array (as net/http's Header.Clone
	// does): two allocations instead of six. The slices are capped at one
	// element so that an append by a later handler cannot overwrite its
	// neighbour.
	var buf [3 * 16]byte
	b := appendInt(buf[:0], clampCount(limit))
	i := len(b)
	b = appendInt(b, clampCount(remaining))
	j := len(b)
	b = appendInt(b, ceilSeconds(reset))
	s := string(b)

	vs := make([]string, 3)
	vs[0], vs[1], vs[2] = s[:i], s[i:j], s[j:]
	h[FieldXRateLimitLimit] = vs[0:1:1]
	h[FieldXRateLimitRemaining] = vs[1:2:2]
	h[FieldXRateLimitReset] = vs[2:3:3]
}

// SetPolicies sets the RateLimit-Policy field of h to ps, replacing any
// value it had. With no policies it deletes the field, since an empty List
// must not be sent (RFC 9651, Section 4.1).
func SetPolicies(h http.Header, ps ...Policy) {
	if len(ps) == 0 {
		delete(h, FieldRateLimitPolicy)
		return
	}
	var buf [256]byte
	h[FieldRateLimitPolicy] = []string{string(AppendPolicies(buf[:0], ps...))}
}

// SetLimits sets the RateLimit field of h to ls, replacing any value it had.
// With no limits it deletes the field, since an empty List must not be sent
// (RFC 9651, Section 4.1).
func SetLimits(h http.Header, ls ...Limit) {
	if len(ls) == 0 {
		delete(h, FieldRateLimit)
		return
	}
	var buf [256]byte
	h[FieldRateLimit] = []string{string(AppendLimits(buf[:0], ls...))}
}

// ceilSeconds returns d in whole seconds rounded up, clamped to
// [0, MaxSeconds]. It divides before rounding, so it cannot overflow the way
// (d + time.Second - 1) / time.Second does near the largest Duration.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return min(s, MaxSeconds)
}

// clampCount clamps n to the non-negative range of an RFC 9651 Integer.
func clampCount(n int64) int64 {
	return min(max(n, 0), MaxInteger)
}

// appendString appends s as an RFC 9651 String (Section 4.1.6), replacing
// each character it cannot hold by '?': see AppendPolicy.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
			i++
		case c >= 0x20 && c <= 0x7e:
			dst = append(dst, c)
			i++
		case c < utf8.RuneSelf:
			// An ASCII control character or DEL.
			dst = append(dst, '?')
			i++
		default:
			// One '?' per UTF-8 sequence; an invalid byte decodes as a
			// sequence of width 1, so it gets its own '?'.
			_, n := utf8.DecodeRuneInString(s[i:])
			dst = append(dst, '?')
			i += n
		}
	}
	return append(dst, '"')
}

// AppendXRateLimit appends the values SetXRateLimit sets, each followed by
// CRLF, as the field lines X-Ratelimit-Limit, X-Ratelimit-Remaining and
// X-Ratelimit-Reset of a response head edge writes itself.
func AppendXRateLimit(dst []byte, limit, remaining int64, reset time.Duration) []byte {
	dst = append(dst, FieldXRateLimitLimit+": "...)
	dst = appendInt(dst, clampCount(limit))
	dst = append(dst, "\r\n"+FieldXRateLimitRemaining+": "...)
	dst = appendInt(dst, clampCount(remaining))
	dst = append(dst, "\r\n"+FieldXRateLimitReset+": "...)
	dst = appendInt(dst, ceilSeconds(reset))
	return append(dst, "\r\n"...)
}

// appendInt appends n in decimal. The fields' numbers are mostly below
// 10,000 (counts left, seconds to wait), which it writes byte by byte;
// strconv formats into a buffer of its own and copies, several times the
// work for a response that writes half a dozen of them.
func appendInt(dst []byte, n int64) []byte {
	switch {
	case n < 0 || n >= 10000:
		return strconv.AppendInt(dst, n, 10)
	case n < 10:
		return append(dst, byte('0'+n))
	case n < 100:
		return append(dst, byte('0'+n/10), byte('0'+n%10))
	case n < 1000:
		return append(dst, byte('0'+n/100), byte('0'+n/10%10), byte('0'+n%10))
	}
	return append(dst, byte('0'+n/1000), byte('0'+n/100%10), byte('0'+n/10%10), byte('0'+n%10))
}

// AppendCount appends n as X-RateLimit-Limit and X-RateLimit-Remaining
// write it: clamped to [0, MaxInteger], in decimal.
func AppendCount(dst []byte, n int64) []byte { return appendInt(dst, clampCount(n)) }

// AppendReset appends d as X-RateLimit-Reset writes it: whole seconds
// rounded up, clamped to [0, MaxSeconds].
func AppendReset(dst []byte, d time.Duration) []byte { return appendInt(dst, ceilSeconds(d)) }
