package rules

import (
	"slices"
	"testing"
)

func TestCompileHTTP2(t *testing.T) {
	defaults := HTTP2{MaxConcurrentStreams: 100, MaxRequestsPerConnection: 1000, MaxHeaderBytes: DefaultMaxHeaderBytes,
		MaxResets: 100, MaxControlFrames: 1000}
	tests := []struct {
		name    string
		mutate  func(c *Config)
		want    HTTP2
		wantH2C bool
	}{
		{"defaults without HTTP/2 served", func(c *Config) {}, defaults, false},
		{"h2c", func(c *Config) { c.H2C = true }, defaults, true},
		{"max_header_bytes follows the top level", func(c *Config) { c.H2C, c.MaxHeaderBytes = true, 4096 },
			HTTP2{MaxConcurrentStreams: 100, MaxRequestsPerConnection: 1000, MaxHeaderBytes: 4096, MaxResets: 100, MaxControlFrames: 1000}, true},
		{"every key given", func(c *Config) {
			c.H2C = true
			c.HTTP2 = HTTP2Config{MaxConcurrentStreams: 1000, MaxRequestsPerConnection: 10_000_000, MaxHeaderBytes: 1 << 20,
				MaxResets: 1, MaxControlFrames: 1_000_000}
		}, HTTP2{MaxConcurrentStreams: 1000, MaxRequestsPerConnection: 10_000_000, MaxHeaderBytes: 1 << 20, OwnHeaderBytes: true,
			MaxResets: 1, MaxControlFrames: 1_000_000}, true},
		{"served over TLS", func(c *Config) {
			c.TLS = TLSConfig{Listen: ":8443", Certificates: []CertificateConfig{{CertFile: "a.pem", KeyFile: "a.key"}}}
			c.HTTP2.MaxResets = 5
		}, HTTP2{MaxConcurrentStreams: 100, MaxRequestsPerConnection: 1000, MaxHeaderBytes: DefaultMaxHeaderBytes,
			MaxResets: 5, MaxControlFrames: 1000}, false},
		{"max_concurrent_streams for the rls listener alone", func(c *Config) {
			c.RLS = RLSConfig{Listen: "127.0.0.1:8081", Config: []string{"ratelimit.yaml"}}
			c.HTTP2.MaxConcurrentStreams = 7
		}, HTTP2{MaxConcurrentStreams: 7, MaxRequestsPerConnection: 1000, MaxHeaderBytes: DefaultMaxHeaderBytes,
			MaxResets: 100, MaxControlFrames: 1000}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c)
			tab, err := Compile(c)
			if err != nil {
				t.Fatal(err)
			}
			if tab.HTTP2 != tt.want || tab.H2C != tt.wantH2C {
				t.Errorf("got %+v, h2c %v; want %+v, h2c %v", tab.HTTP2, tab.H2C, tt.want, tt.wantH2C)
			}
		})
	}
}

func TestCompileHTTP2Errors(t *testing.T) {
	on, off := true, false
	tlsOn := TLSConfig{Listen: ":8443", Certificates: []CertificateConfig{{CertFile: "a.pem", KeyFile: "a.key"}}}
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string
	}{
		{"no HTTP/2 served", func(c *Config) { c.HTTP2 = HTTP2Config{MaxResets: 10, MaxConcurrentStreams: 10} }, []string{
			"http2.max_concurrent_streams: needs h2c, tls.listen with tls.http2, or rls.listen: edge serves no HTTP/2 without them",
			"http2.max_resets: needs h2c, or tls.listen with tls.http2: edge serves no HTTP/2 without them"}},
		{"TLS without http2", func(c *Config) {
			c.TLS = tlsOn
			c.TLS.HTTP2 = &off
			c.HTTP2.MaxControlFrames = 10
		}, []string{"http2.max_control_frames: needs h2c, or tls.listen with tls.http2: edge serves no HTTP/2 without them"}},
		{"out of range", func(c *Config) {
			c.H2C = true
			c.HTTP2 = HTTP2Config{MaxConcurrentStreams: 1001, MaxRequestsPerConnection: -1, MaxHeaderBytes: 100,
				MaxResets: 100_001, MaxControlFrames: 1_000_001}
		}, []string{
			"http2.max_concurrent_streams: must be between 1 and 1000, got 1001",
			"http2.max_requests_per_connection: must be between 1 and 10000000, got -1",
			"http2.max_header_bytes: must be between 1024 and 1048576, got 100",
			"http2.max_resets: must be between 1 and 100000, got 100001",
			"http2.max_control_frames: must be between 1 and 1000000, got 1000001"}},
		{"h2c without a public listener", func(c *Config) {
			c.Domains = nil
			c.Origin = ""
			c.RLS = RLSConfig{Listen: "127.0.0.1:8081", Config: []string{"x.yaml"}}
			c.H2C = true
		}, []string{"h2c: needs the public listener, which edge binds only with domains to serve"}},
		{"tls.http2 true is fine, h2c off", func(c *Config) {
			c.TLS = tlsOn
			c.TLS.HTTP2 = &on
			c.HTTP2.MaxResets = -5
		}, []string{"http2.max_resets: must be between 1 and 100000, got -5"}},
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
