package rules

import (
	"strconv"
	"testing"
	"time"
)

// lookupTable compiles hosts (one []string per domain, named by names) into
// a Table; it fails the test on a compile error.
func lookupTable(t testing.TB, names []string, hosts [][]string) *Table {
	t.Helper()
	cfg := Config{Origin: "http://origin.internal"}
	for i := range names {
		cfg.Domains = append(cfg.Domains, DomainConfig{Name: names[i], Hosts: hosts[i]})
	}
	tab, err := Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return tab
}

func TestLookup(t *testing.T) {
	withCatchAll := lookupTable(t,
		[]string{"exact", "wild", "deep", "literal", "any"},
		[][]string{
			{"example.com", "www.example.com"},
			{"*.example.com"},
			{"*.api.example.com"},
			{"[2001:db8::1]", "192.0.2.1"},
			{"*"},
		})
	without := lookupTable(t,
		[]string{"wild", "exact"},
		[][]string{{"*.example.com"}, {"example.org"}})

	tests := []struct {
		name   string
		table  *Table
		host   string
		want   string // domain name; "" for no match
		wantOK bool
	}{
		{"exact", withCatchAll, "example.com", "exact", true},
		{"exact after normalising", withCatchAll, "EXAMPLE.com.:443", "exact", true},
		{"exact beats wildcard", withCatchAll, "www.example.com", "exact", true},
		{"wildcard one level", withCatchAll, "a.example.com", "wild", true},
		{"wildcard two levels", withCatchAll, "a.b.example.com", "wild", true},
		{"wildcard excludes its suffix itself", withCatchAll, "api.example.com", "wild", true},
		{"longest wildcard wins", withCatchAll, "x.api.example.com", "deep", true},
		{"longest wildcard wins deeper", withCatchAll, "a.b.api.example.com", "deep", true},
		{"wildcard is not a substring match", withCatchAll, "notexample.com", "any", true},
		{"ipv6 literal with port", withCatchAll, "[2001:DB8::1]:8443", "literal", true},
		{"ipv6 literal not canonical", withCatchAll, "[2001:db8:0::1]", "literal", true},
		{"ipv4 literal with port", withCatchAll, "192.0.2.1:80", "literal", true},
		{"catch-all", withCatchAll, "other.org", "any", true},
		{"catch-all takes unknown ipv6", withCatchAll, "[::1]", "any", true},
		{"invalid host despite catch-all", withCatchAll, "a/b", "", false},
		{"empty host despite catch-all", withCatchAll, "", "", false},
		{"double port despite catch-all", withCatchAll, "1.2.3.4:9000:80", "", false},
		{"no catch-all: unknown host", without, "other.net", "", false},
		{"no catch-all: wildcard suffix itself", without, "example.com", "", false},
		{"no catch-all: wildcard", without, "a.example.com", "wild", true},
		{"no catch-all: exact", without, "example.org", "exact", true},
		{"nil table", nil, "example.com", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := tt.table.Lookup(tt.host)
			got := ""
			if d != nil {
				got = d.Name
			}
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Lookup(%q) = %q, %v; want %q, %v", tt.host, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestLookupAllocs(t *testing.T) {
	tab := lookupTable(t, []string{"exact", "wild", "any"},
		[][]string{{"www.example.com"}, {"*.example.com"}, {"*"}})
	for _, host := range []string{"www.example.com", "a.b.example.com", "other.org", "www.example.com:443"} {
		if got := testing.AllocsPerRun(100, func() { tab.Lookup(host) }); got != 0 {
			t.Errorf("Lookup(%q) allocations = %v, want 0", host, got)
		}
	}
}

func TestTableDomainAndRule(t *testing.T) {
	tab, err := Compile(Config{
		Origin: "http://origin.internal",
		Domains: []DomainConfig{
			{Name: "api", Hosts: []string{"api.example.com"}, Rules: []RuleConfig{
				{Name: "reads", Limit: 10, Period: time.Minute},
				{Name: "writes", Limit: 1, Period: time.Minute},
			}},
			{Hosts: []string{"*.example.com"}},
		},
	})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	tests := []struct {
		name       string
		domain     string
		rule       string
		wantDomain int // index, -1 for none
		wantRule   int // index, -1 for none
	}{
		{"domain and rule", "api", "writes", 0, 1},
		{"first rule", "api", "reads", 0, 0},
		{"unknown rule", "api", "deletes", 0, -1},
		{"default domain name", "_.example.com", "reads", 1, -1},
		{"unknown domain", "www", "", -1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := tab.Domain(tt.domain)
			if tt.wantDomain < 0 {
				if ok {
					t.Fatalf("Domain(%q) = %q, true; want false", tt.domain, d.Name)
				}
				return
			}
			if !ok || d != tab.Domains[tt.wantDomain] {
				t.Fatalf("Domain(%q) = %v, %v; want Domains[%d]", tt.domain, d, ok, tt.wantDomain)
			}
			r, ok := d.Rule(tt.rule)
			if tt.wantRule < 0 {
				if ok {
					t.Fatalf("Rule(%q) = %q, true; want false", tt.rule, r.Name)
				}
				return
			}
			if !ok || r != d.Rules[tt.wantRule] || r.Index != tt.wantRule {
				t.Fatalf("Rule(%q) = %v, %v; want Rules[%d]", tt.rule, r, ok, tt.wantRule)
			}
		})
	}
}

func TestRuleMatches(t *testing.T) {
	all := &Rule{}
	api := &Rule{PathPrefix: "/api/"}
	writes := &Rule{PathPrefix: "/api/", Methods: []string{"POST", "PUT"}}
	gets := &Rule{Methods: []string{"GET"}}
	tests := []struct {
		name   string
		rule   *Rule
		method string
		path   string
		want   bool
	}{
		{"no match config", all, "GET", "/", true},
		{"no match config, empty path", all, "GET", "", true},
		{"prefix", api, "GET", "/api/users", true},
		{"prefix exactly", api, "GET", "/api/", true},
		{"prefix is not a segment match", api, "GET", "/api", false},
		{"prefix is case-sensitive", api, "GET", "/API/users", false},
		{"other path", api, "GET", "/static/x", false},
		{"method and prefix", writes, "PUT", "/api/x", true},
		{"method but not prefix", writes, "POST", "/x", false},
		{"prefix but not method", writes, "GET", "/api/x", false},
		{"methods are case-sensitive", gets, "get", "/", false},
		{"method only", gets, "GET", "/anything", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.Matches(tt.method, tt.path); got != tt.want {
				t.Errorf("Matches(%q, %q) = %v, want %v", tt.method, tt.path, got, tt.want)
			}
		})
	}
	if got := testing.AllocsPerRun(100, func() { writes.Matches("PUT", "/api/x") }); got != 0 {
		t.Errorf("Matches allocations = %v, want 0", got)
	}
}

func TestEnumStrings(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"ActionBlock", ActionBlock.String(), "block"},
		{"ActionLog", ActionLog.String(), "log"},
		{"Action out of range", Action(9).String(), "Action(9)"},
		{"HeadersBlocked", HeadersBlocked.String(), "blocked"},
		{"HeadersAlways", HeadersAlways.String(), "always"},
		{"HeadersNone", HeadersNone.String(), "none"},
		{"HeaderMode out of range", HeaderMode(7).String(), "HeaderMode(7)"},
		{"KeyIP", KeyIP.String(), "ip"},
		{"KeyHeader", KeyHeader.String(), "header"},
		{"KeyPath", KeyPath.String(), "path"},
		{"KeyHost", KeyHost.String(), "host"},
		{"KeyKind out of range", KeyKind(8).String(), "KeyKind(8)"},
		{"KeyPart header", KeyPart{Kind: KeyHeader, Header: "X-Api-Key"}.String(), "header:X-Api-Key"},
		{"KeyPart ip", KeyPart{Kind: KeyIP}.String(), "ip"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	// 1000 exact hosts and 100 wildcards, so the map sizes are realistic.
	cfg := Config{Origin: "http://origin.internal"}
	for i := range 100 {
		hosts := []string{"*.site" + strconv.Itoa(i) + ".example"}
		for j := range 10 {
			hosts = append(hosts, "h"+strconv.Itoa(j)+".site"+strconv.Itoa(i)+".example")
		}
		cfg.Domains = append(cfg.Domains, DomainConfig{Hosts: hosts})
	}
	cfg.Domains = append(cfg.Domains, DomainConfig{Hosts: []string{"*"}})
	tab, err := Compile(cfg)
	if err != nil {
		b.Fatalf("Compile: %v", err)
	}
	for _, bc := range []struct{ name, host string }{
		{"exact", "h7.site42.example"},
		{"wildcard", "a.b.site42.example"},
		{"catch-all", "www.other.org"},
		{"exact-upper-case-port", "H7.Site42.example:443"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := tab.Lookup(bc.host); !ok {
					b.Fatalf("Lookup(%q) = false", bc.host)
				}
			}
		})
	}
}

func TestWildcardNeverMatchesAddressLiteral(t *testing.T) {
	tab, err := Compile(Config{
		Origin: "http://127.0.0.1:9000",
		Domains: []DomainConfig{
			{Hosts: []string{"*.3.4"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tab.Lookup("1.2.3.4"); ok {
		t.Errorf("Lookup(1.2.3.4) matched *.3.4, want no match")
	}
	if _, ok := tab.Lookup("x.3.4"); !ok {
		t.Errorf("Lookup(x.3.4) did not match *.3.4")
	}
}
