package rules

import (
	"errors"
	"fmt"
	"strings"
)

// FieldError is one problem in a [Config]. Path locates the field the way it
// is written in the config file ("domains[0].rules[1].period"), and Msg
// names the offending value, unless the path holds a secret (see
// [IsSecret]). Its Error text, "path: message", is stable enough for
// operators to grep for.
type FieldError struct {
	Path string
	Msg  string
}

// Error returns "path: message".
func (e *FieldError) Error() string {
	return e.Path + ": " + e.Msg
}

// Redacted stands in for a value that must not be shown: printed with any
// verb it reads "[redacted]".
const Redacted = redacted("[redacted]")

type redacted string

// Format prints "[redacted]" whatever the verb, so that %q does not quote it.
func (r redacted) Format(f fmt.State, _ rune) { f.Write([]byte(r)) }

// IsSecret reports whether the config key at path ("cluster.redis.password",
// "admin_token") holds a secret, a value no message may show: a key named
// password, token or secret, or ending in _password, _token or _secret.
func IsSecret(path string) bool {
	key := path[strings.LastIndexByte(path, '.')+1:]
	if i := strings.IndexByte(key, '['); i >= 0 {
		key = key[:i] // an element of a list of secrets
	}
	for _, s := range []string{"password", "token", "secret"} {
		if key == s || strings.HasSuffix(key, "_"+s) {
			return true
		}
	}
	return false
}

// problems collects every FieldError found while compiling, so that one run
// reports them all. given is Config.Given.
type problems struct {
	list  []error
	given map[string]bool
}

// add records a problem at path. At a secret's path every argument is
// replaced by [Redacted], so that no value written there reaches a message.
func (p *problems) add(path, format string, args ...any) {
	if IsSecret(path) {
		masked := make([]any, len(args))
		for i := range masked {
			masked[i] = Redacted
		}
		args = masked
	}
	p.list = append(p.list, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// missing records the problem of a required key whose value is zero: the
// key was left out ("required", with why when it depends on another key),
// or it was written with a zero value, which format and args describe.
func (p *problems) missing(path, why, format string, args ...any) {
	switch {
	case p.given[path]:
		p.add(path, format, args...)
	case why != "":
		p.add(path, "required %s", why)
	default:
		p.add(path, "required")
	}
}

func (p *problems) err() error {
	return errors.Join(p.list...)
}

// Problems lists the problems err joins (with errors.Join, at any depth),
// in order: the [FieldError]s of a Compile error, say. An error that joins
// nothing is its own one problem; a nil error has none.
func Problems(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, Problems(e)...)
	}
	return out
}

// ProblemText writes the problems of err one per line, each as "  - "
// and its text, as edge reports an invalid configuration.
func ProblemText(err error) string {
	var b strings.Builder
	for i, e := range Problems(err) {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("  - " + e.Error())
	}
	return b.String()
}
