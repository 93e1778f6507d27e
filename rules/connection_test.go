package rules

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"
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
