package graphql

import (
	"errors"
	"strings"
	"testing"
)

// FuzzRequest prices arbitrary bodies: never a panic, every failure an
// *Error, and a cost never negative nor past Saturated.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{
		`{"query":"{ products(first: 10) { edges { node { title } } } }"}`,
		`[{"query":"query($n: Int = 3) { a(first: $n) { nodes { ...F } } } fragment F on T { b { id } }","variables":{"n":2}},{"extensions":{"persistedQuery":{"sha256Hash":"x"}}}]`,
		`{"query":"mutation { a { id } }","operationName":"x"}`,
		`{"query":"{ a { ...F } } fragment F on T { ...F }"}`,
		`{"query":"{ a(first: 99999999999999999999) { nodes { id } } }"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := Prices{Object: 1, Mutation: 10, DefaultPage: 50, Max: 1000}.Request(body)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		if p.Cost < 0 || p.Cost > 1000 || p.Persisted < 0 {
			t.Fatalf("price %+v out of range", p)
		}
	})
}

// FuzzDocument prices arbitrary documents.
func FuzzDocument(f *testing.F) {
	f.Add(`{ products(first: 10) { edges { node { title variants(first: 5) { edges { node { price } } } } } } }`, "")
	f.Add(`query A($n: Int) { a(last: $n) { ...on T { b } } } query B { c }`, "B")
	f.Add(`fragment F on T { ...G } fragment G on T { ...F } { ...F }`, "")
	f.Fuzz(func(t *testing.T, query, op string) {
		n, err := Defaults.Document(query, op, map[string]any{"n": 3.0})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || strings.TrimSpace(e.Message) == "" {
				t.Fatalf("error %v is not an *Error with a message", err)
			}
			return
		}
		if n < 0 || n > Saturated {
			t.Fatalf("cost %d out of range", n)
		}
	})
}
