package main

import (
	"strings"
	"testing"

	"github.com/edgerate/edge/rules"
)

// routeOf names the route of d that takes method and path ("" the
// domain's own origins).
func routeOf(d *rules.Domain, method, path string) string {
	if r := d.Route(method, path); r != nil {
		return r.Name
	}
	return ""
}

// TestDocsRoutesExample: the example of docs/origins.md's "Routes" loads,
// and sends the requests its text names where it says.
func TestDocsRoutesExample(t *testing.T) {
	section := docSection(t, "docs/origins.md", "Routes")
	example := docYAML(t, "docs/origins.md", "Routes", section)
	cfg := "listen: \":8080\"\ndomains:\n  - hosts: [shop.example.com]\n" + indent(example, "    ")
	table, err := parseConfig([]byte(cfg))
	if err != nil {
		t.Fatalf("docs/origins.md's Routes example: %v\n%s", err, cfg)
	}
	d := table.Domains[0]
	for _, tc := range []struct{ method, path, want string }{
		{"POST", "/api/orders", "api-writes"},
		{"GET", "/api/orders", "api"},
		{"GET", "/static/app.css", "static"},
		{"GET", "/", ""},
	} {
		if got := routeOf(d, tc.method, tc.path); got != tc.want {
			t.Errorf("%s %s: route %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
	if h := d.Routes[2].Upstream.Health; h == nil || h.Path != "/healthz" {
		t.Errorf("the static route's health is %+v, want the domain's", h)
	}
	for _, s := range []string{"`POST /api/orders` to `api-writes`", "a `GET /api/orders` to `api`"} {
		if !strings.Contains(section, s) {
			t.Errorf("docs/origins.md's Routes no longer says %s, which this test checks", s)
		}
	}
}

// TestRoutesConfigExample checks what configs/routes.yaml's comments say.
func TestRoutesConfigExample(t *testing.T) {
	table, _, err := loadConfig("../../configs/routes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	shop, media := table.Domains[0], table.Domains[1]
	for _, tc := range []struct {
		d                  *rules.Domain
		method, path, want string
	}{
		{shop, "POST", "/api/orders", "api-writes"},
		{shop, "DELETE", "/api/orders/1", "api-writes"},
		{shop, "GET", "/api/orders", "api"},
		{shop, "GET", "/static/logo.png", "static"},
		{shop, "GET", "/cart", ""},
		{media, "PUT", "/upload/a.mp4", "uploads"},
		{media, "GET", "/upload/a.mp4", "downloads"},
		{media, "GET", "/", "downloads"},
	} {
		if got := routeOf(tc.d, tc.method, tc.path); got != tc.want {
			t.Errorf("%s: %s %s: route %q, want %q", tc.d.Name, tc.method, tc.path, got, tc.want)
		}
	}
	for _, r := range shop.Routes[:2] {
		if r.Upstream.Health == nil || r.Upstream.Health.Path != "/healthz" {
			t.Errorf("route %s: health %+v, want the domain's /healthz", r.Name, r.Upstream.Health)
		}
	}
	if h := shop.Routes[2].Upstream.Health; h == nil || h.Path != "/ping" {
		t.Errorf("route static: health %+v, want its own /ping", h)
	}
	if media.Upstream != nil {
		t.Errorf("media has origins of its own: %+v", media.Upstream)
	}
}
