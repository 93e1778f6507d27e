package rules

import (
	"strings"
	"testing"
)

func TestCompileAccessLog(t *testing.T) {
	tr, f := true, false
	tests := []struct {
		name   string
		log    *AccessLogConfig
		domain *bool
		want   *AccessLog
		err    string
	}{
		{name: "none", log: nil},
		{name: "no path is no log", log: &AccessLogConfig{Format: "json"}},
		{name: "defaults", log: &AccessLogConfig{Path: "-"}, want: &AccessLog{Path: "-", Format: AccessLogCombined, RefusedSample: 1, Buffer: MiB}},
		{name: "json with keys", log: &AccessLogConfig{Path: "/var/log/a", Format: "json", Keys: true, RefusedSample: 10, Buffer: 64 * KiB},
			want: &AccessLog{Path: "/var/log/a", Format: AccessLogJSON, Keys: true, RefusedSample: 10, Buffer: 64 * KiB}},
		{name: "unknown format", log: &AccessLogConfig{Path: "-", Format: "clf"}, err: `access_log.format: must be combined or json, got "clf"`},
		{name: "sample too high", log: &AccessLogConfig{Path: "-", RefusedSample: 2_000_000}, err: "access_log.refused_sample: must be between 1"},
		{name: "negative sample", log: &AccessLogConfig{Path: "-", RefusedSample: -1}, err: "access_log.refused_sample: must be between 1"},
		{name: "small buffer", log: &AccessLogConfig{Path: "-", Buffer: 100}, err: "access_log.buffer: must be between 4KiB and 1GiB, got 100 bytes"},
		{name: "keys in combined", log: &AccessLogConfig{Path: "-", Keys: true}, err: "access_log.keys: needs format json"},
		{name: "domain off", log: &AccessLogConfig{Path: "-"}, domain: &f, want: &AccessLog{Path: "-", Format: AccessLogCombined, RefusedSample: 1, Buffer: MiB}},
		{name: "domain true", log: &AccessLogConfig{Path: "-"}, domain: &tr, err: "domains[0] (api).access_log: accepts only false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Origin: "http://127.0.0.1:9", AccessLog: tt.log,
				Domains: []DomainConfig{{Name: "api", Hosts: []string{"api.test"}, AccessLog: tt.domain}}}
			table, err := Compile(cfg)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %v, want an error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (table.AccessLog == nil) != (tt.want == nil) || tt.want != nil && *table.AccessLog != *tt.want {
				t.Errorf("got %+v, want %+v", table.AccessLog, tt.want)
			}
			if got := table.Domains[0].NoAccessLog; got != (tt.domain != nil) {
				t.Errorf("NoAccessLog: got %v", got)
			}
		})
	}
	// refused_sample written as 0 is out of range, not the default.
	_, err := Compile(Config{Origin: "http://127.0.0.1:9", AccessLog: &AccessLogConfig{Path: "-"}, Given: map[string]bool{"access_log.refused_sample": true},
		Domains: []DomainConfig{{Name: "api", Hosts: []string{"api.test"}}}})
	if err == nil || !strings.Contains(err.Error(), "access_log.refused_sample: must be between 1 (every refusal) and 1000000, got 0") {
		t.Errorf("refused_sample 0 given: got %v", err)
	}
}
