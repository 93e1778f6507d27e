package graphql

import (
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
)

// Cache keeps the parsed documents of recent queries, so that a query sent
// again is priced without being parsed again: parsing is nearly all of a
// cost's time (docs/performance.md, "GraphQL cost"), and clients send the
// same few documents with different variables. A document is cached by its
// text, and only one of at most cacheableBytes, so that the cache holds at
// most size × cacheableBytes of text. It is safe for concurrent use; the
// documents it holds are only read.
type Cache struct {
	docs *lru.Cache[string, *ast.QueryDocument]
}

// cacheableBytes is the longest query text kept.
const cacheableBytes = 8 << 10

// NewCache returns a cache of the last size documents (at least 1).
func NewCache(size int) *Cache {
	c, _ := lru.New[string, *ast.QueryDocument](max(size, 1)) // fails only for size < 1
	return &Cache{docs: c}
}

// parse parses query, through c when it is not nil.
func (c *Cache) parse(query string) (*ast.QueryDocument, error) {
	if c != nil {
		if doc, ok := c.docs.Get(query); ok {
			return doc, nil
		}
	}
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: query}, maxTokens)
	if err != nil {
		return nil, err
	}
	if c != nil && len(query) <= cacheableBytes {
		c.docs.Add(query, doc)
	}
	return doc, nil
}
