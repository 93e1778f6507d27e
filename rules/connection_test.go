package rules

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestCompileProxyProtocol(t *testing.T) {
	lb := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32")}
	tests := []struct {
		name   string
		tls    bool
		mutate func(c *Config)
		want   ProxyProtocol
	}{
		{"off by default", true, func(c *Config) {}, ProxyProtocol{}},
		{"both listeners by default", true, func(c *Config) {}, ProxyProtocol{From: lb, Public: true, TLS: true}},
		{"public alone without tls", false, func(c *Config) {}, ProxyProtocol{From: lb, Public: true}},
		{"tls only", true, func(c *Config) { c.ProxyProtocol.Listeners = []string{"tls"} },
			ProxyProtocol{From: lb, TLS: true}},
		{"mapped prefix unmapped", false, func(c *Config) { c.ProxyProtocol.From = []string{"::ffff:10.1.0.0/112"} },
			ProxyProtocol{From: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, Public: true}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			if tt.tls {
				c = tlsConfig()
			}
			if i > 0 {
				c.ProxyProtocol.From = []string{"10.1.2.3/8", "192.0.2.7"}
			}
			tt.mutate(&c)
			tab, err := Compile(c)
			if err != nil {
				t.Fatal(err)
			}
			if got := tab.ProxyProtocol; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCompileProxyProtocolErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string
	}{
		{"listeners without from", func(c *Config) { c.ProxyProtocol = ProxyProtocolConfig{Listeners: []string{"public"}} }, []string{
			"proxy_protocol.listeners: needs proxy_protocol.from: without it no listener reads a PROXY header"}},
		{"bad prefix", func(c *Config) { c.ProxyProtocol.From = []string{"10.0.0.0/33"} }, []string{
			`proxy_protocol.from[0]: must be an IP address or CIDR prefix, got "10.0.0.0/33"`}},
		{"check listener", func(c *Config) { c.ProxyProtocol.Listeners = []string{"public", "check"} }, []string{
			`proxy_protocol.listeners[1]: must be public or tls (the check, admin and rls listeners never read a PROXY header), got "check"`}},
		{"twice", func(c *Config) { c.ProxyProtocol.Listeners = []string{"public", "public"} }, []string{
			`proxy_protocol.listeners[1]: is named twice, got "public"`}},
		{"tls without tls.listen", func(c *Config) { c.TLS = TLSConfig{}; c.ProxyProtocol.Listeners = []string{"tls"} }, []string{
			`proxy_protocol.listeners[0]: needs tls.listen: there is no HTTPS listener, got "tls"`}},
		{"none", func(c *Config) {
			c.ProxyProtocol.Listeners = []string{}
			c.Given = map[string]bool{"proxy_protocol.listeners": true}
		}, []string{"proxy_protocol.listeners: must name public, tls or both, got none"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tlsConfig()
			c.ProxyProtocol.From = []string{"10.0.0.0/8"}
			tt.mutate(&c)
			_, err := Compile(c)
			if err == nil {
				t.Fatal("Compile accepted it")
			}
			if got := errorLines(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCompileConnections(t *testing.T) {
	tests := []struct {
		name string
		c    ConnectionsConfig
		want Connections
	}{
		{"none", ConnectionsConfig{}, Connections{}},
		{"max_per_client", ConnectionsConfig{MaxPerClient: 20}, Connections{MaxPerClient: 20}},
		{"rate, max_clients by default", ConnectionsConfig{RatePerClient: &ConnectionRateConfig{Limit: 50, Period: 10 * time.Second}},
			Connections{RateLimit: 50, RatePeriod: 10 * time.Second, MaxClients: DefaultMaxClients}},
		{"both, allow, max_clients", ConnectionsConfig{MaxPerClient: 4, RatePerClient: &ConnectionRateConfig{Limit: 1, Period: time.Minute},
			Allow: &AllowConfig{CIDRs: []string{"10.0.0.0/8", "2001:db8::1"}}, MaxClients: 7},
			Connections{MaxPerClient: 4, RateLimit: 1, RatePeriod: time.Minute, MaxClients: 7,
				Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::1/128")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			c.Connections = tt.c
			tab, err := Compile(c)
			if err != nil {
				t.Fatal(err)
			}
			if got := tab.Connections; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCompileConnectionsErrors(t *testing.T) {
	rate := func(limit int, period time.Duration) *ConnectionRateConfig {
		return &ConnectionRateConfig{Limit: limit, Period: period}
	}
	tests := []struct {
		name string
		c    ConnectionsConfig
		want []string
	}{
		{"negative max_per_client", ConnectionsConfig{MaxPerClient: -1}, []string{
			"connections.max_per_client: must be between 0 (none) and 1048576, got -1"}},
		{"rate without limit or period", ConnectionsConfig{RatePerClient: rate(0, 0)}, []string{
			"connections.rate_per_client.limit: required", "connections.rate_per_client.period: required"}},
		{"rate over bounds", ConnectionsConfig{RatePerClient: rate(2_000_000_000, 48*time.Hour)}, []string{
			"connections.rate_per_client.limit: must be between 1 and 1000000000, got 2000000000",
			"connections.rate_per_client.period: must be between 1s and 24h0m0s, got 48h0m0s"}},
		{"fractional period", ConnectionsConfig{RatePerClient: rate(5, 1500*time.Millisecond)}, []string{
			"connections.rate_per_client.period: must be a whole number of seconds, got 1.5s"}},
		{"max_clients without rate", ConnectionsConfig{MaxPerClient: 1, MaxClients: 10}, []string{
			"connections.max_clients: needs connections.rate_per_client: it bounds the clients whose rate is tracked, got 10"}},
		{"max_clients too many", ConnectionsConfig{RatePerClient: rate(5, time.Second), MaxClients: 20_000_000}, []string{
			"connections.max_clients: must be between 1 and 10000000, got 20000000"}},
		{"allow without a limit", ConnectionsConfig{Allow: &AllowConfig{CIDRs: []string{"10.0.0.1"}}}, []string{
			"connections.allow: needs connections.max_per_client or connections.rate_per_client: there is no limit to exempt from"}},
		{"allow empty", ConnectionsConfig{MaxPerClient: 1, Allow: &AllowConfig{}}, []string{
			"connections.allow.cidrs: required with connections.allow"}},
		{"allow bad prefix", ConnectionsConfig{MaxPerClient: 1, Allow: &AllowConfig{CIDRs: []string{"10.0.0.0/40"}}}, []string{
			`connections.allow.cidrs[0]: must be an IP address or CIDR prefix, got "10.0.0.0/40"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			c.Connections = tt.c
			_, err := Compile(c)
			if err == nil {
				t.Fatal("Compile accepted it")
			}
			if got := errorLines(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
