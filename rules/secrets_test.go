package rules

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestSecretsRedact: a secret of MinSecretBytes or more is replaced in any
// spelling a message gives it; a shorter one is never replaced, only named
// as weak.
func TestSecretsRedact(t *testing.T) {
	var s Secrets
	s.Add("admin_token", "hunter22")
	s.Add("check.token", "hunter22-long") // holds the other: replaced whole
	s.Add("cluster.redis.password", `pa"ss\wd`)
	s.Add("a_secret", "Line-one\nline-two\n")
	s.Add("pop_token", "abc") // weak
	s.Add("pop_token", "abc") // named once
	s.Add("empty_token", "")  // no secret
	tests := []struct{ in, want string }{
		{"got hunter22", "got [redacted]"},
		{"got hunter22-long!", "got [redacted]!"},
		{"host line-one", "host [redacted]"},
		{"host LINE-ONE", "host LINE-ONE"},       // only the spellings edge gives it
		{`got "pa\"ss\\wd"`, `got "[redacted]"`}, // as %q and JSON spell it
		{`got pa"ss\wd`, "got [redacted]"},
		{`got "Line-one\nline-two\n"`, `got "[redacted]"`},
		{"  2 |   line-two", "  2 |   [redacted]"},
		{"abc and hunter2", "abc and hunter2"},
	}
	for _, tt := range tests {
		if got := s.Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
	if got, want := s.Weak(), []string{"pop_token"}; !slices.Equal(got, want) {
		t.Errorf("Weak: got %q, want %q", got, want)
	}

	err := s.RedactError(errors.Join(&FieldError{Path: "log.level", Msg: `got "hunter22"`}, errors.New("yaml: hunter22")))
	var fe *FieldError
	if ps := Problems(err); len(ps) != 2 || !errors.As(ps[0], &fe) || fe.Msg != `got "[redacted]"` || ps[1].Error() != "yaml: [redacted]" {
		t.Errorf("RedactError: got %q, want two problems, the first a FieldError, without the secret", err)
	}
	var none *Secrets
	if got := none.Redact("hunter22"); got != "hunter22" || none.Weak() != nil || none.RedactError(nil) != nil {
		t.Errorf("a nil Secrets changed text or named a weak secret")
	}
	if strings.Contains(err.Error(), "hunter22") {
		t.Errorf("RedactError left the secret: %q", err)
	}
}
