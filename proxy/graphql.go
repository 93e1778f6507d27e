package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/edgerate/edge/graphql"
	"github.com/edgerate/edge/rules"
)

// This file prices a request to a domain's GraphQL API, for its rules with
// cost_from: graphql, before limit decides it (docs/graphql.md): the body
// is read first, within the domain's request_buffer and the bytes bodies
// may hold at once (max_buffered_bytes); a GET's query comes from its
// query parameter. A query that cannot be priced, or costs more than
// max_query_cost, is answered 400 in GraphQL's error shape and never
// reaches the origin. The fast path declines the API's requests (limit),
// so that they are priced here alone.

// graphqlAPI is a domain's GraphQL API as the proxy prices it.
type graphqlAPI struct {
	path   string
	prices graphql.Prices
}

// parsedDocuments is how many parsed query documents a domain keeps
// (graphql.Cache): a few hundred KiB of syntax trees at most.
const parsedDocuments = 512

func newGraphQLAPI(g *rules.GraphQL) *graphqlAPI {
	if g == nil {
		return nil
	}
	return &graphqlAPI{path: g.Path, prices: graphql.Prices{
		Object: g.ObjectCost, Mutation: g.MutationCost, DefaultPage: g.DefaultPage,
		Max: g.MaxQueryCost, Cache: graphql.NewCache(parsedDocuments),
	}}
}

// priceGraphQL prices ex's request if it is one to its domain's GraphQL
// API, leaving the price in ex.priced (nil: the rules' own cost). It
// reports false when it has answered the request (400, 413, 503).
func (p *Proxy) priceGraphQL(w http.ResponseWriter, r *http.Request, ex *exchange) bool {
	api := ex.d.graphql
	if api == nil || ex.src.Path != api.path {
		return true
	}
	var price graphql.Price
	var err error
	switch r.Method {
	case http.MethodGet:
		price, err = api.prices.Query(r.URL.Query())
	case http.MethodPost:
		body, ok := p.readQuery(w, r, ex)
		if !ok {
			return false
		}
		price, err = api.prices.Request(body)
	default:
		return true
	}
	if err != nil {
		var ge *graphql.Error
		if !errors.As(err, &ge) {
			ge = &graphql.Error{Message: "The request could not be priced.", Code: graphql.CodeBadRequest}
		}
		p.metrics.refused.WithLabelValues("400").Inc()
		ex.ans.graphqlErrorAnswer(ge, api.prices.Max)
		ex.d.requests.count(&ex.ans)
		ex.ans.write(w)
		return false
	}
	ex.price, ex.priced = price, &ex.price
	return true
}

// readQuery reads a POST's body whole before the request is decided, as
// readBody buffers one (the same reservation against max_buffered_bytes,
// and the same refusals for a body that fails), and leaves it for the
// forward: r's body then reads it from memory, with its length, and
// readBody has nothing left to do (ex.held). A body over request_buffer
// cannot be priced and gets 413; one that finds max_buffered_bytes full,
// 503. net/http sends 100 Continue, to a client that waits for it, at the
// first read: before the decision.
func (p *Proxy) readQuery(w http.ResponseWriter, r *http.Request, ex *exchange) ([]byte, bool) {
	cb := wrapBody(r, ex)
	if cb == nil {
		return nil, true
	}
	d := ex.d
	most := int64(d.Body.BufferSize)
	if d.Body.MaxSize > 0 {
		most = min(most, int64(d.Body.MaxSize))
	}
	if r.ContentLength > most {
		p.refuseBody(w, d, errBodyTooLarge)
		return nil, false
	}
	plan := bodyPlan{buffer: r.ContentLength}
	if r.ContentLength < 0 {
		plan.buffer = most + 1 // one byte more tells a body over the limit
	}
	release, ok := p.reserve(ex.st, &plan)
	if !ok {
		p.refuseBufferFull(w, d)
		return nil, false
	}
	buf, err := readPrefix(cb, r.ContentLength, plan.buffer)
	if err == nil && int64(len(buf)) > most {
		err = errBodyTooLarge
	}
	if err != nil {
		release()
		p.refuseBody(w, d, err)
		return nil, false
	}
	cb.r = &prefixReader{buf: buf, done: release}
	if r.Trailer == nil {
		r.ContentLength = int64(len(buf))
		r.TransferEncoding = nil
	}
	ex.held = release
	return buf, true
}

// refuseBufferFull answers a GraphQL request whose body finds no room
// within max_buffered_bytes: 503, to be sent again in a second.
func (p *Proxy) refuseBufferFull(w http.ResponseWriter, d *domain) {
	p.metrics.refused.WithLabelValues("503").Inc()
	var a answer
	a.refusalAnswer(refusal{http.StatusServiceUnavailable, "request bodies fill max_buffered_bytes"}, outcomeBodyRefused)
	a.set(fieldRetryAfter, retryAfterOne)
	d.requests.count(&a)
	a.write(w)
}

// graphqlCost is what a priced request costs under rule rs: its priced
// operations, and its persisted ones at the rule's cost each, at most what
// the rule can hold.
func graphqlCost(rs *ruleState, price *graphql.Price) int64 {
	n := price.Cost + int64(price.Persisted)*rs.Cost
	return min(n, rs.Capacity())
}

// graphqlErrorAnswer answers a request that cannot be priced: 400 with
// GraphQL's error shape, {"errors":[{"message":...,"extensions":{"code":...}}]}.
func (a *answer) graphqlErrorAnswer(e *graphql.Error, most int64) {
	a.reset(http.StatusBadRequest, outcomeBadCost)
	a.set(fieldCacheControl, noStore)
	a.set(fieldContentType, contentTypeJSON)
	a.set(fieldXContentTypeOptions, nosniff)
	msg, _ := json.Marshal(e.Message) // a string always marshals
	b := append(a.body, `{"errors":[{"message":`...)
	b = append(b, msg...)
	b = append(b, `,"extensions":{"code":"`...)
	b = append(b, e.Code...)
	b = append(b, '"')
	if e.Code == graphql.CodeMaxExceeded {
		b = append(b, `,"cost":`...)
		b = strconv.AppendInt(b, e.Cost, 10)
		b = append(b, `,"maxCost":`...)
		b = strconv.AppendInt(b, most, 10)
	}
	a.body = append(b, "}}]}\n"...)
}

// appendThrottledJSON appends Shopify's body of a refused query:
// requestedQueryCost what the request costs under rule rs, and the
// throttle status, from which a client computes its own wait:
// maximumAvailable the rule's capacity, currentlyAvailable what its key
// has left, restoreRate the units it regains a second (limit ÷ period;
// 0 for a quota, which regains nothing until its reset).
func appendThrottledJSON(b []byte, rs *ruleState, v verdict) []byte {
	b = append(b, `{"errors":[{"message":"Throttled","extensions":{"code":"THROTTLED"}}],"extensions":{"cost":{"requestedQueryCost":`...)
	b = strconv.AppendInt(b, v.cost, 10)
	b = append(b, `,"throttleStatus":{"maximumAvailable":`...)
	b = strconv.AppendInt(b, rs.Capacity(), 10)
	b = append(b, `,"currentlyAvailable":`...)
	b = strconv.AppendInt(b, max(v.Remaining, 0), 10)
	b = append(b, `,"restoreRate":`...)
	b = append(b, rs.graphqlRestore...)
	return append(b, "}}}}\n"...)
}

// graphqlRestore is rule r's restoreRate as a JSON number.
func graphqlRestore(r *rules.Rule) string {
	if r.Period <= 0 {
		return "0"
	}
	return strconv.FormatFloat(float64(r.Limit)/r.Period.Seconds(), 'f', -1, 64)
}
