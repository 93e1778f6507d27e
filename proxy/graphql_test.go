package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// graphqlDomain is a domain whose rule "points" prices requests by their
// GraphQL query: limit points per minute.
func graphqlDomain(origin string, limit int, g *rules.GraphQLConfig) rules.Config {
	r := rule("points", limit, time.Minute)
	r.CostFrom = "graphql"
	cfg := oneDomain(origin, r)
	cfg.Domains[0].GraphQL = g
	return cfg
}

func gqlBody(query string) string {
	b, _ := json.Marshal(map[string]string{"query": query})
	return string(b)
}

const (
	query12 = `{ products(first: 10) { edges { node { title } } } }`
	query82 = `{ products(first: 10) { edges { node { title variants(first: 5) { edges { node { price } } } } } } }`
)

// TestGraphQLCostCharged: each query is charged what it costs (12, 82,
// ...), and the first one the key cannot pay is refused with 429 and
// Shopify's THROTTLED body, whose figures let the client compute its wait.
func TestGraphQLCostCharged(t *testing.T) {
	origin, seen := newOrigin(t, "a")
	e := newEnv(t, graphqlDomain(origin.URL, 100, nil))
	for i, q := range []string{query12, query82} {
		resp, body := e.do("POST", "api.example.com", "/graphql", map[string]string{"Content-Type": "application/json"}, gqlBody(q))
		if resp.StatusCode != 200 || body != "origin:a" {
			t.Fatalf("query %d: got %d %q, want 200 from the origin", i, resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-RateLimit-Remaining"); got != "" {
			t.Errorf("query %d: X-RateLimit-Remaining %q on an allowed response with headers: blocked", i, got)
		}
	}
	// 100 - 12 - 82 = 6 left: a 12 is refused.
	resp, body := e.do("POST", "api.example.com", "/graphql", nil, gqlBody(query12))
	if resp.StatusCode != 429 {
		t.Fatalf("third query: got %d %q, want 429", resp.StatusCode, body)
	}
	want := `{"errors":[{"message":"Throttled","extensions":{"code":"THROTTLED"}}],"extensions":{"cost":{"requestedQueryCost":12,"throttleStatus":{"maximumAvailable":100,"currentlyAvailable":6,"restoreRate":1.6666666666666667}}}}` + "\n"
	if body != want {
		t.Errorf("429 body:\n got %s\nwant %s", body, want)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("429: Content-Type %q, Retry-After %q; want application/json and a wait", ct, resp.Header.Get("Retry-After"))
	}
	// A query of 6 still fits, whatever it is sent as: GET, mutation-free.
	q := url.Values{"query": {`query($n: Int) { products(first: $n) { nodes { id } } }`}, "variables": {`{"n": 4}`}}
	if resp, _ := e.get("api.example.com", "/graphql?"+q.Encode()); resp.StatusCode != 200 {
		t.Errorf("GET of cost 6: got %d, want 200", resp.StatusCode)
	}
	if got := seen(); len(got) != 3 || got[0].Body != gqlBody(query12) {
		t.Errorf("origin saw %d requests (first body %q), want 3 with the body as sent", len(got), got[0].Body)
	}
}

// TestGraphQLRefusals: what cannot be priced, or costs more than
// max_query_cost, is answered 400 in GraphQL's error shape and never
// reaches the origin, and uses no quota.
func TestGraphQLRefusals(t *testing.T) {
	origin, seen := newOrigin(t, "a")
	e := newEnv(t, graphqlDomain(origin.URL, 1000, &rules.GraphQLConfig{MaxQueryCost: 50}))
	tests := []struct{ name, body, code string }{
		{"does not parse", gqlBody(`{ products(first: 10) {`), "GRAPHQL_PARSE_FAILED"},
		{"fragment cycle", gqlBody(`{ a { ...F } } fragment F on T { ...F }`), "BAD_REQUEST"},
		{"over max_query_cost", gqlBody(query82), "MAX_COST_EXCEEDED"},
		{"not JSON", `{ a }`, "BAD_REQUEST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.do("POST", "api.example.com", "/graphql", nil, tt.body)
			var got struct {
				Errors []struct {
					Message    string
					Extensions struct{ Code string }
				}
			}
			if err := json.Unmarshal([]byte(body), &got); err != nil || resp.StatusCode != 400 ||
				len(got.Errors) != 1 || got.Errors[0].Extensions.Code != tt.code || got.Errors[0].Message == "" {
				t.Errorf("got %d %s (%v), want 400 with code %s", resp.StatusCode, body, err, tt.code)
			}
		})
	}
	if n := len(seen()); n != 0 {
		t.Errorf("origin saw %d requests, want none", n)
	}
	// Nothing was charged: a query of 50 passes 20 times.
	for i := range 20 {
		if resp, _ := e.do("POST", "api.example.com", "/graphql", nil, gqlBody(`{ a(first: 48) { nodes { id } } }`)); resp.StatusCode != 200 {
			t.Fatalf("query %d of cost 50: got %d, want 200", i, resp.StatusCode)
		}
	}
}

// TestGraphQLPersistedAndOtherPaths: a persisted query (a hash alone) and a
// request off the API's path cost the rule's cost.
func TestGraphQLPersistedAndOtherPaths(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	cfg := graphqlDomain(origin.URL, 3, &rules.GraphQLConfig{Path: "/api/graphql"})
	e := newEnv(t, cfg)
	persisted := `{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ecf4edb46db40b5132295c0291d62fb65d6759a9eedfa4d5d612dd5ec54a6b38"}}}`
	var got []int
	for range 2 {
		resp, _ := e.do("POST", "api.example.com", "/api/graphql", nil, persisted)
		got = append(got, resp.StatusCode)
	}
	resp, _ := e.get("api.example.com", "/elsewhere")
	got = append(got, resp.StatusCode)
	resp, _ = e.get("api.example.com", "/elsewhere")
	got = append(got, resp.StatusCode)
	if fmt.Sprint(got) != "[200 200 200 429]" {
		t.Errorf("statuses: got %v, want [200 200 200 429]", got)
	}
}

// TestGraphQLBodyLimits: a query body over request_buffer gets 413, and a
// client that waits for 100 Continue gets it before the decision, then
// its answer.
func TestGraphQLBodyLimits(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	cfg := graphqlDomain(origin.URL, 1000, nil)
	cfg.Domains[0].RequestBuffer = rules.KiB
	e := newEnv(t, cfg)
	big := gqlBody(`{ a { id } }` + strings.Repeat(" ", 2000))
	if resp, _ := e.do("POST", "api.example.com", "/graphql", nil, big); resp.StatusCode != 413 {
		t.Errorf("body over request_buffer: got %d, want 413", resp.StatusCode)
	}

	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := gqlBody(query12)
	fmt.Fprintf(conn, "POST /graphql HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", len(body))
	br := bufio.NewReader(conn)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("first line: got %q, %v; want 100 Continue", line, err)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil || l == "\r\n" {
			break
		}
	}
	io.WriteString(conn, body)
	line, _ = br.ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.1 200 ") {
		t.Errorf("after the body: got %q, want 200", line)
	}
}
