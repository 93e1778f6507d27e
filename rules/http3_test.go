package rules

import (
	"slices"
	"testing"
)

func TestCompileHTTP3(t *testing.T) {
	tlsOn := TLSConfig{Listen: ":8443", Certificates: []CertificateConfig{{CertFile: "a.pem", KeyFile: "a.key"}}, HTTP3: true}
	defaults := HTTP3{RetryAbove: 100, MaxConcurrentStreams: 100}
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   HTTP3
		on     bool
	}{
		{"off", func(c *Config) {}, defaults, false},
		{"on, defaults", func(c *Config) { c.TLS = tlsOn }, defaults, true},
		{"every key given", func(c *Config) {
			c.TLS = tlsOn
			c.HTTP3 = HTTP3Config{AllowZeroRTT: true, RetryAbove: 1_000_000, MaxConcurrentStreams: 1}
		}, HTTP3{AllowZeroRTT: true, RetryAbove: 1_000_000, MaxConcurrentStreams: 1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c)
			tab, err := Compile(c)
			if err != nil {
				t.Fatal(err)
			}
			if tab.HTTP3 != tt.want || tab.TLS.HTTP3 != tt.on {
				t.Errorf("got %+v, tls.http3 %v; want %+v, %v", tab.HTTP3, tab.TLS.HTTP3, tt.want, tt.on)
			}
		})
	}
}

func TestCompileHTTP3Errors(t *testing.T) {
	tlsOn := TLSConfig{Listen: ":8443", Certificates: []CertificateConfig{{CertFile: "a.pem", KeyFile: "a.key"}}, HTTP3: true}
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string
	}{
		{"tls.http3 without tls.listen", func(c *Config) { c.TLS.HTTP3 = true }, []string{
			"tls.http3: needs tls.listen: edge serves no TLS without it"}},
		{"keys without tls.http3", func(c *Config) {
			c.TLS = tlsOn
			c.TLS.HTTP3 = false
			c.HTTP3 = HTTP3Config{AllowZeroRTT: true, RetryAbove: 5, MaxConcurrentStreams: 5}
		}, []string{
			"http3.allow_0rtt: needs tls.http3: edge serves no HTTP/3 without it",
			"http3.retry_above: needs tls.http3: edge serves no HTTP/3 without it",
			"http3.max_concurrent_streams: needs tls.http3: edge serves no HTTP/3 without it"}},
		{"out of range", func(c *Config) {
			c.TLS = tlsOn
			c.HTTP3 = HTTP3Config{RetryAbove: -1, MaxConcurrentStreams: 1001}
		}, []string{
			"http3.retry_above: must be between 1 and 1000000, got -1",
			"http3.max_concurrent_streams: must be between 1 and 1000, got 1001"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
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
