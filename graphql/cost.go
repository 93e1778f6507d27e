// Package graphql prices a GraphQL request from its query document before
// it is run, as Shopify's Admin API does, so that every node of a PoP
// charges a query the same without asking the origin or knowing its
// schema. The rules, and why they are these, are in docs/graphql.md.
//
// The package reads untrusted input (request bodies and query strings) and
// never panics on it: a document that does not parse, a cycle of fragments,
// an unknown fragment or operation, or a cost over the limit is an *Error,
// whose message is safe to show the client in GraphQL's error shape.
// It has no HTTP types; the proxy hands it bytes and strings.
package graphql

import (
	"fmt"
	"math"
	"strconv"

	"github.com/vektah/gqlparser/v2/ast"
)

// ConnectionCost is what a connection costs besides its nodes.
const ConnectionCost = 2

// Saturated is the most a cost grows to: costs saturate there instead of
// overflowing, far beyond any max_query_cost (a page of 250 nested eight
// deep would otherwise pass 2⁶³).
const Saturated int64 = 1 << 53

// maxTokens bounds the tokens of one query document, so that a body that
// the proxy may hold (request_buffer, up to 1 GiB) cannot make the parser
// build an AST many times its size.
const maxTokens = 100_000

// Prices are the numbers a cost is computed with, used as they are (0 is
// free); [Defaults] are Shopify's. Max, when not 0, is the most a request
// may cost: one that costs more is an *Error with code MAX_COST_EXCEEDED.
type Prices struct {
	Object      int64 // an object field
	Mutation    int64 // a top-level field of a mutation, what it returns included
	DefaultPage int64 // the page size of a connection whose size is not given
	Max         int64 // 0: no limit
	// Cache, when not nil, keeps parsed documents for the next requests.
	Cache *Cache
}

// Defaults are the prices of docs/graphql.md: an object 1, a mutation 10,
// a page of 50.
var Defaults = Prices{Object: 1, Mutation: 10, DefaultPage: 50}

// Error is why a request cannot be priced, or is priced over Prices.Max.
// Message is meant for the client; Code is an extensions code
// (GRAPHQL_PARSE_FAILED, MAX_COST_EXCEEDED, BAD_REQUEST).
type Error struct {
	Message string
	Code    string
	// Cost is the request's cost when Code is MAX_COST_EXCEEDED.
	Cost int64
}

func (e *Error) Error() string { return "graphql: " + e.Message }

// Codes of an *Error.
const (
	CodeParse       = "GRAPHQL_PARSE_FAILED"
	CodeBadRequest  = "BAD_REQUEST"
	CodeMaxExceeded = "MAX_COST_EXCEEDED"
)

func badRequest(format string, args ...any) *Error {
	return &Error{Message: fmt.Sprintf(format, args...), Code: CodeBadRequest}
}

// Document returns what the operation of query that a request runs costs,
// with operationName choosing it ("" when the document has one) and vars
// the request's variables (JSON values as encoding/json decodes them with
// UseNumber, or float64). It does not check Prices.Max: a request (one
// document, or a batch) is checked as a whole by Request and Query.
func (p Prices) Document(query, operationName string, vars map[string]any) (int64, error) {
	doc, err := p.Cache.parse(query)
	if err != nil {
		return 0, &Error{Message: parseMessage(err), Code: CodeParse}
	}
	op, e := pick(doc, operationName)
	if e != nil {
		return 0, e
	}
	c := pricer{p: p, doc: doc, op: op, vars: vars}
	cost := c.operation()
	if c.err != nil {
		return 0, c.err
	}
	return cost, nil
}

// parseMessage is the parser's message with its position, as GraphQL
// servers report it.
func parseMessage(err error) string {
	return err.Error()
}

// pick returns the operation of doc that a request names, or the only one.
func pick(doc *ast.QueryDocument, name string) (*ast.OperationDefinition, *Error) {
	if name != "" {
		if op := doc.Operations.ForName(name); op != nil {
			return op, nil
		}
		return nil, badRequest("Unknown operation named %q.", name)
	}
	switch len(doc.Operations) {
	case 0:
		return nil, badRequest("The document holds no operation.")
	case 1:
		return doc.Operations[0], nil
	}
	return nil, badRequest("The document holds %d operations: operationName must name one.", len(doc.Operations))
}

// pricer prices one operation of one document. Fragment costs are
// memoised by (name, level), so that a document whose fragments spread
// each other many times is priced in time linear in its size; a fragment
// being priced is marked, so that a cycle is found, not followed.
type pricer struct {
	p    Prices
	doc  *ast.QueryDocument
	op   *ast.OperationDefinition
	vars map[string]any
	memo map[fragmentAt]price
	busy map[fragmentAt]bool
	err  *Error
}

// level is where in a connection a selection set is.
type level uint8

const (
	plain      level = iota // an ordinary selection set
	connection              // a connection's own: edges, nodes, pageInfo
	edges                   // edges' own: node
)

type fragmentAt struct {
	name string
	at   level
}

// operation prices the operation: a query's (or subscription's) fields as
// objects and connections, a mutation's top-level fields at the mutation
// cost each, what they return included.
func (c *pricer) operation() int64 {
	if c.op.Operation != ast.Mutation {
		return c.set(c.op.SelectionSet, plain).total()
	}
	return mul(c.topFields(c.op.SelectionSet, make(map[string]bool)), c.p.Mutation)
}

// price is what a selection set costs: once, and for each node of the
// connection it belongs to (perNode, at levels connection and edges).
type price struct{ once, perNode int64 }

func (pr price) total() int64 { return add(pr.once, pr.perNode) }

// set prices the selection set s at level at.
func (c *pricer) set(s ast.SelectionSet, at level) price {
	var out price
	for _, sel := range s {
		if c.err != nil {
			return out
		}
		switch sel := sel.(type) {
		case *ast.Field:
			f := c.field(sel, at)
			out.once, out.perNode = add(out.once, f.once), add(out.perNode, f.perNode)
		case *ast.InlineFragment:
			f := c.set(sel.SelectionSet, at)
			out.once, out.perNode = add(out.once, f.once), add(out.perNode, f.perNode)
		case *ast.FragmentSpread:
			f := c.fragment(sel.Name, at)
			out.once, out.perNode = add(out.once, f.once), add(out.perNode, f.perNode)
		}
	}
	return out
}

// field prices one field at level at. In a connection, edges and pageInfo
// cost nothing, and node (in edges) and nodes are each one node's object;
// anywhere a field with first or last is a connection, one with a
// selection set an object, and one without (a scalar or an enum) nothing.
func (c *pricer) field(f *ast.Field, at level) price {
	switch {
	case at == connection && f.Name == "edges":
		return c.set(f.SelectionSet, edges)
	case at == connection && f.Name == "pageInfo":
		return price{}
	case at == connection && f.Name == "nodes", at == edges && f.Name == "node":
		return price{perNode: c.object(f)}
	case at == edges:
		// A field of an edge (cursor, or an object beside node) is
		// there once a node.
		return price{perNode: c.object(f)}
	}
	return price{once: c.object(f)}
}

// object prices field f anywhere but as a connection's part: a connection,
// an object, or nothing.
func (c *pricer) object(f *ast.Field) int64 {
	page, isConn := c.pageSize(f)
	if isConn {
		nodes := c.set(f.SelectionSet, connection)
		return add(add(ConnectionCost, nodes.once), mul(page, nodes.perNode))
	}
	if len(f.SelectionSet) == 0 {
		return 0
	}
	return add(c.p.Object, c.set(f.SelectionSet, plain).total())
}

// fragment prices the fragment named name, spread at level at: its
// selection set, as if written there. An unknown fragment and a cycle are
// errors (a document with either is invalid GraphQL).
func (c *pricer) fragment(name string, at level) price {
	key := fragmentAt{name, at}
	if pr, ok := c.memo[key]; ok {
		return pr
	}
	def := c.doc.Fragments.ForName(name)
	if def == nil {
		c.err = badRequest("Unknown fragment %q.", name)
		return price{}
	}
	if c.busy[key] {
		c.err = badRequest("Cannot spread fragment %q within itself.", name)
		return price{}
	}
	if c.busy == nil {
		c.busy, c.memo = make(map[fragmentAt]bool), make(map[fragmentAt]price)
	}
	c.busy[key] = true
	pr := c.set(def.SelectionSet, at)
	delete(c.busy, key)
	c.memo[key] = pr
	return pr
}

// topFields returns the number of top-level fields of s, fragments
// expanded (a mutation's operations).
func (c *pricer) topFields(s ast.SelectionSet, seen map[string]bool) int64 {
	var n int64
	for _, sel := range s {
		if c.err != nil {
			return n
		}
		switch sel := sel.(type) {
		case *ast.Field:
			n++
		case *ast.InlineFragment:
			n = add(n, c.topFields(sel.SelectionSet, seen))
		case *ast.FragmentSpread:
			def := c.doc.Fragments.ForName(sel.Name)
			switch {
			case def == nil:
				c.err = badRequest("Unknown fragment %q.", sel.Name)
			case seen[sel.Name]:
				c.err = badRequest("Cannot spread fragment %q within itself.", sel.Name)
			default:
				seen[sel.Name] = true
				n = add(n, c.topFields(def.SelectionSet, seen))
				delete(seen, sel.Name)
			}
		}
	}
	return n
}

// pageSize returns the page size of field f and whether it is a
// connection (it has a first or last argument): the larger of the two
// when both are given. A size is an integer literal, or a variable's value
// (the request's, else the variable's default); a variable with neither,
// or null, is the default page. Anything else (a negative number, a
// string) is an error: the origin would refuse it too.
func (c *pricer) pageSize(f *ast.Field) (int64, bool) {
	var page int64
	found := false
	for _, a := range f.Arguments {
		if a.Name != "first" && a.Name != "last" {
			continue
		}
		found = true
		n, ok := c.size(a.Value)
		if !ok {
			c.err = badRequest("The page size %s of field %q must be a non-negative integer.", a.Name, f.Name)
			return 0, true
		}
		page = max(page, n)
	}
	return page, found
}

// size reads one page size argument.
func (c *pricer) size(v *ast.Value) (int64, bool) {
	if v == nil {
		return c.p.DefaultPage, true
	}
	switch v.Kind {
	case ast.IntValue:
		return literal(v.Raw)
	case ast.NullValue:
		return c.p.DefaultPage, true
	case ast.Variable:
		if val, ok := c.vars[v.Raw]; ok {
			return jsonSize(val, c.p.DefaultPage)
		}
		if def := c.op.VariableDefinitions.ForName(v.Raw); def != nil && def.DefaultValue != nil {
			return c.size(def.DefaultValue)
		}
		return c.p.DefaultPage, true
	}
	return 0, false
}

// literal reads a GraphQL integer literal as a page size (saturated).
func literal(raw string) (int64, bool) {
	if raw == "" || raw[0] == '-' {
		return 0, raw == "-0"
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		// All digits (the lexer says so) and too large: saturate.
		return Saturated, true
	}
	return min(n, Saturated), true
}

// jsonSize reads a variable's JSON value as a page size: null is the
// default page.
func jsonSize(v any, def int64) (int64, bool) {
	switch v := v.(type) {
	case nil:
		return def, true
	case interface{ String() string }: // json.Number
		s := v.String()
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return min(n, Saturated), n >= 0
		}
		f, err := strconv.ParseFloat(s, 64)
		return floatSize(f, err == nil)
	case float64:
		return floatSize(v, true)
	case int:
		return min(int64(v), Saturated), v >= 0
	case int64:
		return min(v, Saturated), v >= 0
	}
	return 0, false
}

func floatSize(f float64, ok bool) (int64, bool) {
	if !ok || math.IsNaN(f) || f < 0 || f != math.Trunc(f) {
		return 0, false
	}
	if f >= float64(Saturated) {
		return Saturated, true
	}
	return int64(f), true
}

// add and mul saturate at Saturated; their operands are at most it.
func add(a, b int64) int64 { return min(a+b, Saturated) }

func mul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > Saturated/b {
		return Saturated
	}
	return min(a*b, Saturated)
}
