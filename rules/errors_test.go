package rules

import "testing"

func TestIsSecret(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"cluster.redis.password", true},
		{"admin_token", true},
		{"token", true},
		{"upstream.client_secret", true},
		{"cluster.redis.passwords[1]", false},
		{"cluster.redis.username", false},
		{"domains[0].rules[0].limit", false},
		{"tokenizer", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := IsSecret(tt.path); got != tt.want {
			t.Errorf("IsSecret(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

// TestProblemsMaskSecrets: a problem at a secret's path never shows the
// value, whatever the verb that formats it.
func TestProblemsMaskSecrets(t *testing.T) {
	tests := []struct {
		name, path, format string
		args               []any
		want               string
	}{
		{"quoted", "cluster.redis.password", "must be printable, got %q", []any{"AnotherSecret"},
			"cluster.redis.password: must be printable, got [redacted]"},
		{"plain", "admin_token", "must be at most %d bytes, got %v", []any{64, "AnotherSecret"},
			"admin_token: must be at most [redacted] bytes, got [redacted]"},
		{"not a secret", "pop", "got %q", []any{"fra1"}, `pop: got "fra1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p problems
			p.add(tt.path, tt.format, tt.args...)
			if got := p.err().Error(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestNameProblems: a problem's path, and the paths its message mentions,
// carry the names of the domains and rules they pass through, where those
// are known; the path itself stays as Config.Given spells it.
func TestNameProblems(t *testing.T) {
	cfg := Config{Domains: []DomainConfig{
		{Name: "api", Hosts: []string{"api.example.com"}, Rules: []RuleConfig{{Name: "all"}, {}, {Name: "not a label"}}},
		{Hosts: []string{"*.Example.com"}},
		{Name: "w w w"},
	}}
	tests := []struct {
		path, msg, want string
	}{
		{"domains[0].rules[0].limit", "must be at least 1, got 0", "domains[0] (api).rules[0] (all).limit: must be at least 1, got 0"},
		{"domains[0].rules[1].name", "required", "domains[0] (api).rules[1].name: required"},
		{"domains[0].rules[2].name", "bad", "domains[0] (api).rules[2].name: bad"},
		{"domains[1].hosts[0]", `"x" is already claimed by domains[0]`,
			`domains[1] (_.example.com).hosts[0]: "x" is already claimed by domains[0] (api)`},
		{"domains[2].name", "bad", "domains[2].name: bad"},
		{"domains[7].rules[3].limit", "bad", "domains[7].rules[3].limit: bad"},
		{"max_keys", "bad", "max_keys: bad"},
	}
	for _, tt := range tests {
		err := cfg.NameProblems(&FieldError{Path: tt.path, Msg: tt.msg})
		if got := err.Error(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
		if twice := cfg.NameProblems(err).Error(); twice != tt.want {
			t.Errorf("named twice: got %q, want %q", twice, tt.want)
		}
		if p := Problems(err); len(p) != 1 || p[0].(*FieldError).Path != tt.path {
			t.Errorf("Path of %q: got %v, want %q", tt.want, p, tt.path)
		}
	}
}
