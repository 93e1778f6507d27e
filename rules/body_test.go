package rules

import (
	"slices"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want Size
		err  string
	}{
		{"0", 0, ""},
		{"65536", 64 * KiB, ""},
		{"512B", 512, ""},
		{"64KiB", 64 * KiB, ""},
		{"1MiB", MiB, ""},
		{"1 MiB", MiB, ""},
		{"3GiB", 3 * GiB, ""},
		{"007KiB", 7 * KiB, ""},
		{"8589934591GiB", 8589934591 * GiB, ""},
		{"8589934592GiB", 0, "is too large for a size"},
		{"99999999999999999999", 0, "is too large for a size"},
		{"", 0, "must be a size"},
		{"MiB", 0, "must be a size"},
		{"1MB", 0, "must be a size"},
		{"1KB", 0, "must be a size"},
		{"1mib", 0, "must be a size"},
		{"1.5MiB", 0, "must be a size"},
		{"-1", 0, "must be a size"},
		{"+1", 0, "must be a size"},
		{"1  MiB", 0, "must be a size"},
		{" 1MiB", 0, "must be a size"},
		{"1e6", 0, "must be a size"},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if got != tt.want || !strings.HasPrefix(gotErr, tt.err) || (tt.err == "") != (err == nil) {
			t.Errorf("ParseSize(%q): got %d, %q, want %d, %q...", tt.in, got, gotErr, tt.want, tt.err)
		}
	}
}

func TestSizeString(t *testing.T) {
	for _, tt := range []struct {
		in   Size
		want string
	}{
		{0, "0B"}, {1, "1B"}, {1023, "1023B"}, {KiB, "1KiB"}, {1536 * KiB, "1536KiB"},
		{MiB, "1MiB"}, {256 * MiB, "256MiB"}, {2 * GiB, "2GiB"}, {-KiB, "-1KiB"},
	} {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("Size(%d).String(): got %q, want %q", int64(tt.in), got, tt.want)
		}
		if tt.in >= 0 {
			if back, err := ParseSize(tt.in.String()); err != nil || back != tt.in {
				t.Errorf("ParseSize(%q): got %d, %v, want %d", tt.in.String(), back, err, int64(tt.in))
			}
		}
	}
}

func TestCompileBodies(t *testing.T) {
	off, on := false, true
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []BodyPolicy // per domain
		total  Size
	}{
		{"defaults", func(c *Config) {},
			[]BodyPolicy{{Buffer: true, BufferSize: MiB}, {Buffer: true, BufferSize: MiB}}, 256 * MiB},
		{"top level applies to every domain", func(c *Config) {
			c.RequestBuffer, c.MaxRequestBody, c.MaxBufferedBytes = 64*KiB, 10*MiB, 100*MiB
		}, []BodyPolicy{{true, 64 * KiB, 10 * MiB}, {true, 64 * KiB, 10 * MiB}}, 100 * MiB},
		{"domain overrides", func(c *Config) {
			c.MaxRequestBody = 10 * MiB
			c.Domains[0].RequestBuffering = &off
			c.Domains[1].RequestBuffering = &on
			c.Domains[1].RequestBuffer = 4 * KiB
			c.Domains[1].MaxRequestBody = KiB
		}, []BodyPolicy{{false, MiB, 10 * MiB}, {true, 4 * KiB, KiB}}, 256 * MiB},
	}
	for _, tt := range tests {
		cfg := validConfig()
		tt.mutate(&cfg)
		tab, err := Compile(cfg)
		if err != nil {
			t.Errorf("%s: Compile: %v", tt.name, err)
			continue
		}
		var got []BodyPolicy
		for _, d := range tab.Domains {
			got = append(got, d.Body)
		}
		if !slices.Equal(got, tt.want) || tab.MaxBufferedBytes != tt.total {
			t.Errorf("%s: got %+v, total %s, want %+v, total %s", tt.name, got, tab.MaxBufferedBytes, tt.want, tt.total)
		}
	}
}

func TestCompileBodyErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string
	}{
		{"buffer too small", func(c *Config) { c.RequestBuffer = 1000 },
			[]string{"request_buffer: must be between 1KiB and 1GiB, got 1000B"}},
		{"buffer too large", func(c *Config) { c.Domains[1].RequestBuffer = 2 * GiB },
			[]string{"domains[1] (www).request_buffer: must be between 1KiB and 1GiB, got 2GiB"}},
		{"negative buffer", func(c *Config) { c.RequestBuffer = -KiB },
			[]string{"request_buffer: must be between 1KiB and 1GiB, got -1KiB"}},
		{"negative limits", func(c *Config) {
			c.MaxRequestBody, c.Domains[0].MaxRequestBody, c.MaxBufferedBytes = -1, -2, -3
		}, []string{
			"max_request_body: must not be negative, got -1B",
			"domains[0] (api).max_request_body: must not be negative, got -2B",
			"max_buffered_bytes: must not be negative, got -3B",
		}},
		{"domain buffer size while not buffering", func(c *Config) {
			off := false
			c.Domains[1].RequestBuffering, c.Domains[1].RequestBuffer = &off, 4*KiB
		}, []string{"domains[1] (www).request_buffer: applies only with request_buffering true (false streams bodies unbuffered), got 4KiB"}},
		{"total under a domain's buffer", func(c *Config) {
			c.MaxBufferedBytes = 2 * MiB
			c.Domains[1].RequestBuffer = 4 * MiB
		}, []string{"max_buffered_bytes: must be at least domains[1] (www).request_buffer (4MiB), got 2MiB"}},
		{"total under the top-level buffer", func(c *Config) { c.MaxBufferedBytes = 512 * KiB },
			[]string{"max_buffered_bytes: must be at least request_buffer (1MiB), got 512KiB"}},
	}
	for _, tt := range tests {
		cfg := validConfig()
		tt.mutate(&cfg)
		_, err := Compile(cfg)
		if err == nil {
			t.Errorf("%s: Compile = nil, want %q", tt.name, tt.want)
			continue
		}
		got := errorLines(t, err)
		slices.Sort(got)
		want := slices.Sorted(slices.Values(tt.want))
		if !slices.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", tt.name, got, want)
		}
	}
}
