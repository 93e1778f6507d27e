package rules

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// validConfig returns a fresh, valid config for tests to break.
func validConfig() Config {
	return Config{
		Origin: "http://origin.internal",
		Domains: []DomainConfig{
			{Name: "api", Hosts: []string{"api.example.com"}, Rules: []RuleConfig{
				{Name: "all", Limit: 100, Period: time.Minute},
				{Name: "writes", Limit: 10, Period: time.Minute},
			}},
			{Name: "www", Hosts: []string{"www.example.com"}},
		},
	}
}

// errorLines splits a Compile error into its "path: message" lines, checking
// that each joined error is a *FieldError.
// wantErrors compiles cfg and checks that it fails with exactly the
// errors want, in order.
func wantErrors(t *testing.T, cfg Config, want []string) {
	t.Helper()
	tab, err := Compile(cfg)
	if err == nil {
		t.Fatalf("Compile = %v, nil; want errors %q", tab, want)
	}
	if got := errorLines(t, err); !reflect.DeepEqual(got, want) {
		t.Errorf("got errors:\n%s\nwant exactly:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func errorLines(t *testing.T, err error) []string {
	t.Helper()
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Compile error %T does not come from errors.Join: %v", err, err)
	}
	var lines []string
	for _, e := range joined.Unwrap() {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Errorf("joined error %T is not a *FieldError: %v", e, e)
			continue
		}
		lines = append(lines, fe.Error())
	}
	return lines
}

func TestCompileErrors(t *testing.T) {
	rule := func(c *Config) *RuleConfig { return &c.Domains[0].Rules[0] }
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		// Listeners.
		{"listen without port", func(c *Config) { c.Listen = "8080" },
			`listen: must be host:port, got "8080"`},
		{"listen named port", func(c *Config) { c.Listen = ":http" },
			`listen: port must be a number from 0 to 65535, got ":http"`},
		{"listen port out of range", func(c *Config) { c.Listen = ":70000" },
			`listen: port must be a number from 0 to 65535, got ":70000"`},
		{"admin_listen without port", func(c *Config) { c.AdminListen = "localhost" },
			`admin_listen: must be host:port, got "localhost"`},
		{"listeners equal", func(c *Config) { c.Listen, c.AdminListen = ":9000", ":9000" },
			`admin_listen: must differ from listen (":9000"), got ":9000"`},
		{"listeners overlap", func(c *Config) { c.Listen, c.AdminListen = ":8077", "127.0.0.1:8077" },
			`admin_listen: must differ from listen (":8077"), got "127.0.0.1:8077"`},
		{"listeners overlap on ipv6 any", func(c *Config) { c.Listen, c.AdminListen = "127.0.0.1:80", "[::]:80" },
			`admin_listen: must differ from listen ("127.0.0.1:80"), got "[::]:80"`},

		// An origin that is one of edge's own listeners.
		{"origin is the public listener", func(c *Config) { c.Listen, c.Origin = ":8080", "http://127.0.0.1:8080" },
			`origin: is edge's own listen (":8080"): every request would come back to edge, got "http://127.0.0.1:8080"`},
		{"origin is localhost on the listener", func(c *Config) { c.Listen, c.Origin = "127.0.0.1:8080", "http://localhost:8080/" },
			`origin: is edge's own listen ("127.0.0.1:8080"): every request would come back to edge, got "http://localhost:8080/"`},
		{"domain origin is the admin listener", func(c *Config) { c.Domains[1].Origin = "http://127.0.0.1:8077" },
			`domains[1] (www).origin: is edge's own admin_listen ("127.0.0.1:8077"): every request would come back to edge, got "http://127.0.0.1:8077"`},
		{"origin on the listener's own host", func(c *Config) { c.Listen, c.Origin = "edge.internal:80", "http://edge.internal" },
			`origin: is edge's own listen ("edge.internal:80"): every request would come back to edge, got "http://edge.internal"`},
		{"h2c origin is the rls listener", func(c *Config) {
			c.RLS = RLSConfig{Listen: "127.0.0.1:8081", Config: []string{"r.yaml"}}
			c.Domains[1].Origin = "h2c://127.0.0.1:8081"
		}, `domains[1] (www).origin: is edge's own rls.listen ("127.0.0.1:8081"): every request would come back to edge, got "h2c://127.0.0.1:8081"`},
		{"h2c origin without a port is port 80", func(c *Config) { c.Listen, c.Origin = "edge.internal:80", "h2c://edge.internal" },
			`origin: is edge's own listen ("edge.internal:80"): every request would come back to edge, got "h2c://edge.internal"`},

		// admin_hosts.
		{"admin_hosts wildcard", func(c *Config) { c.AdminHosts = []string{"*.internal"} },
			`admin_hosts[0]: must be a host name, not a wildcard, got "*.internal"`},
		{"admin_hosts catch-all", func(c *Config) { c.AdminHosts = []string{"edge.internal", "*"} },
			`admin_hosts[1]: must be a host name, not a wildcard, got "*"`},
		{"admin_hosts port", func(c *Config) { c.AdminHosts = []string{"edge.internal:8077"} },
			`admin_hosts[0]: must not include a port, got "edge.internal:8077"`},
		{"admin_hosts bad name", func(c *Config) { c.AdminHosts = []string{"edge_admin"} },
			`admin_hosts[0]: must contain only letters, digits, '-' and '.', got "edge_admin"`},
		{"admin_hosts empty", func(c *Config) { c.AdminHosts = []string{""} },
			`admin_hosts[0]: must not be empty, got ""`},
		{"admin_hosts duplicate", func(c *Config) { c.AdminHosts = []string{"Edge.internal", "edge.internal."} },
			`admin_hosts[1]: "edge.internal." duplicates admin_hosts[0]`},

		// Top-level scalars.
		{"pop charset", func(c *Config) { c.Pop = "eu west" },
			`pop: must contain only [A-Za-z0-9_.-], got "eu west"`},
		{"pop too long", func(c *Config) { c.Pop = strings.Repeat("p", 65) },
			`pop: must be at most 64 bytes, got "` + strings.Repeat("p", 65) + `" (65 bytes)`},
		{"origin scheme", func(c *Config) { c.Origin = "ftp://x" },
			`origin: must be an absolute http, https or h2c URL, got "ftp://x"`},
		{"origin relative", func(c *Config) { c.Origin = "/backend" },
			`origin: must be an absolute http, https or h2c URL, got "/backend"`},
		{"origin without host", func(c *Config) { c.Origin = "http:///x" },
			`origin: must be an absolute http, https or h2c URL, got "http:///x"`},
		{"origin unparsable", func(c *Config) { c.Origin = "http://a b" },
			`origin: must be an absolute http, https or h2c URL, got "http://a b"`},
		{"origin user info is redacted", func(c *Config) { c.Origin = "http://u:secret@origin" },
			`origin: must not contain user info, got "http://u:xxxxx@origin"`},
		{"origin query", func(c *Config) { c.Origin = "http://origin/?a=1" },
			`origin: must not contain a query, got "http://origin/?a=1"`},
		{"origin empty query", func(c *Config) { c.Origin = "http://origin/?" },
			`origin: must not contain a query, got "http://origin/?"`},
		{"origin fragment", func(c *Config) { c.Origin = "https://origin/app#x" },
			`origin: must not contain a fragment, got "https://origin/app#x"`},
		{"origin empty fragment", func(c *Config) { c.Origin = "https://origin/#" },
			`origin: must not contain a fragment, got "https://origin/#"`},
		{"max_keys negative", func(c *Config) { c.MaxKeys = -1 },
			`max_keys: must be between 1 and 2147483647, got -1`},
		{"max_keys too large", func(c *Config) { c.MaxKeys = 1 << 40 },
			`max_keys: must be between 1 and 2147483647, got 1099511627776`},
		{"trusted proxy junk", func(c *Config) { c.ClientIP.TrustedProxies = []string{"10.0.0.0/8", "proxy.internal"} },
			`client_ip.trusted_proxies[1]: must be an IP address or CIDR prefix, got "proxy.internal"`},
		{"trusted proxy bad prefix", func(c *Config) { c.ClientIP.TrustedProxies = []string{"10.0.0.0/33"} },
			`client_ip.trusted_proxies[0]: must be an IP address or CIDR prefix, got "10.0.0.0/33"`},
		{"trusted proxy zone", func(c *Config) { c.ClientIP.TrustedProxies = []string{"fe80::1%eth0"} },
			`client_ip.trusted_proxies[0]: must not have a zone, got "fe80::1%eth0"`},
		{"ipv6_prefix too short", func(c *Config) { c.ClientIP.IPv6Prefix = 16 },
			`client_ip.ipv6_prefix: must be between 32 and 128, got 16`},
		{"ipv6_prefix too long", func(c *Config) { c.ClientIP.IPv6Prefix = 129 },
			`client_ip.ipv6_prefix: must be between 32 and 128, got 129`},
		{"timeout negative", func(c *Config) { c.Timeouts.ReadHeader = -time.Second },
			`timeouts.read_header: must be between 1ms and 1h, got -1s`},
		{"read_header timeout under 1ms", func(c *Config) { c.Timeouts.ReadHeader = 10 * time.Nanosecond },
			`timeouts.read_header: must be between 1ms and 1h, got 10ns`},
		{"read_header timeout over 1h", func(c *Config) { c.Timeouts.ReadHeader = 61 * time.Minute },
			`timeouts.read_header: must be between 1ms and 1h, got 1h1m`},
		{"read timeout over 24h", func(c *Config) { c.Timeouts.Read = 25 * time.Hour },
			`timeouts.read: must be between 1ms and 24h, got 25h`},
		{"write timeout negative", func(c *Config) { c.Timeouts.Write = -5 * time.Millisecond },
			`timeouts.write: must be 0 (off) or between 1ms and 24h, got -5ms`},
		{"write timeout under 1ms", func(c *Config) { c.Timeouts.Write = 999 * time.Microsecond },
			`timeouts.write: must be 0 (off) or between 1ms and 24h, got 999µs`},
		{"idle timeout over 24h", func(c *Config) { c.Timeouts.Idle = 48 * time.Hour },
			`timeouts.idle: must be between 1ms and 24h, got 48h`},
		{"upstream timeout negative", func(c *Config) { c.Timeouts.Upstream = -time.Minute },
			`timeouts.upstream: must be between 1ms and 24h, got -1m`},
		{"upstream timeout of 30ns", func(c *Config) { c.Timeouts.Upstream = 30 },
			`timeouts.upstream: must be between 1ms and 24h, got 30ns`},
		{"shutdown timeout over 1h", func(c *Config) { c.Timeouts.Shutdown = 2 * time.Hour },
			`timeouts.shutdown: must be between 1ms and 1h, got 2h`},
		{"drain_delay under 1ms", func(c *Config) { c.Timeouts.DrainDelay = time.Microsecond },
			`timeouts.drain_delay: must be 0 (off) or between 1ms and 1h, got 1µs`},
		{"max_header_bytes too small", func(c *Config) { c.MaxHeaderBytes = 100 },
			`max_header_bytes: must be between 1024 and 1048576, got 100`},
		{"max_header_bytes too large", func(c *Config) { c.MaxHeaderBytes = 2 << 20 },
			`max_header_bytes: must be between 1024 and 1048576, got 2097152`},
		{"max_connections negative", func(c *Config) { c.MaxConnections = -1 },
			`max_connections: must be between 1 and 1048576, got -1`},
		{"max_connections too large", func(c *Config) { c.MaxConnections = 1<<20 + 1 },
			`max_connections: must be between 1 and 1048576, got 1048577`},
		{"log level", func(c *Config) { c.Log.Level = "verbose" },
			`log.level: must be debug, info, warn or error, got "verbose"`},
		{"log format", func(c *Config) { c.Log.Format = "xml" },
			`log.format: must be text or json, got "xml"`},

		// Domains and hosts.
		{"no domains", func(c *Config) { c.Domains = nil },
			`domains: required`},
		{"empty domains", func(c *Config) { c.Domains, c.Given = nil, map[string]bool{"domains": true} },
			`domains: must list at least one domain`},
		{"no hosts", func(c *Config) { c.Domains[1].Hosts = nil },
			`domains[1] (www).hosts: required`},
		{"empty hosts", func(c *Config) {
			c.Domains[1].Hosts, c.Given = nil, map[string]bool{"domains[1].hosts": true}
		}, `domains[1] (www).hosts: must list at least one host`},
		{"empty host", func(c *Config) { c.Domains[1].Hosts = []string{"a.example.com", "."} },
			`domains[1] (www).hosts[1]: must not be empty, got "."`},
		{"host with port", func(c *Config) { c.Domains[1].Hosts = []string{"www.example.com:443"} },
			`domains[1] (www).hosts[0]: must not include a port, got "www.example.com:443"`},
		{"host written as a URL", func(c *Config) { c.Domains[1].Hosts = []string{"https://b.test"} },
			`domains[1] (www).hosts[0]: must be a host name, not a URL: write "b.test", got "https://b.test"`},
		{"host written as a URL with a path", func(c *Config) { c.Domains[1].Hosts = []string{"http://B.test:8080/x"} },
			`domains[1] (www).hosts[0]: must be a host name, not a URL: write "b.test", got "http://B.test:8080/x"`},
		{"admin host written as a URL", func(c *Config) { c.AdminHosts = []string{"https://edge.internal"} },
			`admin_hosts[0]: must be a host name, not a URL: write "edge.internal", got "https://edge.internal"`},
		{"wildcard in the middle", func(c *Config) { c.Domains[1].Hosts = []string{"a.*.example.com"} },
			`domains[1] (www).hosts[0]: must be "*" or start with "*." to be a wildcard, got "a.*.example.com"`},
		{"wildcard without dot", func(c *Config) { c.Domains[1].Hosts = []string{"*example.com"} },
			`domains[1] (www).hosts[0]: must be "*" or start with "*." to be a wildcard, got "*example.com"`},
		{"double wildcard", func(c *Config) { c.Domains[1].Hosts = []string{"*.*.example.com"} },
			`domains[1] (www).hosts[0]: must be "*" or start with "*." to be a wildcard, got "*.*.example.com"`},
		{"wildcard bad suffix", func(c *Config) { c.Domains[1].Hosts = []string{"*.exa_mple.com"} },
			`domains[1] (www).hosts[0]: must contain only letters, digits, '-' and '.', got "*.exa_mple.com"`},
		{"host charset", func(c *Config) { c.Domains[1].Hosts = []string{"www_1.example.com"} },
			`domains[1] (www).hosts[0]: must contain only letters, digits, '-' and '.', got "www_1.example.com"`},
		{"host empty label", func(c *Config) { c.Domains[1].Hosts = []string{"www..example.com"} },
			`domains[1] (www).hosts[0]: must not have an empty label, got "www..example.com"`},
		{"host label too long", func(c *Config) { c.Domains[1].Hosts = []string{strings.Repeat("a", 64) + ".com"} },
			`domains[1] (www).hosts[0]: must not have a label longer than 63 bytes, got "` + strings.Repeat("a", 64) + `.com"`},
		{"host too long", func(c *Config) { c.Domains[1].Hosts = []string{strings.Repeat("a.", 127) + "a"} },
			`domains[1] (www).hosts[0]: must be at most 253 bytes, got 255 bytes: "` + strings.Repeat("a.", 127) + `a"`},
		{"host of 253 bytes and a trailing dot is fine, but a port is not", func(c *Config) {
			c.Domains[1].Hosts = []string{strings.Repeat("a.", 127), "a.example.com:1"}
		}, `domains[1] (www).hosts[1]: must not include a port, got "a.example.com:1"`},
		{"host not ASCII", func(c *Config) { c.Domains[1].Hosts = []string{"bücher.example"} },
			`domains[1] (www).hosts[0]: must be ASCII (write an internationalised name in its xn-- form), got "bücher.example"`},
		{"ipv6 without brackets", func(c *Config) { c.Domains[1].Hosts = []string{"2001:db8::1"} },
			`domains[1] (www).hosts[0]: must write an IPv6 address in brackets, like "[::1]", got "2001:db8::1"`},
		{"ipv6 with port", func(c *Config) { c.Domains[1].Hosts = []string{"[::1]:80"} },
			`domains[1] (www).hosts[0]: must not include a port, got "[::1]:80"`},
		{"ipv6 unclosed", func(c *Config) { c.Domains[1].Hosts = []string{"[::1"} },
			`domains[1] (www).hosts[0]: must close its IPv6 literal with ']', got "[::1"`},
		{"bracketed ipv4", func(c *Config) { c.Domains[1].Hosts = []string{"[192.0.2.1]"} },
			`domains[1] (www).hosts[0]: must hold an IPv6 address without a zone inside brackets, got "[192.0.2.1]"`},
		{"host claimed by another domain", func(c *Config) { c.Domains[1].Hosts = []string{"API.example.com."} },
			`domains[1] (www).hosts[0]: "api.example.com" is already claimed by domains[0] (api)`},
		{"host listed twice in a domain", func(c *Config) { c.Domains[1].Hosts = []string{"www.example.com", "WWW.example.com"} },
			`domains[1] (www).hosts[1]: "www.example.com" is already claimed by domains[1] (www).hosts[0]`},
		{"two catch-alls", func(c *Config) {
			c.Domains[0].Hosts = append(c.Domains[0].Hosts, "*")
			c.Domains[1].Hosts = []string{"*"}
		}, `domains[1] (www).hosts[0]: "*" is already claimed by domains[0] (api)`},
		{"two equal wildcards", func(c *Config) {
			c.Domains[0].Hosts = []string{"*.example.com"}
			c.Domains[1].Hosts = []string{"*.Example.com"}
		}, `domains[1] (www).hosts[0]: "*.example.com" is already claimed by domains[0] (api)`},
		{"domain name charset", func(c *Config) { c.Domains[1].Name = "w w w" },
			`domains[1].name: must contain only [A-Za-z0-9_.-], got "w w w"`},
		{"domain name reused", func(c *Config) { c.Domains[1].Name = "api" },
			`domains[1] (api).name: "api" is used by domains[0] (api)`},
		{"default domain name reused", func(c *Config) {
			c.Domains[0].Name = "_.example.net"
			c.Domains[1].Name = ""
			c.Domains[1].Hosts = []string{"*.example.net"}
		}, `domains[1] (_.example.net).name: "_.example.net", the default from hosts[0], is used by domains[0] (_.example.net); set name`},
		{"default domain name too long", func(c *Config) {
			c.Domains[1].Name = ""
			c.Domains[1].Hosts = []string{strings.Repeat("a", 60) + ".example.com"}
		}, `domains[1].name: must be set: the default from hosts[0], "` + strings.Repeat("a", 60) + `.example.com", is longer than 64 bytes`},

		// Upstreams and static responses.
		{"no upstream", func(c *Config) { c.Origin = ""; c.Domains[1].Origin = "http://www.internal" },
			`domains[0] (api): no upstream: set origin, origins or respond here, or origin or origins at the top level (or serve check, to answer only the check listener)`},
		{"origin and respond", func(c *Config) {
			c.Domains[0].Origin = "http://other"
			c.Domains[0].Respond = &ResponseConfig{Body: "hi"}
		}, `domains[0] (api): set origin or respond, not both`},
		{"domain origin", func(c *Config) { c.Domains[1].Origin = "https://" },
			`domains[1] (www).origin: must be an absolute http, https or h2c URL, got "https://"`},
		{"respond status too low", func(c *Config) { c.Domains[1].Respond = &ResponseConfig{Status: 101} },
			`domains[1] (www).respond.status: must be between 200 and 599, got 101`},
		{"respond status too high", func(c *Config) { c.Domains[1].Respond = &ResponseConfig{Status: 600} },
			`domains[1] (www).respond.status: must be between 200 and 599, got 600`},
		{"respond body too big", func(c *Config) { c.Domains[1].Respond = &ResponseConfig{Body: strings.Repeat("x", 32<<10+1)} },
			`domains[1] (www).respond.body: must be at most 32768 bytes, got 32769 bytes`},
		{"respond content type", func(c *Config) {
			c.Domains[1].Respond = &ResponseConfig{ContentType: "text/plain\r\nSet-Cookie: a=b"}
		}, `domains[1] (www).respond.content_type: must be a media type such as "text/plain; charset=utf-8", got "text/plain\r\nSet-Cookie: a=b"`},

		// Key budget.
		{"domain max_keys negative", func(c *Config) { c.Domains[1].MaxKeys = -2 },
			`domains[1] (www).max_keys: must be at least 1, got -2`},
		{"domain max_keys above total", func(c *Config) { c.MaxKeys = 100; c.Domains[1].MaxKeys = 101 },
			`domains[1] (www).max_keys: must be at most max_keys (100), got 101`},
		{"domain max_keys sum above total", func(c *Config) {
			c.MaxKeys = 100
			c.Domains[0].MaxKeys = 60
			c.Domains[1].MaxKeys = 60
		}, `max_keys: must be at least the sum of the domains' max_keys, 120, got 100`},
		{"domain share resolves to zero", func(c *Config) {
			c.MaxKeys = 100
			c.Domains[0].MaxKeys = 100
			c.Domains[1].Rules = []RuleConfig{{Name: "r", Limit: 1, Period: time.Second}}
		}, `domains[1] (www).max_keys: must resolve to at least 1, got 0 (0 keys left over / 1 domains without max_keys)`},

		{"path prefix with //", func(c *Config) {
			c.Domains[0].Rules[0].Match = &MatchConfig{PathPrefix: "/a//b"}
		}, `domains[0] (api).rules[0] (all).match.path_prefix: must not contain "//" (paths are matched with slashes merged), got "/a//b"`},
		{"path prefix with escape", func(c *Config) {
			c.Domains[0].Rules[0].Match = &MatchConfig{PathPrefix: "/a%2Fb"}
		}, `domains[0] (api).rules[0] (all).match.path_prefix: must be written decoded, without %-escapes (paths are matched decoded), got "/a%2Fb"`},
		{"path prefix with dot segment", func(c *Config) {
			c.Domains[0].Rules[0].Match = &MatchConfig{PathPrefix: "/a/../b"}
		}, `domains[0] (api).rules[0] (all).match.path_prefix: must not contain dot segments (requests with them are refused), got "/a/../b"`},
		{"path prefix with a star", func(c *Config) {
			c.Domains[0].Rules[0].Match = &MatchConfig{PathPrefix: "/api/*"}
		}, `domains[0] (api).rules[0] (all).match.path_prefix: is a prefix, not a pattern: "*" and "?" are not wildcards ("/api/" matches every path under /api/), got "/api/*"`},
		{"path prefix with a question mark", func(c *Config) {
			c.Domains[0].Rules[0].Match = &MatchConfig{PathPrefix: "/v?/login"}
		}, `domains[0] (api).rules[0] (all).match.path_prefix: is a prefix, not a pattern: "*" and "?" are not wildcards ("/api/" matches every path under /api/), got "/v?/login"`},
		{"path prefix with params", func(c *Config) {
			c.Domains[0].Rules[0].Match = &MatchConfig{PathPrefix: "/a;x"}
		}, `domains[0] (api).rules[0] (all).match.path_prefix: must not contain ";" (path parameters are cut before matching), got "/a;x"`},

		// Rules.
		{"too many rules", func(c *Config) {
			c.Domains[1].Rules = nil
			for i := range 256 {
				c.Domains[1].Rules = append(c.Domains[1].Rules,
					RuleConfig{Name: "r" + strconv.Itoa(i), Limit: 1, Period: time.Second})
			}
		}, `domains[1] (www).rules: must have at most 255 rules, got 256`},
		{"rule name left out", func(c *Config) { rule(c).Name = "" },
			`domains[0] (api).rules[0].name: required`},
		{"rule name empty", func(c *Config) {
			rule(c).Name, c.Given = "", map[string]bool{"domains[0].rules[0].name": true}
		}, `domains[0] (api).rules[0].name: must not be empty`},
		{"rule name charset", func(c *Config) { rule(c).Name = "all/reads" },
			`domains[0] (api).rules[0].name: must contain only [A-Za-z0-9_.-], got "all/reads"`},
		{"rule name too long", func(c *Config) { rule(c).Name = strings.Repeat("n", 65) },
			`domains[0] (api).rules[0].name: must be at most 64 bytes, got "` + strings.Repeat("n", 65) + `" (65 bytes)`},
		{"rule name reused", func(c *Config) {
			c.Domains[0].Rules = append(c.Domains[0].Rules, RuleConfig{Name: "writes", Limit: 1, Period: time.Second})
		}, `domains[0] (api).rules[2] (writes).name: "writes" is used by domains[0] (api).rules[1] (writes)`},
		{"limit left out", func(c *Config) { rule(c).Limit = 0 },
			`domains[0] (api).rules[0] (all).limit: required`},
		{"limit zero", func(c *Config) {
			rule(c).Limit, c.Given = 0, map[string]bool{"domains[0].rules[0].limit": true}
		}, `domains[0] (api).rules[0] (all).limit: must be at least 1, got 0`},
		{"limit negative", func(c *Config) { rule(c).Limit = -1 },
			`domains[0] (api).rules[0] (all).limit: must be at least 1, got -1`},
		{"limit too large", func(c *Config) { rule(c).Limit = 1_000_000_001 },
			`domains[0] (api).rules[0] (all).limit: must be at most 1000000000, got 1000000001`},
		{"period left out", func(c *Config) { rule(c).Period = 0 },
			`domains[0] (api).rules[0] (all).period: required`},
		{"period zero", func(c *Config) {
			rule(c).Period, c.Given = 0, map[string]bool{"domains[0].rules[0].period": true}
		}, `domains[0] (api).rules[0] (all).period: must be at least 1s, got 0s`},
		{"period below a second", func(c *Config) { rule(c).Period = 500 * time.Millisecond },
			`domains[0] (api).rules[0] (all).period: must be at least 1s, got 500ms`},
		{"period too long", func(c *Config) { rule(c).Period = 721 * time.Hour },
			`domains[0] (api).rules[0] (all).period: must be at most 720h, got 721h`},
		{"period fractional", func(c *Config) { rule(c).Period = 1500 * time.Millisecond },
			`domains[0] (api).rules[0] (all).period: must be a whole number of seconds, got 1.5s`},
		{"key unknown", func(c *Config) { rule(c).Key = []string{"ip", "cookie"} },
			`domains[0] (api).rules[0] (all).key[1]: must be ip, path, host, ja4, header:NAME, cookie:NAME, query:NAME or jwt:CLAIM, got "cookie"`},
		{"key upper-case", func(c *Config) { rule(c).Key = []string{"IP"} },
			`domains[0] (api).rules[0] (all).key[0]: must be ip, path, host, ja4, header:NAME, cookie:NAME, query:NAME or jwt:CLAIM, got "IP"`},
		{"key header not a token", func(c *Config) { rule(c).Key = []string{"header:X Api"} },
			`domains[0] (api).rules[0] (all).key[0]: header name must be an HTTP token, got "header:X Api"`},
		{"key header empty", func(c *Config) { rule(c).Key = []string{"header:"} },
			`domains[0] (api).rules[0] (all).key[0]: header name must be an HTTP token, got "header:"`},
		{"key header Host", func(c *Config) { rule(c).Key = []string{"header:host"} },
			`domains[0] (api).rules[0] (all).key[0]: must be host rather than a header, got "header:host"`},
		{"key duplicate header", func(c *Config) { rule(c).Key = []string{"header:X-Api-Key", "ip", "header:x-api-key"} },
			`domains[0] (api).rules[0] (all).key[2]: "header:x-api-key" duplicates key[0]`},
		{"key duplicate ip", func(c *Config) { rule(c).Key = []string{"ip", "ip"} },
			`domains[0] (api).rules[0] (all).key[1]: "ip" duplicates key[0]`},
		{"action", func(c *Config) { rule(c).Action = "deny" },
			`domains[0] (api).rules[0] (all).action: must be block or log, got "deny"`},
		{"mitigation negative", func(c *Config) { rule(c).MitigationTimeout = -time.Second },
			`domains[0] (api).rules[0] (all).mitigation_timeout: must be 0 (off) or between 1s and 24h, got -1s`},
		{"mitigation of 60ns", func(c *Config) { rule(c).MitigationTimeout = 60 },
			`domains[0] (api).rules[0] (all).mitigation_timeout: must be 0 (off) or between 1s and 24h, got 60ns`},
		{"mitigation too long", func(c *Config) { rule(c).MitigationTimeout = 25 * time.Hour },
			`domains[0] (api).rules[0] (all).mitigation_timeout: must be 0 (off) or between 1s and 24h, got 25h`},
		{"headers", func(c *Config) { rule(c).Headers = "sometimes" },
			`domains[0] (api).rules[0] (all).headers: must be blocked, always or none, got "sometimes"`},
		{"path prefix without slash", func(c *Config) { rule(c).Match = &MatchConfig{PathPrefix: "api/"} },
			`domains[0] (api).rules[0] (all).match.path_prefix: must start with "/", got "api/"`},
		{"method not a token", func(c *Config) { rule(c).Match = &MatchConfig{Methods: []string{"GET", "G T"}} },
			`domains[0] (api).rules[0] (all).match.methods[1]: must be an HTTP method (a token), got "G T"`},
		{"method empty", func(c *Config) { rule(c).Match = &MatchConfig{Methods: []string{""}} },
			`domains[0] (api).rules[0] (all).match.methods[0]: must be an HTTP method (a token), got ""`},
		{"method duplicate", func(c *Config) { rule(c).Match = &MatchConfig{Methods: []string{"GET", "POST", "get"}} },
			`domains[0] (api).rules[0] (all).match.methods[2]: "get" duplicates match.methods[0]`},
		{"block status server error", func(c *Config) { rule(c).BlockResponse = &ResponseConfig{Status: 503} },
			`domains[0] (api).rules[0] (all).block_response.status: must be between 400 and 499, got 503`},
		{"block_response with action log", func(c *Config) {
			rule(c).Action, rule(c).BlockResponse = "log", &ResponseConfig{Status: 403}
		}, `domains[0] (api).rules[0] (all).block_response: applies only with action block: a rule with action log never refuses a request`},
		{"block status success", func(c *Config) { rule(c).BlockResponse = &ResponseConfig{Status: 200} },
			`domains[0] (api).rules[0] (all).block_response.status: must be between 400 and 499, got 200`},
		{"block body too big", func(c *Config) {
			rule(c).BlockResponse = &ResponseConfig{Body: strings.Repeat("x", 40000)}
		}, `domains[0] (api).rules[0] (all).block_response.body: must be at most 32768 bytes, got 40000 bytes`},
		{"block content type", func(c *Config) {
			rule(c).BlockResponse = &ResponseConfig{Body: "{}", ContentType: "json"}
		}, `domains[0] (api).rules[0] (all).block_response.content_type: must be a media type such as "text/plain; charset=utf-8", got "json"`},
		{"allow without cidrs", func(c *Config) { rule(c).Allow = &AllowConfig{} },
			`domains[0] (api).rules[0] (all).allow.cidrs: must list at least one IP address or CIDR prefix`},
		{"allow host name", func(c *Config) { rule(c).Allow = &AllowConfig{CIDRs: []string{"10.0.0.0/8", "office.internal"}} },
			`domains[0] (api).rules[0] (all).allow.cidrs[1]: must be an IP address or CIDR prefix, got "office.internal"`},
		{"allow bad prefix", func(c *Config) { rule(c).Allow = &AllowConfig{CIDRs: []string{"2001:db8::/129"}} },
			`domains[0] (api).rules[0] (all).allow.cidrs[0]: must be an IP address or CIDR prefix, got "2001:db8::/129"`},
		{"allow zone", func(c *Config) { rule(c).Allow = &AllowConfig{CIDRs: []string{"fe80::1%eth0"}} },
			`domains[0] (api).rules[0] (all).allow.cidrs[0]: must not have a zone, got "fe80::1%eth0"`},
		{"count_status too low", func(c *Config) { rule(c).CountStatus = []int{401, 99} },
			`domains[0] (api).rules[0] (all).count_status[1]: must be an HTTP status from 100 to 599, got 99`},
		{"count_status too high", func(c *Config) { rule(c).CountStatus = []int{600} },
			`domains[0] (api).rules[0] (all).count_status[0]: must be an HTTP status from 100 to 599, got 600`},
		{"count_status duplicate", func(c *Config) { rule(c).CountStatus = []int{401, 403, 401} },
			`domains[0] (api).rules[0] (all).count_status[2]: 401 duplicates count_status[0]`},
		{"count_status with count_blocked", func(c *Config) { rule(c).CountStatus, rule(c).CountBlocked = []int{401}, true },
			`domains[0] (api).rules[0] (all).count_blocked: must be false with count_status (a refused request gets no status from the origin), got true`},
		{"count_status with respond", func(c *Config) {
			c.Domains[0].Respond = &ResponseConfig{Body: "ok"}
			rule(c).CountStatus = []int{401}
		}, `domains[0] (api).rules[0] (all).count_status: needs an origin's response, but the domain answers with respond`},
		{"response_cost_header not a token", func(c *Config) { rule(c).ResponseCostHeader = "X Cost" },
			`domains[0] (api).rules[0] (all).response_cost_header: must be a header field name, got "X Cost"`},
		{"response_cost_header framing", func(c *Config) { rule(c).ResponseCostHeader = "content-length" },
			`domains[0] (api).rules[0] (all).response_cost_header: must not be a field that HTTP or edge itself uses, got "content-length"`},
		{"response_cost_header rate-limit field", func(c *Config) { rule(c).ResponseCostHeader = "RateLimit" },
			`domains[0] (api).rules[0] (all).response_cost_header: must not be a field that HTTP or edge itself uses, got "RateLimit"`},
		{"response_cost_header with respond", func(c *Config) {
			c.Domains[0].Respond = &ResponseConfig{Body: "ok"}
			rule(c).ResponseCostHeader = "X-Edge-Cost"
		}, `domains[0] (api).rules[0] (all).response_cost_header: needs an origin's response, but the domain answers with respond`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			tt.mutate(&cfg)
			tab, err := Compile(cfg)
			if err == nil {
				t.Fatalf("Compile = %v, nil; want error %q", tab, tt.want)
			}
			if tab != nil {
				t.Errorf("Compile returned a table along with the error")
			}
			got := errorLines(t, err)
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("got errors:\n%s\nwant exactly:\n%s", strings.Join(got, "\n"), tt.want)
			}
		})
	}
}

func TestCompileReportsAllErrors(t *testing.T) {
	cfg := validConfig()
	cfg.Origin = "ftp://x"
	cfg.Log.Level = "loud"
	cfg.Domains[0].Rules[1].Period = 500 * time.Millisecond
	cfg.Domains[0].Rules[0].Limit = 0
	cfg.Domains[0].Rules = append(cfg.Domains[0].Rules, RuleConfig{Name: "writes", Limit: 1, Period: time.Second})
	cfg.Domains = append(cfg.Domains, DomainConfig{Hosts: []string{"api.example.com"}, Respond: &ResponseConfig{}})

	_, err := Compile(cfg)
	if err == nil {
		t.Fatal("Compile = nil error, want several")
	}
	got := errorLines(t, err)
	want := []string{
		`origin: must be an absolute http, https or h2c URL, got "ftp://x"`,
		`log.level: must be debug, info, warn or error, got "loud"`,
		`domains[0] (api).rules[0] (all).limit: required`,
		`domains[0] (api).rules[1] (writes).period: must be at least 1s, got 500ms`,
		`domains[0] (api).rules[2] (writes).name: "writes" is used by domains[0] (api).rules[1] (writes)`,
		`domains[2] (api.example.com).hosts[0]: "api.example.com" is already claimed by domains[0] (api)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if gotText := err.Error(); gotText != strings.Join(want, "\n") {
		t.Errorf("got Error() %q, want the lines joined by newlines", gotText)
	}
}

func TestCompileDefaults(t *testing.T) {
	tab, err := Compile(Config{
		Origin: "https://origin.internal/base",
		Domains: []DomainConfig{
			{Hosts: []string{"Example.COM.", "www.example.com"}, Rules: []RuleConfig{
				{Name: "all", Limit: 10, Period: time.Minute},
				{Name: "custom", Limit: 1, Period: time.Second,
					BlockResponse: &ResponseConfig{}},
				{Name: "body", Limit: 1, Period: time.Second,
					BlockResponse: &ResponseConfig{Body: "slow down"}},
			}},
			{Hosts: []string{"*"}, Respond: &ResponseConfig{}},
		},
	})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"listen", tab.Listen, ":8080"},
		{"admin_listen", tab.AdminListen, "127.0.0.1:8077"},
		{"pop", tab.Pop, "local"},
		{"origin", tab.Origin.String(), "https://origin.internal/base"},
		{"max_keys", tab.MaxKeys, 1_000_000},
		{"trusted_proxies", len(tab.TrustedProxies), 0},
		{"ipv6_prefix", tab.IPv6Prefix, 64},
		{"timeouts", tab.Timeouts, Timeouts{
			ReadHeader: 10 * time.Second, Read: 60 * time.Second, Write: 0,
			Idle: 120 * time.Second, Upstream: 30 * time.Second, Shutdown: 15 * time.Second,
		}},
		{"max_header_bytes", tab.MaxHeaderBytes, 64 << 10},
		{"max_connections (0: from the open-file limit at start)", tab.MaxConnections, 0},
		{"log.level", tab.LogLevel, slog.LevelInfo},
		{"log.format", tab.LogFormat, "text"},
		{"domain index", tab.Domains[1].Index, 1},
		{"domain name from first host", tab.Domains[0].Name, "example.com"},
		{"catch-all domain name", tab.Domains[1].Name, "_"},
		{"hosts normalised", tab.Domains[0].Hosts, []string{"example.com", "www.example.com"}},
		{"inherited origin", tab.Domains[0].Origin.String(), "https://origin.internal/base"},
		{"inherited origin is a copy", tab.Domains[0].Origin != tab.Origin, true},
		{"respond has no origin", tab.Domains[1].Origin == nil, true},
		{"respond", *tab.Domains[1].Respond, Response{Status: 200, ContentType: "text/plain; charset=utf-8"}},
		// The second domain has no rules: it holds no counters, takes no share.
		{"max_keys shared by domains with rules", []int{tab.Domains[0].MaxKeys, tab.Domains[1].MaxKeys}, []int{1_000_000, 0}},
		{"rule index", tab.Domains[0].Rules[2].Index, 2},
		{"rule key", tab.Domains[0].Rules[0].Key, []KeyPart{{Kind: KeyIP}}},
		{"rule action", tab.Domains[0].Rules[0].Action, ActionBlock},
		{"rule headers", tab.Domains[0].Rules[0].Headers, HeadersBlocked},
		{"rule limit", tab.Domains[0].Rules[0].Limit, int64(10)},
		{"rule period", tab.Domains[0].Rules[0].Period, time.Minute},
		{"rule matches any path", tab.Domains[0].Rules[0].PathPrefix, ""},
		{"rule matches any method", tab.Domains[0].Rules[0].Methods == nil, true},
		{"rule block response", tab.Domains[0].Rules[0].BlockResponse == nil, true},
		{"empty block response", *tab.Domains[0].Rules[1].BlockResponse, Response{Status: 429}},
		{"block response with body", *tab.Domains[0].Rules[2].BlockResponse,
			Response{Status: 429, Body: "slow down", ContentType: "text/plain; charset=utf-8"}},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s: got %#v, want %#v", tt.name, tt.got, tt.want)
		}
	}
}

// TestDefaultAdminPort: the admin listener's default port is on loopback
// and is none that a common server, or another of edge's listeners as the
// manual shows them, takes by default, so that edge starts beside them.
func TestDefaultAdminPort(t *testing.T) {
	host, p, err := net.SplitHostPort(DefaultAdminListen)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("DefaultAdminListen %q: want 127.0.0.1:port (%v)", DefaultAdminListen, err)
	}
	port, _ := strconv.Atoi(p)
	tests := []struct {
		name     string
		from, to int
	}{
		{"Prometheus", 9090, 9090},
		{"Prometheus exporters", 9100, 9999},
		{"Envoy admin", 9901, 9901},
		{"Caddy admin", 2019, 2019},
		{"edge's listen", 8080, 8080},
		{"the manual's rls listener", 8081, 8081},
		{"the manual's check listener", 8082, 8082},
		{"common web and app servers", 8000, 8000},
		{"common web and app servers, TLS", 8443, 8443},
		{"Grafana, Node.js", 3000, 3000},
		{"Flask, registries", 5000, 5000},
		{"Redis", 6379, 6379},
		{"StatsD", 8125, 8125},
		{"Consul", 8500, 8500},
		{"MinIO, SonarQube, PHP-FPM", 9000, 9000},
		{"privileged", 0, 1023},
	}
	for _, tt := range tests {
		if port >= tt.from && port <= tt.to {
			t.Errorf("got port %d, which is %s's (%d–%d); want one no common server uses", port, tt.name, tt.from, tt.to)
		}
	}
}

func TestCompileNormalises(t *testing.T) {
	tab, err := Compile(Config{
		// The same port on two different hosts does not clash.
		Listen:      "127.0.0.1:80",
		AdminListen: "127.0.0.2:80",
		Origin:      "http://origin.internal",
		AdminHosts:  []string{"Edge.Internal.", "[2001:DB8::9]", "192.0.2.9"},
		MaxKeys:     10,
		ClientIP: ClientIPConfig{TrustedProxies: []string{
			"10.1.2.3/8", "192.0.2.1", "2001:db8::1", "::ffff:10.0.0.0/104", "::ffff:192.0.2.7", "2001:db8::/32",
		}, IPv6Prefix: 56},
		Log: LogConfig{Level: "debug", Format: "json"},
		Domains: []DomainConfig{
			{Name: "a", Hosts: []string{"a.example.com"}, MaxKeys: 4, Rules: []RuleConfig{{
				Name: "r", Limit: 5, Period: time.Hour,
				Key:    []string{"header:x-api-key", "path", "host", "ip"},
				Action: "log", Headers: "always", MitigationTimeout: time.Hour, CountBlocked: true,
				Match: &MatchConfig{PathPrefix: "/api/", Methods: []string{"get", "Post"}},
			}}},
			{Hosts: []string{"[2001:DB8:0::1]"}},
			{Hosts: []string{"*.Example.org."}, Rules: []RuleConfig{{Name: "n", Limit: 1, Period: time.Second, Headers: "none"}}},
		},
	})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	r := tab.Domains[0].Rules[0]
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"trusted proxies", tab.TrustedProxies, []netip.Prefix{
			netip.MustParsePrefix("10.0.0.0/8"),
			netip.MustParsePrefix("192.0.2.1/32"),
			netip.MustParsePrefix("2001:db8::1/128"),
			netip.MustParsePrefix("10.0.0.0/8"),
			netip.MustParsePrefix("192.0.2.7/32"),
			netip.MustParsePrefix("2001:db8::/32"),
		}},
		{"ipv6_prefix", tab.IPv6Prefix, 56},
		{"admin_hosts", tab.AdminHosts, []string{"edge.internal", "[2001:db8::9]", "192.0.2.9"}},
		{"log level", tab.LogLevel, slog.LevelDebug},
		{"log format", tab.LogFormat, "json"},
		{"max_keys explicit and shared", []int{tab.Domains[0].MaxKeys, tab.Domains[1].MaxKeys, tab.Domains[2].MaxKeys}, []int{4, 0, 6}},
		{"ipv6 host canonical", tab.Domains[1].Hosts, []string{"[2001:db8::1]"}},
		{"ipv6 default name", tab.Domains[1].Name, "_2001_db8__1_"},
		{"wildcard host", tab.Domains[2].Hosts, []string{"*.example.org"}},
		{"wildcard default name", tab.Domains[2].Name, "_.example.org"},
		{"key", r.Key, []KeyPart{{Kind: KeyHeader, Header: "X-Api-Key"}, {Kind: KeyPath}, {Kind: KeyHost}, {Kind: KeyIP}}},
		{"methods", r.Methods, []string{"GET", "POST"}},
		{"path prefix", r.PathPrefix, "/api/"},
		{"action", r.Action, ActionLog},
		{"headers", r.Headers, HeadersAlways},
		{"headers none", tab.Domains[2].Rules[0].Headers, HeadersNone},
		{"mitigation", r.MitigationTimeout, time.Hour},
		{"count blocked", r.CountBlocked, true},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s: got %#v, want %#v", tt.name, tt.got, tt.want)
		}
	}
}

func FuzzCompile(f *testing.F) {
	f.Add("api.example.com", "*.example.com", "api", "/api/", "header:X-Api-Key", "POST", "http://origin", ":8080", 10, int64(time.Minute), 0)
	f.Add("*", "Example.COM.", "", "", "ip", "get", "https://origin/base", "127.0.0.1:80", 1, int64(time.Second), 404)
	f.Add("[::1]", "[2001:db8:0::1]", "v6", "api", "header:", "G T", "ftp://x", "", -1, int64(-1), 200)
	f.Add("a..b", "*.*.x", "a b", "/", "path", "", "http://u:p@x/?q#f", "::", 1_000_000_001, int64(1500*time.Millisecond), 600)
	f.Add("bücher.de", "x:80", "_.example.com", "/x", "header:host", "GET", "https://", ":http", 1, int64(721*time.Hour), 1<<40)
	f.Fuzz(func(t *testing.T, host1, host2, name, prefix, key, method, origin, listen string, limit int, period int64, status int) {
		cfg := Config{
			Listen: listen,
			Origin: origin,
			Domains: []DomainConfig{
				{Name: name, Hosts: []string{host1, host2}, MaxKeys: limit, Rules: []RuleConfig{
					{Name: name, Limit: limit, Period: time.Duration(period), Key: []string{key, "ip"},
						Match: &MatchConfig{PathPrefix: prefix, Methods: []string{method}}},
					{Name: "r" + name, Limit: limit, Period: time.Duration(period), Key: []string{key},
						BlockResponse: &ResponseConfig{Status: status, Body: prefix}},
				}},
				{Hosts: []string{"sub." + host1}, Respond: &ResponseConfig{Status: status, Body: name}},
			},
		}
		tab, err := Compile(cfg)
		if err != nil {
			if tab != nil {
				t.Fatalf("Compile returned a table along with error %v", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.Contains(line, ": ") {
					t.Fatalf("error line %q is not \"path: message\"", line)
				}
			}
			return
		}
		// Every configured host must route back to its own domain, and
		// every name must find what it names.
		for _, d := range tab.Domains {
			for _, h := range d.Hosts {
				if strings.HasPrefix(h, "*") {
					continue
				}
				if got, ok := tab.Lookup(h); !ok || got != d {
					t.Fatalf("Lookup(%q) = %v, %v; want domains[%d]", h, got, ok, d.Index)
				}
			}
			if got, ok := tab.Domain(d.Name); !ok || got != d {
				t.Fatalf("Domain(%q) = %v, %v; want domains[%d]", d.Name, got, ok, d.Index)
			}
			for _, r := range d.Rules {
				if got, ok := d.Rule(r.Name); !ok || got != r {
					t.Fatalf("Rule(%q) = %v, %v; want rules[%d]", r.Name, got, ok, r.Index)
				}
			}
		}
	})
}

func TestDefaultMaxConnections(t *testing.T) {
	tests := []struct {
		name  string
		limit uint64
		want  int
	}{
		{"unknown", 0, 10_000},
		{"one file", 1, 1},
		{"two files", 2, 1},
		{"ulimit -n 1024", 1024, 921},
		{"ulimit -n 4096", 4096, 3686},
		{"just under the top", 11_111, 9_999},
		{"at the top", 11_112, 10_000},
		{"systemd's 524288", 524_288, 10_000},
		{"unlimited", ^uint64(0), 10_000},
	}
	for _, tt := range tests {
		if got := DefaultMaxConnections(tt.limit); got != tt.want {
			t.Errorf("%s: DefaultMaxConnections(%d) = %d, want %d", tt.name, tt.limit, got, tt.want)
		}
	}
}

// TestCompileWhatCounts: the keys compile to what the proxy consults, and
// Exempt and Counts answer from them.
func TestCompileWhatCounts(t *testing.T) {
	cfg := validConfig()
	cfg.Domains[0].Rules[0].Allow = &AllowConfig{CIDRs: []string{"10.1.2.3/8", "192.0.2.1", "::ffff:198.51.100.0/120", "2001:db8::/32"}}
	cfg.Domains[0].Rules[0].ResponseCostHeader = "x-edge-cost"
	cfg.Domains[0].Rules[1].CountStatus = []int{401, 403}
	tab, err := Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	all, writes := tab.Domains[0].Rules[0], tab.Domains[0].Rules[1]
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"allow", all.Allow, []netip.Prefix{
			netip.MustParsePrefix("10.0.0.0/8"),
			netip.MustParsePrefix("192.0.2.1/32"),
			netip.MustParsePrefix("198.51.100.0/24"),
			netip.MustParsePrefix("2001:db8::/32"),
		}},
		{"no allow", writes.Allow, []netip.Prefix(nil)},
		{"response_cost_header canonical", all.ResponseCostHeader, "X-Edge-Cost"},
		{"count_status", writes.CountStatus, []int{401, 403}},
		{"no count_status", all.CountStatus, []int(nil)},
		{"counts after: cost header", all.CountsAfter(), true},
		{"counts after: status", writes.CountsAfter(), true},
		{"exempt: in 10/8", all.Exempt(netip.MustParseAddr("10.200.0.1")), true},
		{"exempt: mapped IPv4", all.Exempt(netip.MustParseAddr("::ffff:198.51.100.7")), true},
		{"exempt: IPv6 with zone", all.Exempt(netip.MustParseAddr("2001:db8::5%eth0")), true},
		{"exempt: outside", all.Exempt(netip.MustParseAddr("192.0.2.2")), false},
		{"exempt: IPv6 outside", all.Exempt(netip.MustParseAddr("2001:db9::1")), false},
		{"exempt: zero addr", all.Exempt(netip.Addr{}), false},
		{"exempt: rule without allow", writes.Exempt(netip.MustParseAddr("10.0.0.1")), false},
		{"counts 401", writes.Counts(401), true},
		{"counts 200", writes.Counts(200), false},
		{"counts every status without count_status", all.Counts(200), true},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestAccuracySample(t *testing.T) {
	tests := []struct {
		name    string
		value   int
		given   bool
		want    int
		wantErr string
	}{
		{name: "left out", want: DefaultAccuracySample},
		{name: "0 given is off", value: 0, given: true, want: 0},
		{name: "every key", value: 1, given: true, want: 1},
		{name: "negative", value: -1, given: true, wantErr: "accuracy_sample: must be between 0 (off) and 1000000000, got -1"},
		{name: "too sparse", value: 1_000_000_001, given: true, wantErr: "accuracy_sample: must be between 0 (off) and 1000000000, got 1000000001"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{AccuracySample: tc.value, Domains: []DomainConfig{{
				Hosts: []string{"a.example.com"}, Respond: &ResponseConfig{Body: "ok"},
			}}}
			if tc.given {
				cfg.Given = map[string]bool{"accuracy_sample": true}
			}
			tb, err := Compile(cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tb.AccuracySample != tc.want {
				t.Errorf("got %d, want %d", tb.AccuracySample, tc.want)
			}
		})
	}
}

// TestOriginNotALoop: an origin that only looks like one of edge's
// listeners compiles: another port, another address, a port the system
// chooses.
func TestOriginNotALoop(t *testing.T) {
	tests := []struct{ name, listen, origin string }{
		{"another port", ":8080", "http://127.0.0.1:8000"},
		{"listener on another address", "10.0.0.5:8080", "http://127.0.0.1:8080"},
		{"https default port", ":8080", "https://localhost"},
		{"port chosen by the system", "127.0.0.1:0", "http://127.0.0.1:0"},
		{"another loopback address", "127.0.0.1:8080", "http://127.0.0.2:8080"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.Listen, cfg.Origin = tt.listen, tt.origin
			if _, err := Compile(cfg); err != nil {
				t.Errorf("Compile: %v, want no error", err)
			}
		})
	}
}

// TestCompileH2COrigin: an origin may be h2c://host:port, HTTP/2 with
// prior knowledge, at the top level and for a domain.
func TestCompileH2COrigin(t *testing.T) {
	c := validConfig()
	c.Origin = "h2c://grpc.internal:50051"
	c.Domains[1].Origin = "h2c://10.0.0.7:9000/"
	tab, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ got, want string }{
		{tab.Origin.String(), "h2c://grpc.internal:50051"},
		{tab.Domains[1].Origin.String(), "h2c://10.0.0.7:9000/"},
	} {
		if tt.got != tt.want {
			t.Errorf("origin %q, want %q", tt.got, tt.want)
		}
	}
}
