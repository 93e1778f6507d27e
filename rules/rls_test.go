package rules

import (
	"strings"
	"testing"

	"github.com/edgerate/edge/internal/algorithm"
)

func TestCompileRLS(t *testing.T) {
	cfg := validConfig()
	cfg.RLS = RLSConfig{Listen: "127.0.0.1:8081", Config: []string{"ratelimit/*.yaml"}, ResponseHeaders: true, Algorithm: "fixed_window"}
	tab, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r := tab.RLS; r.Listen != "127.0.0.1:8081" || r.Algorithm != algorithm.FixedWindow || !r.ResponseHeaders || !r.Equal(r) {
		t.Errorf("got %+v", r)
	}
	cfg.RLS.Algorithm = ""
	if tab, err = Compile(cfg); err != nil || tab.RLS.Algorithm != algorithm.SlidingWindow {
		t.Errorf("default algorithm: got %v, %v; want sliding_window", tab, err)
	}
	if got := tab.RLS.MaxDescriptors; got != 64 {
		t.Errorf("default max_descriptors: got %d, want 64", got)
	}
	n := 2
	cfg.RLS.MaxDescriptors = &n
	if tab, err = Compile(cfg); err != nil || tab.RLS.MaxDescriptors != 2 {
		t.Errorf("max_descriptors 2: got %v, %v", tab.RLS.MaxDescriptors, err)
	}
}

func TestCompileRLSErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		rls  RLSConfig
		edit func(*Config)
		want string
	}{
		{"keys without listen", RLSConfig{Config: []string{"x.yaml"}, MergeDomains: true}, nil,
			"rls.config: needs rls.listen"},
		{"no files", RLSConfig{Listen: "127.0.0.1:8081"}, nil, "rls.config: required with rls.listen"},
		{"empty file name", RLSConfig{Listen: "127.0.0.1:8081", Config: []string{""}}, nil, "rls.config[0]: must be a file or a glob"},
		{"bad listen", RLSConfig{Listen: "8081", Config: []string{"x"}}, nil, "rls.listen: must be host:port"},
		{"same as listen", RLSConfig{Listen: "127.0.0.1:8080", Config: []string{"x"}}, func(c *Config) { c.Listen = "127.0.0.1:8080" },
			`rls.listen: must differ from listen ("127.0.0.1:8080")`},
		{"same port as admin_listen on every address", RLSConfig{Listen: ":8077", Config: []string{"x"}},
			func(c *Config) { c.AdminListen = "127.0.0.1:8077" }, `rls.listen: must differ from admin_listen ("127.0.0.1:8077")`},
		{"same as check.listen", RLSConfig{Listen: "127.0.0.1:8082", Config: []string{"x"}},
			func(c *Config) { c.Check = &CheckConfig{Listen: "127.0.0.1:8082"} }, `rls.listen: must differ from check.listen ("127.0.0.1:8082")`},
		{"bad algorithm", RLSConfig{Listen: "127.0.0.1:8081", Config: []string{"x"}, Algorithm: "token_bucket"}, nil,
			`rls.algorithm: must be sliding_window or fixed_window, got "token_bucket"`},
		{"fixed window batched", RLSConfig{Listen: "127.0.0.1:8081", Config: []string{"x"}, Algorithm: "fixed_window"},
			func(c *Config) {
				c.Cluster = ClusterConfig{Store: "redis", Sync: "batched", Redis: RedisConfig{Addresses: []string{"127.0.0.1:6379"}}}
			}, "rls.algorithm: fixed_window cannot be counted with cluster.sync batched"},
		{"max_descriptors zero", RLSConfig{Listen: "127.0.0.1:8081", Config: []string{"x"}, MaxDescriptors: ptr(0)}, nil,
			"rls.max_descriptors: must be between 1 and 10000, got 0"},
		{"max_descriptors negative", RLSConfig{Listen: "127.0.0.1:8081", Config: []string{"x"}, MaxDescriptors: ptr(-3)}, nil,
			"rls.max_descriptors: must be between 1 and 10000, got -3"},
		{"max_descriptors too many", RLSConfig{Listen: "127.0.0.1:8081", Config: []string{"x"}, MaxDescriptors: ptr(10_001)}, nil,
			"rls.max_descriptors: must be between 1 and 10000, got 10001"},
		{"max_descriptors without listen", RLSConfig{MaxDescriptors: ptr(8)}, nil,
			"rls.max_descriptors: needs rls.listen"},
		{"sync share", RLSConfig{Listen: "127.0.0.1:8081", Config: []string{"x"}},
			func(c *Config) { c.Cluster = ClusterConfig{Sync: "share", Nodes: 3} }, "rls.listen: not supported yet with cluster.sync share"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.RLS = tc.rls
			if tc.edit != nil {
				tc.edit(&cfg)
			}
			_, err := Compile(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestRLSOnly: with rls.listen set, domains may be left out; edge then
// binds no public listener (Table.Listen ""), and a listen set anyway is
// an error, as are no domains with a check section (the domains decide
// its questions) or without rls.
func TestRLSOnly(t *testing.T) {
	rlsOnly := RLSConfig{Listen: "127.0.0.1:8081", Config: []string{"ratelimit/*.yaml"}}
	tab, err := Compile(Config{RLS: rlsOnly, AdminListen: "127.0.0.1:8077"})
	if err != nil {
		t.Fatal(err)
	}
	if tab.Listen != "" || len(tab.Domains) != 0 || tab.AdminListen != "127.0.0.1:8077" || tab.RLS.Listen != "127.0.0.1:8081" {
		t.Errorf("got listen %q, %d domains, admin_listen %q, rls.listen %q; want no public listener",
			tab.Listen, len(tab.Domains), tab.AdminListen, tab.RLS.Listen)
	}
	// rls.listen may then take the port listen would have defaulted to.
	if _, err := Compile(Config{RLS: RLSConfig{Listen: ":8080", Config: []string{"x"}}}); err != nil {
		t.Errorf("rls on :8080 with no public listener: %v", err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"listen set", Config{RLS: rlsOnly, Listen: ":8080"},
			`listen: has no domain to serve: with rls and no domains edge binds no public listener; remove listen or add a domain, got ":8080"`},
		{"with check", Config{RLS: rlsOnly, Check: &CheckConfig{Listen: "127.0.0.1:8082"}}, "domains: required"},
		{"without rls", Config{}, "domains: required"},
		{"bad admin_listen", Config{RLS: rlsOnly, AdminListen: "8077"}, `admin_listen: must be host:port, got "8077"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}
