package rules

import (
	"strings"
	"testing"
	"time"
)

// checkConfig is validConfig with a check listener and domain api served
// only through it.
func checkConfig() Config {
	c := validConfig()
	c.Origin = ""
	c.Check = &CheckConfig{Listen: "127.0.0.1:8082"}
	c.Domains[0].Serve = "check"
	c.Domains[1].Origin = "http://www.internal"
	return c
}

func TestCompileCheck(t *testing.T) {
	tests := []struct {
		name         string
		mutate       func(c *Config)
		deny         int
		api, www     [2]bool // Proxied, Checked
		apiHasOrigin bool
		wwwHasOrigin bool
	}{
		{"check-only domain needs no origin", func(c *Config) {}, 429, [2]bool{false, true}, [2]bool{true, true}, false, true},
		{"deny_status set", func(c *Config) { c.Check.DenyStatus = 403 }, 403, [2]bool{false, true}, [2]bool{true, true}, false, true},
		{"serve proxy", func(c *Config) { c.Domains[1].Serve = "proxy" }, 429, [2]bool{false, true}, [2]bool{true, false}, false, true},
		{"check-only does not inherit the top-level origin", func(c *Config) { c.Origin = "http://o" }, 429, [2]bool{false, true}, [2]bool{true, true}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := checkConfig()
			tt.mutate(&c)
			tab, err := Compile(c)
			if err != nil {
				t.Fatal(err)
			}
			if tab.Check == nil || tab.Check.DenyStatus != tt.deny || tab.Check.Listen != "127.0.0.1:8082" {
				t.Errorf("Check = %+v, want listen 127.0.0.1:8082, deny_status %d", tab.Check, tt.deny)
			}
			for i, want := range [][2]bool{tt.api, tt.www} {
				d := tab.Domains[i]
				if got := [2]bool{d.Proxied, d.Checked}; got != want {
					t.Errorf("domain %s: Proxied, Checked = %v, want %v", d.Name, got, want)
				}
			}
			if got := tab.Domains[0].Origin != nil; got != tt.apiHasOrigin {
				t.Errorf("api has origin %v, want %v", got, tt.apiHasOrigin)
			}
			if got := tab.Domains[1].Origin != nil; got != tt.wwwHasOrigin {
				t.Errorf("www has origin %v, want %v", got, tt.wwwHasOrigin)
			}
		})
	}
}

func TestCompileWithoutCheckServesProxy(t *testing.T) {
	tab, err := Compile(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range tab.Domains {
		if !d.Proxied || d.Checked {
			t.Errorf("domain %s: Proxied %v, Checked %v; want true, false", d.Name, d.Proxied, d.Checked)
		}
	}
	if tab.Check != nil {
		t.Errorf("Check = %+v, want nil", tab.Check)
	}
}

func TestCompileCheckErrors(t *testing.T) {
	rule := func(c *Config) *RuleConfig { return &c.Domains[0].Rules[0] }
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		{"listen missing", func(c *Config) { c.Check.Listen = "" },
			`check.listen: required with the check section (host:port)`},
		{"listen without port", func(c *Config) { c.Check.Listen = "8082" },
			`check.listen: must be host:port, got "8082"`},
		{"listen equals listen", func(c *Config) { c.Listen = ":8082" },
			`check.listen: must differ from listen (":8082"), got "127.0.0.1:8082"`},
		{"listen equals admin_listen", func(c *Config) { c.AdminListen = "127.0.0.1:8082" },
			`check.listen: must differ from admin_listen ("127.0.0.1:8082"), got "127.0.0.1:8082"`},
		{"deny_status 2xx", func(c *Config) { c.Check.DenyStatus = 200 },
			`check.deny_status: must be between 400 and 599, got 200`},
		{"deny_status 600", func(c *Config) { c.Check.DenyStatus = 600 },
			`check.deny_status: must be between 400 and 599, got 600`},
		{"serve unknown", func(c *Config) { c.Domains[1].Serve = "all" },
			`domains[1] (www).serve: must be proxy, check or both, got "all"`},
		{"serve check without the section", func(c *Config) { c.Check = nil; c.Domains[1].Serve = "proxy" },
			`domains[0] (api).serve: needs the check section (check.listen), got "check"`},
		{"both still needs an origin", func(c *Config) { c.Domains[1].Origin = "" },
			`domains[1] (www): no upstream: set origin, origins or respond here, or origin or origins at the top level (or serve check, to answer only the check listener)`},
		{"check-only with origin", func(c *Config) { c.Domains[0].Origin = "http://o" },
			`domains[0] (api).origin: does not apply to a domain with serve check, which is never proxied`},
		{"check-only with respond", func(c *Config) { c.Domains[0].Respond = &ResponseConfig{} },
			`domains[0] (api).respond: does not apply to a domain with serve check, which is never proxied`},
		{"check-only with max_request_body", func(c *Config) { c.Domains[0].MaxRequestBody = 1024 },
			`domains[0] (api).max_request_body: does not apply to a domain with serve check, which is never proxied`},
		{"check-only with block_response", func(c *Config) { rule(c).BlockResponse = &ResponseConfig{Status: 403} },
			`domains[0] (api).rules[0] (all).block_response: does not apply to a domain with serve check, whose refusals answer with check.deny_status`},
		{"count_status", func(c *Config) { rule(c).CountStatus = []int{401} },
			`domains[0] (api).rules[0] (all).count_status: needs the response, which the check listener never sees (set the domain's serve to proxy)`},
		{"response_cost_header", func(c *Config) { rule(c).ResponseCostHeader = "X-Cost" },
			`domains[0] (api).rules[0] (all).response_cost_header: needs the response, which the check listener never sees (set the domain's serve to proxy)`},
		{"concurrency", func(c *Config) { *rule(c) = RuleConfig{Name: "c", Limit: 2, Algorithm: "concurrency"} },
			`domains[0] (api).rules[0] (c).algorithm: concurrency holds a slot until the response, which the check listener never sees (set the domain's serve to proxy), got concurrency`},
		{"queue", func(c *Config) {
			*rule(c) = RuleConfig{Name: "q", Limit: 2, Period: time.Second, Algorithm: "leaky_bucket", MaxDelay: time.Second}
		}, `domains[0] (api).rules[0] (q).max_delay: a queue holds the request, which the check listener does not (set the domain's serve to proxy), got 1s`},
		{"shed on a domain served both ways", func(c *Config) { c.Domains[1].Shed = &ShedConfig{MaxInFlight: 10} },
			`domains[1] (www).shed: sheds by the requests in flight to the origin, which the check listener never sees (set serve to proxy)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := checkConfig()
			tt.mutate(&cfg)
			tab, err := Compile(cfg)
			if err == nil {
				t.Fatalf("Compile = %v, nil; want error %q", tab, tt.want)
			}
			got := errorLines(t, err)
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("got errors:\n%s\nwant exactly:\n%s", strings.Join(got, "\n"), tt.want)
			}
		})
	}
}

// TestCompileCheckTokenRedacted: a token is a secret no message shows.
func TestCompileCheckTokenRedacted(t *testing.T) {
	if !IsSecret("check.token") {
		t.Error(`IsSecret("check.token") = false, want true`)
	}
}
