package rules

// This file compiles where a rule's cost comes from besides cost and
// cost_header (cost_from), and a domain's GraphQL API (graphql), which the
// rules with cost_from: graphql price requests by (docs/graphql.md).

// CostFrom is where a rule's cost comes from.
type CostFrom uint8

const (
	// CostFromRequest: the rule's cost, or its cost_header (the default).
	CostFromRequest CostFrom = iota
	// CostFromGraphQL: the cost edge computes from the request's GraphQL
	// query, before deciding; a persisted query (a hash alone) costs the
	// rule's cost.
	CostFromGraphQL
	// CostFromOriginTime: the milliseconds the origin took, from the
	// request sent to the response's end, charged then (at most the rule's
	// capacity), besides the rule's cost charged when deciding.
	CostFromOriginTime
)

func (c CostFrom) String() string {
	switch c {
	case CostFromGraphQL:
		return "graphql"
	case CostFromOriginTime:
		return "origin_time"
	}
	return ""
}

// GraphQL is a domain's GraphQL API, compiled: where it is and the numbers
// its queries are priced with.
type GraphQL struct {
	// Path is the API's path, matched exactly against the cleaned path.
	Path         string
	ObjectCost   int64
	MutationCost int64
	DefaultPage  int64
	// MaxQueryCost is the most a request may cost (400 above it): at most
	// the capacity of every cost_from: graphql rule of the domain, which
	// it is when not configured.
	MaxQueryCost int64
}

// Defaults of the graphql section.
const (
	DefaultGraphQLPath   = "/graphql"
	DefaultObjectCost    = 1
	DefaultMutationCost  = 10
	DefaultGraphQLPage   = 50
	maxGraphQLPrice      = 1_000_000
	maxGraphQLPageConfig = 1_000_000
)

// compileCostFrom compiles the rule's cost_from, once its cost is known.
func compileCostFrom(p *problems, path string, rc RuleConfig, r *Rule) {
	switch rc.CostFrom {
	case "":
		return
	case "graphql":
		r.CostFrom = CostFromGraphQL
	case "origin_time":
		r.CostFrom = CostFromOriginTime
	default:
		p.add(path+".cost_from", "must be graphql or origin_time, got %q", rc.CostFrom)
		return
	}
	for _, k := range []struct {
		key string
		set bool
	}{
		{"cost_header", rc.CostHeader != ""},
		{"response_cost_header", rc.ResponseCostHeader != ""},
		{"count_status", len(rc.CountStatus) > 0},
	} {
		if k.set {
			p.add(path+".cost_from", "%s and %s both say what a request costs: set one", rc.CostFrom, k.key)
		}
	}
	if rc.Mode == "soft" && r.CostFrom == CostFromOriginTime {
		p.add(path+".mode", "soft counts every request offered: not valid with cost_from origin_time")
	}
}

// compileGraphQL compiles domain d's graphql section (at path), once its
// rules are compiled: a section without a cost_from: graphql rule, or such
// a rule where the body cannot be read before deciding, is a mistake.
func compileGraphQL(p *problems, path string, dc DomainConfig, d *Domain) {
	var priced []*Rule
	for _, r := range d.Rules {
		if r.CostFrom == CostFromGraphQL {
			priced = append(priced, r)
		}
	}
	gc := dc.GraphQL
	if len(priced) == 0 {
		if gc != nil {
			p.add(path+".graphql", "prices requests for rules with cost_from: graphql, and the domain has none")
		}
		return
	}
	if dc.RequestBuffering != nil && !*dc.RequestBuffering {
		p.add(path+".request_buffering", "must not be false with a rule with cost_from: graphql (%s), which reads the body before deciding", priced[0].Name)
	}
	g := &GraphQL{Path: DefaultGraphQLPath, ObjectCost: DefaultObjectCost, MutationCost: DefaultMutationCost, DefaultPage: DefaultGraphQLPage}
	if gc == nil {
		gc = &GraphQLConfig{}
	}
	switch {
	case gc.Path == "":
	case gc.Path[0] != '/':
		p.add(path+".graphql.path", "must start with \"/\", got %q", gc.Path)
	case unmatchablePrefix(gc.Path) != "":
		p.add(path+".graphql.path", "%s, got %q", unmatchablePrefix(gc.Path), gc.Path)
	default:
		g.Path = gc.Path
	}
	price := func(key string, v int, min int, most int, into *int64) {
		switch {
		case v == 0 && !p.given[path+".graphql."+key]:
		case v < min || v > most:
			p.add(path+".graphql."+key, "must be between %d and %d, got %d", min, most, v)
		default:
			*into = int64(v)
		}
	}
	price("object_cost", gc.ObjectCost, 0, maxGraphQLPrice, &g.ObjectCost)
	price("mutation_cost", gc.MutationCost, 0, maxGraphQLPrice, &g.MutationCost)
	price("default_page", gc.DefaultPage, 0, maxGraphQLPageConfig, &g.DefaultPage)

	capacity, by := int64(-1), ""
	for _, r := range priced {
		if c := r.Capacity(); c >= 1 && (capacity < 0 || c < capacity) {
			capacity, by = c, r.Name
		}
	}
	g.MaxQueryCost = capacity
	switch m := gc.MaxQueryCost; {
	case m == 0 && !p.given[path+".graphql.max_query_cost"]:
	case m < 1:
		p.add(path+".graphql.max_query_cost", "must be at least 1, got %d", m)
	case capacity >= 1 && int64(m) > capacity:
		p.add(path+".graphql.max_query_cost", "must be at most the capacity of every rule with cost_from: graphql (%d, rule %s), got %d", capacity, by, m)
	default:
		g.MaxQueryCost = int64(m)
	}
	d.GraphQL = g
}

// checkCostFromChecked refuses a cost_from of rule r, at path, on a domain
// the check listener answers for: it sees neither the body nor the
// response.
func checkCostFromChecked(p *problems, path string, r *Rule) {
	switch r.CostFrom {
	case CostFromGraphQL:
		p.add(path+".cost_from", "graphql reads the request body, which the check listener never sees (set the domain's serve to proxy)")
	case CostFromOriginTime:
		p.add(path+".cost_from", "origin_time needs the response, which the check listener never sees (set the domain's serve to proxy)")
	}
}
