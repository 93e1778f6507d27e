package graphql

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
)

// query2K is a realistic query of about 2 KiB: a storefront page with
// nested connections, a fragment, variables and aliases.
func query2K() string {
	var b strings.Builder
	b.WriteString(`query Storefront($first: Int = 20, $after: String, $variants: Int = 5) {
  shop { name primaryDomain { url host } currencyCode }
  collections(first: 5) { edges { cursor node { id handle title image { url altText } } } pageInfo { hasNextPage endCursor } }
  products(first: $first, after: $after) {
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
    edges { cursor node { ...ProductCard } }
  }
`)
	for i := 0; b.Len() < 1900; i++ {
		b.WriteString("  alias")
		b.WriteString(strings.Repeat("x", i%7+1))
		b.WriteString(`: product(handle: "handle-number-`)
		b.WriteByte(byte('a' + i%26))
		b.WriteString(`") { id title vendor priceRange { minVariantPrice { amount currencyCode } } }` + "\n")
	}
	b.WriteString(`}
fragment ProductCard on Product {
  id handle title vendor productType tags
  featuredImage { url altText width height }
  priceRange { minVariantPrice { amount currencyCode } maxVariantPrice { amount currencyCode } }
  variants(first: $variants) { edges { node { id title availableForSale price { amount currencyCode } } } }
}
`)
	return b.String()
}

// BenchmarkDocument2K prices a 2 KiB query: the target is at most 20 µs.
func BenchmarkDocument2K(b *testing.B) {
	q := query2K()
	b.SetBytes(int64(len(q)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Defaults.Document(q, "", nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRequest2K prices the same query sent as a POST body, JSON
// decoding included.
func BenchmarkRequest2K(b *testing.B) {
	body := []byte(`{"query":` + strconvQuote(query2K()) + `,"variables":{"first":20,"variants":5}}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Defaults.Request(body); err != nil {
			b.Fatal(err)
		}
	}
}

func strconvQuote(s string) string {
	out, _ := json.Marshal(s)
	return string(out)
}

// BenchmarkDocument2KCached prices the 2 KiB query again, its document
// parsed once and kept (Cache): a client sending its queries again.
func BenchmarkDocument2KCached(b *testing.B) {
	q := query2K()
	p := Defaults
	p.Cache = NewCache(16)
	b.SetBytes(int64(len(q)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Document(q, "", map[string]any{"first": 20}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGqlparserParse2K is gqlparser's parse of the same query alone,
// nothing of edge's: the floor under BenchmarkDocument2K for a query not
// seen before.
func BenchmarkGqlparserParse2K(b *testing.B) {
	q := query2K()
	b.SetBytes(int64(len(q)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parser.ParseQuery(&ast.Source{Input: q}); err != nil {
			b.Fatal(err)
		}
	}
}
