package rules

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// This file compiles a domain's routes: the requests each selects by
// path and method, and the group of servers it sends them to, compiled
// as the domain's own group is (upstream.go). The proxy chooses a
// request's route once, by Domain.Route (docs/origins.md, "Routes").

// MaxRoutes is the most routes a domain may have: each request is
// compared with them in turn.
const MaxRoutes = 64

// Route is a compiled [RouteConfig]. Callers must not modify it.
type Route struct {
	Index      int      // position in Domain.Routes
	Name       string   // unique within its domain
	PathPrefix string   // "" matches any path
	Methods    []string // nil matches any method; upper-case
	Upstream   *Upstream
}

// Matches reports whether the route takes a request with method and
// path, path cleaned as rules match it (CleanPath): a case-sensitive
// byte prefix, and the method exactly (RFC 9110, 9.1: methods are
// case-sensitive). It does not allocate.
func (r *Route) Matches(method, path string) bool {
	return matches(r.PathPrefix, r.Methods, method, path)
}

// All reports whether the route matches every request.
func (r *Route) All() bool {
	return (r.PathPrefix == "" || r.PathPrefix == "/") && r.Methods == nil
}

// covers reports whether every request r2 matches is one r matches: r2
// is never chosen after r.
func (r *Route) covers(r2 *Route) bool {
	if !strings.HasPrefix(r2.PathPrefix, r.PathPrefix) && !(r.PathPrefix == "/" && r2.PathPrefix == "") {
		return false
	}
	if r.Methods == nil {
		return true
	}
	return r2.Methods != nil && !slices.ContainsFunc(r2.Methods, func(m string) bool { return !slices.Contains(r.Methods, m) })
}

// Route returns the route of the first of d's routes that matches a
// request with method and path (cleaned, as for Route.Matches), or nil
// for one that goes to the domain's own Upstream.
func (d *Domain) Route(method, path string) *Route {
	for _, r := range d.Routes {
		if r.Matches(method, path) {
			return r
		}
	}
	return nil
}

// routeSource is where each key of a route's group comes from: the
// route's own section, else the domain's (uc, as upstreamSource made it,
// with at saying where each key was written). It walks UpstreamConfig's
// fields, so that a group key added there is a route's as it is a
// domain's; but origins, which a route must set.
func routeSource(rc RouteConfig, uc UpstreamConfig, at map[string]string, path string) (UpstreamConfig, map[string]string) {
	u := rc.UpstreamConfig
	rat := make(map[string]string, len(at))
	for k, v := range at {
		rat[k] = v
	}
	own, dom := reflect.ValueOf(&u).Elem(), reflect.ValueOf(uc)
	for i := range own.NumField() {
		key, _, _ := strings.Cut(own.Type().Field(i).Tag.Get("mapstructure"), ",")
		switch f := own.Field(i); {
		case key == "origins" || !f.IsZero():
			rat[key] = path
		default:
			f.Set(dom.Field(i))
		}
	}
	return u, rat
}

// compileRoutes compiles the routes of domain d (at path), whose own
// group's keys are uc (at says where each was written), and returns the
// index of the first route that matches every request, or -1.
func compileRoutes(p *problems, d *Domain, path string, dc DomainConfig, uc UpstreamConfig, at map[string]string) int {
	if len(dc.Routes) > MaxRoutes {
		p.add(path+".routes", "must have at most %d routes, got %d", MaxRoutes, len(dc.Routes))
	}
	all := -1
	names := make(map[string]int)
	for j, rc := range dc.Routes {
		rpath := fmt.Sprintf("%s.routes[%d]", path, j)
		r := &Route{Index: j, Name: rc.Name}
		if rc.Name == "" {
			p.add(rpath+".name", "must be set: it names the route in metrics and the admin API")
		} else if checkLabel(p, rpath+".name", rc.Name) {
			if prev, dup := names[rc.Name]; dup {
				p.add(rpath+".name", "%q is used by routes[%d]", rc.Name, prev)
			}
			names[rc.Name] = j
		}
		if m := rc.Match; m != nil {
			r.PathPrefix = compilePathPrefix(p, rpath+".match.path_prefix", m.PathPrefix)
			r.Methods = compileMethods(p, rpath+".match.methods", m.Methods)
		}
		for k, prev := range d.Routes {
			if prev.covers(r) {
				p.add(rpath+".match", "is never chosen: routes[%d] (%s) before it matches every request it matches (first match wins)", k, prev.Name)
				break
			}
		}
		ruc, rat := routeSource(rc, uc, at, rpath)
		if len(rc.Origins) == 0 {
			p.add(rpath+".origins", "must be set: a route sends its requests to servers of its own")
		} else if servers := compileOrigins(p, rpath+".origins", rc.Origins); len(servers) == len(rc.Origins) {
			r.Upstream = compileUpstream(p, ruc, rat, servers, firstExactHost(d.Hosts))
		}
		if r.All() && all < 0 {
			all = j
		}
		d.Routes = append(d.Routes, r)
	}
	return all
}
