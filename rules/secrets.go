package rules

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
)

// MinSecretBytes is the length from which a secret is replaced by value in
// every message. A shorter one could match ordinary text (a word of a
// message, a number, a key), so it is hidden only where its key stands, and
// is weak (see [Secrets.Weak]).
const MinSecretBytes = 6

// Secrets are the secret values of one configuration (admin_token,
// check.token, cluster.redis.password, any key [IsSecret] names, a URL's
// password, the environment's overrides), so that any text leaving the
// loading of that configuration can be cleaned of them. The zero value and
// nil hold none. Add is not safe for concurrent use; once built, a Secrets
// may be read from any number of goroutines.
type Secrets struct {
	forms    []string // every way a message may spell a strong secret, longest first
	weak     []string // the paths of secrets shorter than MinSecretBytes
	replacer *strings.Replacer
}

// Add records value, the secret at path ("admin_token",
// "domains[0].origin", "EDGE_ADMIN_TOKEN"). An empty value is no secret.
func (s *Secrets) Add(path, value string) {
	if value == "" {
		return
	}
	if len(value) < MinSecretBytes {
		if !slices.Contains(s.weak, path) {
			s.weak = append(s.weak, path)
		}
		return
	}
	// A message may show the value as written, quoted by %q or by JSON
	// (a quote, a backslash, a control character escaped), in lower case
	// (a copy normalised as a host name), or a line of a value that spans
	// several.
	parts := []string{value}
	for _, line := range strings.Split(value, "\n") {
		if line = strings.TrimSpace(line); len(line) >= MinSecretBytes && line != value {
			parts = append(parts, line)
		}
	}
	for _, p := range parts {
		for _, f := range []string{p, quoted(strconv.Quote(p)), jsonString(p), strings.ToLower(p)} {
			if !slices.Contains(s.forms, f) {
				s.forms = append(s.forms, f)
			}
		}
	}
	// Longest first: strings.Replacer tries its pairs in order at each
	// position, so a secret that holds another is replaced whole.
	slices.SortStableFunc(s.forms, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(s.forms))
	for _, f := range s.forms {
		pairs = append(pairs, f, string(Redacted))
	}
	s.replacer = strings.NewReplacer(pairs...)
}

func quoted(q string) string { return q[1 : len(q)-1] }

func jsonString(v string) string {
	b, _ := json.Marshal(v) // a string always marshals
	return quoted(string(b))
}

// Weak returns the paths of the secrets too short to be replaced by value,
// in the order added, for a warning that names them (and not their values).
func (s *Secrets) Weak() []string {
	if s == nil {
		return nil
	}
	return s.weak
}

// Redact returns text with every secret of MinSecretBytes or more replaced
// by [Redacted].
func (s *Secrets) Redact(text string) string {
	if s == nil || s.replacer == nil {
		return text
	}
	return s.replacer.Replace(text)
}

// RedactError returns err with Redact applied to each of its problems
// ([Problems]), which it keeps apart: a [FieldError] stays one. nil stays
// nil.
func (s *Secrets) RedactError(err error) error {
	if err == nil || s == nil || s.replacer == nil {
		return err
	}
	var out []error
	for _, e := range Problems(err) {
		var fe *FieldError
		if errors.As(e, &fe) && fe.Error() == e.Error() {
			out = append(out, &FieldError{Path: s.Redact(fe.Path), Msg: s.Redact(fe.Msg), Where: s.Redact(fe.Where)})
			continue
		}
		out = append(out, errors.New(s.Redact(e.Error())))
	}
	if len(out) == 1 {
		return out[0]
	}
	return errors.Join(out...)
}
