package graphql

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
)

// Price is what a request costs: Cost for the operations priced from their
// documents, and Persisted operations sent by hash alone (an automatic
// persisted query), which edge cannot price: the caller charges each the
// rule's own cost.
type Price struct {
	Cost      int64
	Persisted int
}

// params are one operation's request, as GraphQL over HTTP sends it.
type params struct {
	Query         *string         `json:"query"`
	OperationName *string         `json:"operationName"`
	Variables     map[string]any  `json:"variables"`
	Extensions    json.RawMessage `json:"extensions"`
}

// Request prices a POST body: one request object, or a batch (a JSON array
// of them), whose operations are added up. It checks Prices.Max against
// the total.
func (p Prices) Request(body []byte) (Price, error) {
	body = bytes.TrimLeft(body, " \t\r\n")
	var batch []params
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var err error
	if len(body) > 0 && body[0] == '[' {
		err = dec.Decode(&batch)
		if err == nil && len(batch) == 0 {
			return Price{}, badRequest("The batch holds no operation.")
		}
	} else {
		batch = make([]params, 1)
		err = dec.Decode(&batch[0])
	}
	if err != nil {
		return Price{}, badRequest("The body is not a GraphQL request (a JSON object with a query, or an array of them): %s.", jsonProblem(err))
	}
	if dec.More() {
		return Price{}, badRequest("The body holds more than one JSON value.")
	}
	var out Price
	for i := range batch {
		if err := p.add(&out, &batch[i]); err != nil {
			return Price{}, err
		}
	}
	return out, p.check(out.Cost)
}

// Query prices a GET request's parameters: query, operationName,
// variables (JSON) and extensions (JSON).
func (p Prices) Query(q url.Values) (Price, error) {
	var one params
	if q.Has("query") {
		s := q.Get("query")
		one.Query = &s
	}
	if q.Has("operationName") {
		s := q.Get("operationName")
		one.OperationName = &s
	}
	if v := q.Get("variables"); v != "" {
		dec := json.NewDecoder(bytes.NewReader([]byte(v)))
		dec.UseNumber()
		if err := dec.Decode(&one.Variables); err != nil {
			return Price{}, badRequest("The variables parameter is not a JSON object: %s.", jsonProblem(err))
		}
	}
	if v := q.Get("extensions"); v != "" {
		one.Extensions = json.RawMessage(v)
	}
	var out Price
	if err := p.add(&out, &one); err != nil {
		return Price{}, err
	}
	return out, p.check(out.Cost)
}

// add adds the price of one operation's request to out.
func (p Prices) add(out *Price, r *params) error {
	if r.Query == nil || *r.Query == "" {
		if persisted(r.Extensions) {
			out.Persisted++
			return nil
		}
		return badRequest("The request has no query.")
	}
	name := ""
	if r.OperationName != nil {
		name = *r.OperationName
	}
	n, err := p.Document(*r.Query, name, r.Variables)
	if err != nil {
		return err
	}
	out.Cost = add(out.Cost, n)
	return nil
}

// persisted reports whether extensions name a persisted query
// ({"persistedQuery":{"sha256Hash":"..."}}, Apollo's protocol).
func persisted(ext json.RawMessage) bool {
	if len(ext) == 0 {
		return false
	}
	var e struct {
		PersistedQuery *struct {
			Hash string `json:"sha256Hash"`
		} `json:"persistedQuery"`
	}
	return json.Unmarshal(ext, &e) == nil && e.PersistedQuery != nil && e.PersistedQuery.Hash != ""
}

// check refuses a cost over Max.
func (p Prices) check(cost int64) error {
	if p.Max > 0 && cost > p.Max {
		return &Error{
			Message: fmt.Sprintf("Query cost is %d, which exceeds the single query max cost limit (%d).", cost, p.Max),
			Code:    CodeMaxExceeded,
			Cost:    cost,
		}
	}
	return nil
}

// jsonProblem says what is wrong with a JSON value without quoting it.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("%s where %s was expected", typ.Value, typ.Type)
	}
	return "invalid JSON"
}
