// Package algorithm names how a rule counts: its Algorithm, and the two
// settings that refine one, the Precision of a sliding window and the
// calendar Reset of a quota. It holds the one definition of each: package
// rules compiles a config's spellings into them and package window counts
// by them, so a compiled rule reaches the counters without translation
// (rules and window never import each other).
//
// Each type's String is its config spelling, and its Parse function reads
// one back: "" is the zero value, the default, and an unknown spelling's
// error lists the choices and quotes the value (`must be standard or fine,
// got "exact"`), for the caller to prefix with where it read the value.
package algorithm

import (
	"strconv"
	"strings"
)

// An Algorithm is how a rule counts (package window documents each in
// full). The zero value is SlidingWindow.
type Algorithm uint8

const (
	// SlidingWindow estimates the count over the last period from the
	// counts of the current and the previous epoch-aligned period
	// (Cloudflare's two-counter estimate).
	SlidingWindow Algorithm = iota
	// FixedWindow counts each epoch-aligned period on its own.
	FixedWindow
	// TokenBucket holds up to a burst of tokens, refilled continuously at
	// the limit per period; a request takes its cost in tokens.
	TokenBucket
	// LeakyBucket is a level raised by each request's cost and draining at
	// the limit per period; a request that would raise it past the burst is
	// refused at once (a meter), or with a maximum delay allowed after a
	// wait (a queue).
	LeakyBucket
	// Quota counts exactly per calendar period (a Reset in a time zone) and
	// starts again at 0 when the period ends.
	Quota
	// Concurrency limits the requests of one key in flight at once
	// (Stripe's concurrent requests limiter): a request holds a slot from
	// its decision until its response ends. It has no period.
	Concurrency
)

var algorithms = spelling{"Algorithm", []string{"sliding_window", "fixed_window", "token_bucket", "leaky_bucket", "quota", "concurrency"}}

// String returns the config spelling, such as "token_bucket".
func (a Algorithm) String() string { return algorithms.name(uint8(a)) }

// Bucket reports whether a counts in a bucket, whose capacity is a rule's
// burst, rather than in a window of its limit.
func (a Algorithm) Bucket() bool { return a == TokenBucket || a == LeakyBucket }

// ParseAlgorithm returns the algorithm s spells; "" is SlidingWindow.
func ParseAlgorithm(s string) (Algorithm, error) {
	v, err := algorithms.parse(s)
	return Algorithm(v), err
}

// A Precision is how finely a sliding window counts. The zero value is
// Standard.
type Precision uint8

const (
	// Standard counts every key in two counters: the estimate.
	Standard Precision = iota
	// Fine counts keys near their limit exactly, in a log from a bounded
	// pool, and every other key in two counters.
	Fine
)

var precisions = spelling{"Precision", []string{"standard", "fine"}}

// String returns the config spelling, "standard" or "fine".
func (p Precision) String() string { return precisions.name(uint8(p)) }

// ParsePrecision returns the precision s spells; "" is Standard.
func ParsePrecision(s string) (Precision, error) {
	v, err := precisions.parse(s)
	return Precision(v), err
}

// A Reset is the calendar period a Quota counts in: its count starts again
// at 0 when the period ends. The zero value is Daily.
type Reset uint8

const (
	// Daily periods start at local midnight.
	Daily Reset = iota
	// Weekly periods start at local midnight between Sunday and Monday
	// (ISO 8601 weeks).
	Weekly
	// Monthly periods start at local midnight on the first of the month.
	Monthly
)

var resets = spelling{"Reset", []string{"daily", "weekly", "monthly"}}

// String returns the config spelling, such as "monthly".
func (r Reset) String() string { return resets.name(uint8(r)) }

// ParseReset returns the reset s spells; "" is Daily.
func ParseReset(s string) (Reset, error) {
	v, err := resets.parse(s)
	return Reset(v), err
}

// spelling is an enumeration's config spellings, indexed by value.
type spelling struct {
	typ   string   // the Go type's name, for out-of-range values
	names []string // names[v] spells value v
}

// name returns the config spelling of v.
func (s spelling) name(v uint8) string {
	if int(v) < len(s.names) {
		return s.names[v]
	}
	return s.typ + "(" + strconv.Itoa(int(v)) + ")"
}

// parse returns the value raw spells ("" is 0).
func (s spelling) parse(raw string) (uint8, error) {
	if raw == "" {
		return 0, nil
	}
	for v, n := range s.names {
		if raw == n {
			return uint8(v), nil
		}
	}
	return 0, &choiceError{choices: s.names, got: raw}
}

// choiceError is a spelling that is none of the choices.
type choiceError struct {
	choices []string
	got     string
}

func (e *choiceError) Error() string {
	last := len(e.choices) - 1
	return "must be " + strings.Join(e.choices[:last], ", ") + " or " + e.choices[last] + ", got " + strconv.Quote(e.got)
}
