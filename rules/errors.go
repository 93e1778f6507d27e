package rules

import (
	"errors"
	"fmt"
	"strconv"
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
	// Where is Path as the Error text shows it, with the names of the
	// domain and rule it passes through ("domains[0] (api).rules[1]
	// (login).period", see [Config.NameProblems]); "" shows Path.
	Where string
}

// Error returns "path: message", the path as Where shows it.
func (e *FieldError) Error() string {
	if e.Where != "" {
		return e.Where + ": " + e.Msg
	}
	return e.Path + ": " + e.Msg
}

// NameProblems returns err with the names of cfg's domains and rules beside
// their indexes wherever its problems mention them: in each [FieldError]'s
// Where and Msg, "domains[0].rules[1].limit" reads "domains[0]
// (api).rules[1] (login).limit". A domain's name is its name key or, left
// out, the default from hosts[0]; a name that is not a valid label, or
// whose key failed to decode (cfg.Given has it but the value is empty), is
// not shown. A mention already followed by its name is left as it is, so
// that NameProblems may be applied twice. Other errors are kept as they
// are; the result joins the problems (errors.Join) even when there is one.
func (cfg Config) NameProblems(err error) error {
	if err == nil {
		return nil
	}
	var out []error
	for _, e := range Problems(err) {
		var fe *FieldError
		if errors.As(e, &fe) && fe.Error() == e.Error() {
			where := fe.Where
			if where == "" {
				where = fe.Path
			}
			out = append(out, &FieldError{Path: fe.Path, Msg: cfg.nameMentions(fe.Msg), Where: cfg.nameMentions(where)})
			continue
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

// nameMentions writes the names of cfg's domains and rules after each
// "domains[i]" and "domains[i].rules[j]" in text that is not already so
// followed.
func (cfg Config) nameMentions(text string) string {
	const domains, rules = "domains[", ".rules["
	var b strings.Builder
	for {
		i := strings.Index(text, domains)
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		b.WriteString(text[:i+len(domains)])
		text = text[i+len(domains):]
		d, n := leadingIndex(text)
		if n == 0 {
			continue
		}
		b.WriteString(text[:n])
		text = text[n:]
		if name := cfg.domainName(d); name != "" && !strings.HasPrefix(text, " (") {
			b.WriteString(" (" + name + ")")
		}
		if !strings.HasPrefix(text, rules) {
			continue
		}
		b.WriteString(rules)
		text = text[len(rules):]
		r, n := leadingIndex(text)
		if n == 0 {
			continue
		}
		b.WriteString(text[:n])
		text = text[n:]
		if name := cfg.ruleName(d, r); name != "" && !strings.HasPrefix(text, " (") {
			b.WriteString(" (" + name + ")")
		}
	}
}

// leadingIndex parses the "N]" text starts with, returning N and the
// length of "N]", or 0 when text does not start so.
func leadingIndex(text string) (index, n int) {
	end := strings.IndexByte(text, ']')
	if end < 1 || end > 3 {
		return 0, 0 // at most 255 rules; domains past 999 go unnamed
	}
	i, err := strconv.Atoi(text[:end])
	if err != nil || i < 0 {
		return 0, 0
	}
	return i, end + 1
}

// domainName returns the name domains[i] goes by, or "" (see NameProblems).
func (cfg Config) domainName(i int) string {
	if i >= len(cfg.Domains) {
		return ""
	}
	dc := cfg.Domains[i]
	name := dc.Name
	if name == "" {
		if cfg.Given[fmt.Sprintf("domains[%d].name", i)] || len(dc.Hosts) == 0 {
			return ""
		}
		h, _, ok := parseConfigHost(&problems{}, "", dc.Hosts[0])
		if !ok {
			return ""
		}
		name = defaultDomainName(h)
	}
	if len(name) > maxLabelBytes || !isLabel(name) {
		return ""
	}
	return name
}

// ruleName returns the name of domains[d].rules[r], or "" (see NameProblems).
func (cfg Config) ruleName(d, r int) string {
	if d >= len(cfg.Domains) || r >= len(cfg.Domains[d].Rules) {
		return ""
	}
	name := cfg.Domains[d].Rules[r].Name
	if name == "" || len(name) > maxLabelBytes || !isLabel(name) {
		return ""
	}
	return name
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
	// readFile is Config.ReadFile; files, what it read (origintls.go).
	readFile func(name string) ([]byte, error)
	files    map[string]fileRead
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
	fe := &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)}
	for _, e := range p.list {
		// A top-level section every domain inherits is compiled with each
		// of them: its problems are reported once.
		if prev, ok := e.(*FieldError); ok && *prev == *fe {
			return
		}
	}
	p.list = append(p.list, fe)
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
