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
