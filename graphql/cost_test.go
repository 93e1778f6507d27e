package graphql

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// The worked examples: each cost follows from the rules in docs/graphql.md
// (Shopify's documented ones where the number needs no schema).
func TestDocumentCost(t *testing.T) {
	tests := []struct {
		name, query, op string
		vars            map[string]any
		set             func(*Prices)
		want            int64
	}{
		{name: "scalar only", query: `{ __typename }`, want: 0},
		{name: "one object", query: `{ shop { name } }`, want: 1},
		{name: "two objects nested", query: `{ shop { name owner { email } } }`, want: 2},
		{name: "shopify connection", query: `{ products(first: 10) { edges { node { title } } } }`, want: 12},
		{name: "shopify nested connections",
			query: `{ products(first: 10) { edges { node { title variants(first: 5) { edges { node { price } } } } } } }`,
			want:  82},
		{name: "nodes shorthand", query: `{ products(first: 10) { nodes { title } } }`, want: 12},
		{name: "pageInfo and cursor free", query: `{ products(first: 10) { pageInfo { hasNextPage } edges { cursor node { title } } } }`, want: 12},
		{name: "last", query: `{ orders(last: 3) { edges { node { id } } } }`, want: 5},
		{name: "first and last: the larger", query: `{ orders(first: 2, last: 4) { nodes { id } } }`, want: 6},
		{name: "connection of scalars", query: `{ tags(first: 20) }`, want: 2},
		{name: "object under node", query: `{ products(first: 10) { edges { node { title image { url } } } } }`, want: 22},
		{name: "connection with a field once", query: `{ products(first: 10) { totalCount { n } nodes { id } } }`, want: 13},
		{name: "fragment", query: `query { products(first: 10) { edges { node { ...P } } } } fragment P on Product { title image { url } }`, want: 22},
		{name: "fragment of edges", query: `query { products(first: 10) { ...E } } fragment E on ProductConnection { edges { node { id } } }`, want: 12},
		{name: "inline fragment", query: `{ node(id: "1") { ... on Product { variants(first: 5) { nodes { price } } } } }`, want: 8},
		{name: "fragment spread twice", query: `{ a { ...F } b { ...F } } fragment F on T { x { y } }`, want: 4},
		{name: "variable", query: `query($n: Int) { products(first: $n) { nodes { id } } }`, vars: map[string]any{"n": 4.0}, want: 6},
		{name: "variable absent: default page", query: `query($n: Int) { products(first: $n) { nodes { id } } }`, want: 52},
		{name: "variable default", query: `query($n: Int = 7) { products(first: $n) { nodes { id } } }`, want: 9},
		{name: "variable null: default page", query: `query($n: Int) { products(first: $n) { nodes { id } } }`, vars: map[string]any{"n": nil}, want: 52},
		{name: "default_page set", query: `query($n: Int) { products(first: $n) { nodes { id } } }`, set: func(p *Prices) { p.DefaultPage = 10 }, want: 12},
		{name: "object_cost 0", query: `{ products(first: 10) { edges { node { title } } } }`, set: func(p *Prices) { p.Object = 0 }, want: 2},
		{name: "object_cost set", query: `{ products(first: 10) { edges { node { title } } } }`, set: func(p *Prices) { p.Object = 2 }, want: 22},
		{name: "mutation", query: `mutation { productCreate(input: {title: "x"}) { product { id } userErrors { message } } }`, want: 10},
		{name: "two mutations", query: `mutation { a { id } b { id } }`, want: 20},
		{name: "mutation_cost set", query: `mutation { a { id } }`, set: func(p *Prices) { p.Mutation = 3 }, want: 3},
		{name: "operationName", query: `query A { a { id } } query B { products(first: 10) { nodes { id } } }`, op: "B", want: 12},
		{name: "saturates", query: `{ a(first: 1000000) { nodes { b(first: 1000000) { nodes { c(first: 1000000) { nodes { d(first: 1000000) { nodes { id } } } } } } } } }`, want: Saturated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prices := Defaults
			if tt.set != nil {
				tt.set(&prices)
			}
			got, err := prices.Document(tt.query, tt.op, tt.vars)
			if err != nil {
				t.Fatalf("Document: %v", err)
			}
			if got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

func TestDocumentErrors(t *testing.T) {
	tests := []struct {
		name, query, op string
		vars            map[string]any
		code, says      string
	}{
		{name: "does not parse", query: `{ products(first: 10) { `, code: CodeParse, says: "Expected Name"},
		{name: "fragment cycle", query: `{ a { ...F } } fragment F on T { b { ...G } } fragment G on T { ...F }`, code: CodeBadRequest, says: "within itself"},
		{name: "fragment self", query: `{ a { ...F } } fragment F on T { ...F }`, code: CodeBadRequest, says: "within itself"},
		{name: "mutation fragment cycle", query: `mutation { ...F } fragment F on M { ...F }`, code: CodeBadRequest, says: "within itself"},
		{name: "unknown fragment", query: `{ a { ...F } }`, code: CodeBadRequest, says: "Unknown fragment"},
		{name: "unknown operation", query: `query A { a { id } }`, op: "B", code: CodeBadRequest, says: "Unknown operation"},
		{name: "two operations unnamed", query: `query A { a { id } } query B { b { id } }`, code: CodeBadRequest, says: "operationName"},
		{name: "no operation", query: `fragment F on T { a }`, code: CodeBadRequest, says: "no operation"},
		{name: "negative page", query: `{ a(first: -1) { nodes { id } } }`, code: CodeBadRequest, says: "non-negative"},
		{name: "string page", query: `{ a(first: "ten") { nodes { id } } }`, code: CodeBadRequest, says: "non-negative"},
		{name: "fractional variable", query: `query($n: Int) { a(first: $n) { nodes { id } } }`, vars: map[string]any{"n": 2.5}, code: CodeBadRequest, says: "non-negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Defaults.Document(tt.query, tt.op, tt.vars)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want an *Error", err)
			}
			if e.Code != tt.code || !strings.Contains(e.Message, tt.says) {
				t.Errorf("got %s %q, want %s saying %q", e.Code, e.Message, tt.code, tt.says)
			}
		})
	}
}

func TestRequest(t *testing.T) {
	tests := []struct {
		name, body string
		max        int64
		want       Price
		code       string
	}{
		{name: "one", body: `{"query":"{ products(first: 10) { edges { node { title } } } }"}`, want: Price{Cost: 12}},
		{name: "variables", body: `{"query":"query($n: Int!) { products(first: $n) { nodes { id } } }","variables":{"n":3}}`, want: Price{Cost: 5}},
		{name: "operationName", body: `{"query":"query A { a { id } } mutation B { b { id } }","operationName":"B"}`, want: Price{Cost: 10}},
		{name: "batch", body: `[{"query":"{ a { id } }"},{"query":"{ products(first: 10) { nodes { id } } }"},{"query":"mutation { m { id } }"}]`, want: Price{Cost: 23}},
		{name: "persisted", body: `{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"abc"}}}`, want: Price{Persisted: 1}},
		{name: "batch with persisted", body: `[{"query":"{ a { id } }"},{"extensions":{"persistedQuery":{"sha256Hash":"abc"}}}]`, want: Price{Cost: 1, Persisted: 1}},
		{name: "persisted with its query", body: `{"query":"{ a { id } }","extensions":{"persistedQuery":{"sha256Hash":"abc"}}}`, want: Price{Cost: 1}},
		{name: "over max", body: `{"query":"{ products(first: 100) { nodes { id } } }"}`, max: 100, code: CodeMaxExceeded},
		{name: "batch over max", body: `[{"query":"{ products(first: 40) { nodes { id } } }"},{"query":"{ products(first: 40) { nodes { id } } }"}]`, max: 80, code: CodeMaxExceeded},
		{name: "at max", body: `{"query":"{ products(first: 98) { nodes { id } } }"}`, max: 100, want: Price{Cost: 100}},
		{name: "not JSON", body: `query { a }`, code: CodeBadRequest},
		{name: "no query", body: `{}`, code: CodeBadRequest},
		{name: "empty batch", body: `[]`, code: CodeBadRequest},
		{name: "two values", body: `{"query":"{ a }"} {}`, code: CodeBadRequest},
		{name: "query not a string", body: `{"query":3}`, code: CodeBadRequest},
		{name: "does not parse", body: `{"query":"{"}`, code: CodeParse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prices := Defaults
			prices.Max = tt.max
			got, err := prices.Request([]byte(tt.body))
			if tt.code != "" {
				var e *Error
				if !errors.As(err, &e) || e.Code != tt.code {
					t.Fatalf("got %v, %v; want code %s", got, err, tt.code)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestQuery(t *testing.T) {
	q := url.Values{
		"query":     {`query P($n: Int) { products(first: $n) { edges { node { title } } } } query Q { a { id } }`},
		"variables": {`{"n": 10}`},
	}
	q.Set("operationName", "P")
	if got, err := Defaults.Query(q); err != nil || got.Cost != 12 {
		t.Errorf("GET: got %+v, %v; want cost 12", got, err)
	}
	q.Set("variables", "[")
	if _, err := Defaults.Query(q); err == nil {
		t.Error("GET with broken variables: got no error")
	}
	hash := url.Values{"extensions": {`{"persistedQuery":{"version":1,"sha256Hash":"abc"}}`}}
	if got, err := Defaults.Query(hash); err != nil || got.Persisted != 1 {
		t.Errorf("GET persisted: got %+v, %v; want one persisted", got, err)
	}
}

// A document whose fragments spread each other twice, 40 deep, would cost
// 2⁴⁰ walks without memoising: it must be priced at once.
func TestFragmentFanOut(t *testing.T) {
	var b strings.Builder
	b.WriteString("{ root { ...F0 } }\n")
	for i := range 40 {
		b.WriteString("fragment F")
		b.WriteString(strconv.Itoa(i))
		b.WriteString(" on T { a { ...F")
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteString(" } b { ...F")
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteString(" } }\n")
	}
	b.WriteString("fragment F40 on T { id }\n")
	got, err := Defaults.Document(b.String(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	// root 1, then each level two objects: 1 + 2 + 4 + ... + 2⁴⁰.
	if want := int64(1<<41 - 1); got != want {
		t.Errorf("got %d, want %d", got, want)
	}
}

// A cached document is priced with each request's own variables.
func TestCacheKeepsVariablesApart(t *testing.T) {
	p := Defaults
	p.Cache = NewCache(4)
	q := `query($n: Int) { products(first: $n) { nodes { id } } }`
	for _, n := range []float64{1, 10, 1, 3} {
		got, err := p.Document(q, "", map[string]any{"n": n})
		if want := 2 + int64(n); err != nil || got != want {
			t.Errorf("n=%v: got %d, %v; want %d", n, got, err, want)
		}
	}
	if _, err := p.Document(`{`, "", nil); err == nil {
		t.Error("a broken document priced through the cache: got no error")
	}
}
