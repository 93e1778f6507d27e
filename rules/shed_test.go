package rules

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

// TestCompileShed: thresholds are the shares of max_in_flight, rounded
// down; sheddable_share defaults to the normal threshold.
func TestCompileShed(t *testing.T) {
	tests := []struct {
		name string
		shed ShedConfig
		want [3]int64 // by Class: normal, critical, sheddable
	}{
		{"docs/shedding.md's example", ShedConfig{MaxInFlight: 200, CriticalReserve: 0.2, SheddableShare: ptr(0.5)}, [3]int64{160, 200, 100}},
		{"no reserve, default share", ShedConfig{MaxInFlight: 10}, [3]int64{10, 10, 10}},
		{"rounded down", ShedConfig{MaxInFlight: 7, CriticalReserve: 0.25, SheddableShare: ptr(0.3)}, [3]int64{5, 7, 2}},
		{"share at the bound", ShedConfig{MaxInFlight: 10, CriticalReserve: 0.3, SheddableShare: ptr(0.7)}, [3]int64{7, 10, 7}},
		{"nothing sheddable", ShedConfig{MaxInFlight: 1, SheddableShare: ptr(0.0)}, [3]int64{1, 1, 0}},
		{"all reserved", ShedConfig{MaxInFlight: 4, CriticalReserve: 1}, [3]int64{0, 4, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.Domains[0].Shed = &tt.shed
			tab, err := Compile(cfg)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			if got := tab.Domains[0].Shed.Limits; got != tt.want {
				t.Errorf("got limits %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCompileShedErrors: each invalid value is reported at its path.
func TestCompileShedErrors(t *testing.T) {
	ok := ShedConfig{MaxInFlight: 10}
	tests := []struct {
		name  string
		shed  *ShedConfig
		prios []PriorityConfig
		want  string // a substring of the error
	}{
		{"zero max", &ShedConfig{}, nil, "domains[0] (api).shed.max_in_flight: must be between 1 and 1000000, got 0"},
		{"huge max", &ShedConfig{MaxInFlight: 1_000_001}, nil, "shed.max_in_flight: must be between 1 and 1000000"},
		{"negative reserve", &ShedConfig{MaxInFlight: 1, CriticalReserve: -0.1}, nil, "shed.critical_reserve: must be between 0 and 1, got -0.1"},
		{"reserve over 1", &ShedConfig{MaxInFlight: 1, CriticalReserve: 1.5}, nil, "shed.critical_reserve: must be between 0 and 1"},
		{"share over 1", &ShedConfig{MaxInFlight: 1, SheddableShare: ptr(2.0)}, nil, "shed.sheddable_share: must be between 0 and 1, got 2"},
		{"share over the normal one", &ShedConfig{MaxInFlight: 1, CriticalReserve: 0.5, SheddableShare: ptr(0.6)}, nil,
			"shed.sheddable_share: must be at most 1 − critical_reserve (0.5), got 0.6"},
		{"priorities without shed", nil, []PriorityConfig{{Class: "critical"}}, "domains[0] (api).priorities: apply only with shed"},
		{"unknown class", &ok, []PriorityConfig{{Class: "urgent"}}, `priorities[0].class: must be normal, critical or sheddable, got "urgent"`},
		{"no class", &ok, []PriorityConfig{{}}, `priorities[0].class: must be normal, critical or sheddable, got ""`},
		{"relative path", &ok, []PriorityConfig{{Class: "normal", Match: PriorityMatch{PathPrefix: "v1"}}}, `priorities[0].match.path_prefix: must start with "/"`},
		{"bad method", &ok, []PriorityConfig{{Class: "normal", Match: PriorityMatch{Methods: []string{"G T"}}}}, `priorities[0].match.methods[0]: must be an HTTP method`},
		{"bad header", &ok, []PriorityConfig{{Class: "normal", Match: PriorityMatch{Headers: map[string]string{"x prio": "1"}}}}, `priorities[0].match.headers: must name headers`},
		{"bad host", &ok, []PriorityConfig{{Class: "normal", Match: PriorityMatch{Host: "a/b"}}}, `priorities[0].match.host: must be a host name`},
		{"wildcard host", &ok, []PriorityConfig{{Class: "normal", Match: PriorityMatch{Host: "*.example.com"}}}, `priorities[0].match.host: must be a host name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.Domains[0].Shed, cfg.Domains[0].Priorities = tt.shed, tt.prios
			_, err := Compile(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	t.Run("respond", func(t *testing.T) {
		cfg := validConfig()
		cfg.Domains[0].Origin, cfg.Origin = "", ""
		cfg.Domains[0].Respond = &ResponseConfig{Body: "x"}
		cfg.Domains[0].Shed = &ok
		if _, err := Compile(cfg); err == nil || !strings.Contains(err.Error(), "domains[0] (api).shed: applies only to a domain with an origin") {
			t.Errorf("got %v, want shed refused with respond", err)
		}
	})
}

// TestClassify: the first priority that matches gives the class; every
// part of a match must hold; unmatched requests are normal.
func TestClassify(t *testing.T) {
	cfg := validConfig()
	cfg.Domains[0].Shed = &ShedConfig{MaxInFlight: 10}
	cfg.Domains[0].Priorities = []PriorityConfig{
		{Match: PriorityMatch{PathPrefix: "/v1/charges", Methods: []string{"post"}}, Class: "critical"},
		{Match: PriorityMatch{Headers: map[string]string{"x-priority": "high"}}, Class: "critical"},
		{Match: PriorityMatch{Headers: map[string]string{"X-Test-Mode": ""}}, Class: "sheddable"},
		{Match: PriorityMatch{Host: "Batch.Example.com.", Methods: []string{"POST"}}, Class: "sheddable"},
		{Match: PriorityMatch{Methods: []string{"GET", "HEAD"}}, Class: "sheddable"},
	}
	tab, err := Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	s := tab.Domains[0].Shed
	tests := []struct {
		name, host, method, path string
		header                   http.Header
		want                     Class
	}{
		{"critical path and method", "api.example.com", "POST", "/v1/charges/ch_1", nil, ClassCritical},
		{"critical path, other method", "api.example.com", "DELETE", "/v1/charges/ch_1", nil, ClassNormal},
		{"GET of a critical path is sheddable", "api.example.com", "GET", "/v1/charges", nil, ClassSheddable},
		{"header before methods", "api.example.com", "GET", "/", http.Header{"X-Priority": {"low", "high"}}, ClassCritical},
		{"header value is exact", "api.example.com", "GET", "/", http.Header{"X-Priority": {"High"}}, ClassSheddable},
		{"header present, any value", "api.example.com", "POST", "/", http.Header{"X-Test-Mode": {""}}, ClassSheddable},
		{"host", "batch.example.com", "POST", "/x", nil, ClassSheddable},
		{"other host", "api.example.com", "POST", "/x", nil, ClassNormal},
		{"unmatched", "api.example.com", "PUT", "/x", nil, ClassNormal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.Classify(tt.host, tt.method, tt.path, tt.header); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	if got := s.Priorities[0].Methods; !slices.Equal(got, []string{"POST"}) {
		t.Errorf("methods %v, want upper-cased", got)
	}
}
