// Package config reads edge's configuration: YAML, and the environment
// variables that override its secrets, decoded into a rules.Config and
// compiled into a rules.Table. Its problems are worded for the person who
// wrote the file: each names the path and the value
// ("domains[0].rules[1].period: a duration needs a unit, such as 30s or 1m;
// got 60"), a YAML syntax error quotes its line, every problem of a file
// is reported at once, and no message shows a secret's value.
//
// The package keeps no state and reads no clock: its functions are safe
// for concurrent use. The only environment it reads is EDGE_ADMIN_TOKEN
// and EDGE_CHECK_TOKEN (see Parse).
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/edgerate/edge/configs"
	"github.com/edgerate/edge/rules"
	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v4"

	"github.com/edgerate/edge/internal/yamlkind"
)

// Load reads and compiles the configuration at path, or the embedded
// default (configs.Default) when path is empty, and returns it with the
// content's Hash. Unknown keys, type mismatches and every validation
// problem are errors; the returned error lists them all (rules.Problems
// splits it), and the table is then nil. A file that cannot be read is
// an error prefixed "reading config: ".
func Load(path string) (*rules.Table, string, error) {
	data, err := Read(path)
	if err != nil {
		return nil, "", err
	}
	t, err := Parse(data)
	return t, Hash(data), err
}

// Read returns the bytes of the configuration at path, or of the embedded
// default when path is empty. Its error is prefixed "reading config: ".
func Read(path string) ([]byte, error) {
	if path == "" {
		return configs.Default, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return data, nil
}

// Hash identifies configuration bytes: the hex SHA-256 of data, which
// edge reports as the running configuration's hash and a reload compares
// to tell whether a file really changed.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Parse decodes YAML into a rules.Config with viper and compiles it. It
// returns either the table or an error, never both. It reports every
// problem at once: those that keep a value from decoding
// (unknown keys, values of the wrong type) and the validation problems of
// every other field. A field that failed to decode is reported once; no
// validation problem is reported for it, for anything under it, or for the
// section that holds it (a domain whose respond failed to decode is not
// also said to have no upstream).
//
// A non-empty EDGE_CHECK_TOKEN replaces the check section's token, as
// EDGE_ADMIN_TOKEN stands for admin_token (which the caller reads when it
// needs it): the secrets need not be in the file. The values of both are
// secrets wherever the file copies them.
//
// Every problem passes through the file's secrets (see fileSecrets) on its
// way out, so that no message shows a secret's value wherever the file
// puts it: on a line the YAML parser quotes, or copied by an alias into a
// key whose problem names its value.
func Parse(data []byte) (*rules.Table, error) {
	secrets := newFileSecrets(data)
	settings, err := readYAML(data, secrets)
	if err != nil {
		return nil, secrets.RedactError(err)
	}
	v := viper.New()
	if err := v.MergeConfigMap(settings); err != nil {
		return nil, secrets.RedactError(err)
	}
	var cfg rules.Config
	err = v.UnmarshalExact(&cfg, func(c *mapstructure.DecoderConfig) {
		c.DecodeHook = mapstructure.ComposeDecodeHookFunc(
			shapeHook,
			durationHook,
			sizeHook,
			wholeNumberHook,
			// A single string where a list is expected is a list of one
			// (`key: ip`), never split on commas.
			mapstructure.StringToSliceHookFunc("\x00"),
		)
	})
	errs, failed := decodeErrors(err)
	failed = append(failed, pointerAncestors(failed)...)
	cfg.Given = givenPaths(v.AllSettings())
	cfg.Secrets = secrets.Secrets
	table, err := rules.Compile(cfg)
	if err == nil && len(errs) == 0 {
		if v := os.Getenv("EDGE_CHECK_TOKEN"); v != "" && table.Check != nil { // one of secretEnv
			table.Check.Token = v // as EDGE_ADMIN_TOKEN: the secret need not be in the file
		}
		return table, nil
	}
	if err != nil {
		for _, e := range rules.Problems(err) {
			var fe *rules.FieldError
			if errors.As(e, &fe) && followsFailure(fe.Path, failed) {
				continue
			}
			errs = append(errs, e)
		}
	}
	return nil, secrets.RedactError(errors.Join(errs...))
}

// readYAML parses data and returns its top-level mapping (empty for an
// empty file). Its errors are ones a person can act on: a syntax error
// gives the line and column the parser reports and quotes that line, and a
// file that is not a mapping says what it is. It adds the file's secrets
// to secrets: from its node tree, or from its lines when it does not parse.
func readYAML(data []byte, secrets fileSecrets) (map[string]any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		lineSecrets(secrets, data)
		return nil, yamlError(data, secrets, err)
	}
	treeSecrets(secrets.Secrets, &doc)
	settings := map[string]any{}
	if len(doc.Content) == 0 {
		return settings, nil // empty, or only comments
	}
	root := doc.Content[0]
	switch {
	case root.Kind == yaml.ScalarNode && root.Tag == "!!null":
		return settings, nil
	case root.Kind != yaml.MappingNode:
		return nil, fmt.Errorf("the file must be a mapping of settings; it is %s", yamlkind.Of(root))
	}
	if err := root.Decode(&settings); err != nil {
		return nil, yamlError(data, secrets, err) // a key given twice, say
	}
	return settings, nil
}

// yamlError rewrites the YAML parser's errors as
//
//	yaml: line 3, column 4: did not find expected '-' indicator (while ...)
//	    3 |    origin: x
//	      |    ^
func yamlError(data []byte, secrets fileSecrets, err error) error {
	var many *yaml.LoadErrors
	if errors.As(err, &many) {
		var out []error
		for _, le := range many.Errors {
			out = append(out, loadError(data, secrets, le))
		}
		return errors.Join(out...)
	}
	var le *yaml.LoadError
	if errors.As(err, &le) {
		return loadError(data, secrets, le)
	}
	return fmt.Errorf("yaml: %s", strings.TrimPrefix(err.Error(), "yaml: "))
}

func loadError(data []byte, secrets fileSecrets, le *yaml.LoadError) error {
	var b strings.Builder
	at := le.Mark
	if at.Line > 0 {
		fmt.Fprintf(&b, "yaml: line %d, column %d: %s", at.Line, at.Column, le.Message)
	} else {
		fmt.Fprintf(&b, "yaml: %s", le.Message)
	}
	if line := []rune(fileLine(data, at.Line)); at.Column >= 1 && at.Column <= len(line) && line[at.Column-1] == '\t' {
		b.WriteString(" (a tab: YAML indents with spaces)")
	}
	ctx := le.ContextMark
	if le.ContextMsg != "" && ctx.Line > 0 && ctx != at {
		fmt.Fprintf(&b, " (%s at line %d, column %d)", le.ContextMsg, ctx.Line, ctx.Column)
	}
	// Quote the line the problem is on. When that is blank, as at the end
	// of the file after an unclosed quote or bracket, quote the line where
	// the construct began, or else the last line with text before it.
	if line := fileLine(data, at.Line); strings.TrimSpace(line) != "" {
		quoteLine(&b, secrets, line, at.Line, at.Column)
	} else if line := fileLine(data, ctx.Line); le.ContextMsg != "" && strings.TrimSpace(line) != "" {
		quoteLine(&b, secrets, line, ctx.Line, ctx.Column)
	} else {
		for n := at.Line - 1; n > 0; n-- {
			if line := fileLine(data, n); strings.TrimSpace(line) != "" {
				quoteLine(&b, secrets, line, n, utf8.RuneCountInString(line)+1)
				break
			}
		}
	}
	return errors.New(b.String())
}

// fileLine returns line n (1-based) of data, or "" when it has none.
func fileLine(data []byte, n int) string {
	lines := strings.Split(string(data), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return strings.TrimSuffix(lines[n-1], "\r")
}

// secretOnLine finds a secret's key on a quoted line; what follows it is
// not shown.
var secretOnLine = regexp.MustCompile(`(?i)\b[a-z0-9_]*(password|token|secret)["']?\s*:`)

// quoteLine appends the file's line n, indented below the message, with a
// caret under column col (1-based, in characters). Control characters are
// shown as '?', a long line only around col, and as [redacted]: whatever
// follows a secret's key, a line that may continue a secret's value
// (secrets.hidden), and any secret's value. Secrets are replaced before
// the line is cut to fit, so that no part of one shows.
func quoteLine(b *strings.Builder, secrets fileSecrets, line string, n, col int) {
	runes := []rune(line)
	caret := min(max(col-1, 0), len(runes))
	if secrets.hidden[n] {
		text := strings.TrimLeft(line, " \t")
		line = line[:len(line)-len(text)] + string(rules.Redacted)
	} else if loc := secretOnLine.FindStringIndex(line); loc != nil {
		line = line[:loc[1]] + " " + string(rules.Redacted)
	}
	caret = utf8.RuneCountInString(secrets.Redact(string(runes[:caret])))
	runes = []rune(secrets.Redact(line))
	caret = min(caret, len(runes))
	const window = 60 // characters either side of the caret on a long line
	start, end := 0, len(runes)
	if len(runes) > 2*window {
		start, end = max(caret-window, 0), min(caret+window, len(runes))
	}
	var text, under strings.Builder
	if start > 0 {
		text.WriteString("...")
		under.WriteString("   ")
	}
	for i := start; i < end; i++ {
		r := runes[i]
		switch {
		case r == '\t':
		case r < 0x20 || r == 0x7f || r == utf8.RuneError:
			r = '?'
		}
		text.WriteRune(r)
		if i < caret {
			if r == '\t' {
				under.WriteByte('\t')
			} else {
				under.WriteByte(' ')
			}
		}
	}
	if end < len(runes) {
		text.WriteString("...")
	}
	num := strconv.Itoa(n)
	fmt.Fprintf(b, "\n    %s | %s\n    %s | %s^", num, text.String(), strings.Repeat(" ", len(num)), under.String())
}

// givenPaths returns the path of every key of settings that has a value,
// spelled as in errors ("domains[0].rules[0].limit"), for rules.Config.Given.
func givenPaths(settings map[string]any) map[string]bool {
	given := map[string]bool{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case nil:
			return
		case map[string]any:
			for k, e := range v {
				if e == nil {
					continue
				}
				p := k
				if path != "" {
					p = path + "." + k
				}
				given[p] = true
				walk(p, e)
			}
		case []any:
			for i, e := range v {
				if e != nil {
					p := path + "[" + strconv.Itoa(i) + "]"
					given[p] = true
					walk(p, e)
				}
			}
		}
	}
	walk("", settings)
	return given
}

// followsFailure reports whether a validation problem at path is a
// consequence of a field that failed to decode: it is that field, under
// it, or the section that holds it.
func followsFailure(path string, failed []string) bool {
	for _, f := range failed {
		if path == f || strings.HasPrefix(path, f+".") || strings.HasPrefix(path, f+"[") || path == parentPath(f) {
			return true
		}
	}
	return false
}

// pointerAncestors returns the optional sections (pointer fields, such as
// a domain's respond) that hold a failed path: mapstructure leaves such a
// section nil when anything in it fails, so it failed as a whole.
func pointerAncestors(failed []string) []string {
	var out []string
	for _, f := range failed {
		t := reflect.TypeFor[rules.Config]()
		for i := 0; i < len(f); {
			// The next segment: ".name", "name" or "[n]".
			j := strings.IndexAny(f[i+1:], ".[")
			end := len(f)
			if j >= 0 {
				end = i + 1 + j
			}
			seg := strings.TrimPrefix(f[i:end], ".")
			switch {
			case t.Kind() == reflect.Slice && strings.HasPrefix(seg, "["):
				t = t.Elem()
			case t.Kind() == reflect.Struct:
				field, ok := fieldByKey(t, seg)
				if !ok {
					end = len(f) // an unknown key: nothing more to learn
					break
				}
				t = field.Type
				if t.Kind() == reflect.Pointer {
					t = t.Elem()
					if end < len(f) {
						out = append(out, f[:end])
					}
				}
			default:
				end = len(f)
			}
			i = end
		}
	}
	return out
}

// fieldByKey returns the field of struct type t whose config key is key.
func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		if f := t.Field(i); strings.Split(f.Tag.Get("mapstructure"), ",")[0] == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// parentPath returns the path of the section holding path: "domains[0]"
// for "domains[0].respond", "domains[0].hosts" for "domains[0].hosts[1]".
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i <= 0 {
		return ""
	}
	return path[:i]
}

var durationType = reflect.TypeFor[time.Duration]()

// shapeHook refuses a value of the wrong shape for a mapping (a struct, or
// a pointer to one) or a list, naming what it is rather than a Go type.
func shapeHook(_, to reflect.Type, data any) (any, error) {
	if to.Kind() == reflect.Pointer {
		to = to.Elem()
	}
	_, isMap := data.(map[string]any)
	_, isList := data.([]any)
	switch {
	case to.Kind() == reflect.Struct && !isMap:
		return nil, fmt.Errorf("must be a mapping, got %s", describeValue(data))
	case to.Kind() == reflect.Slice && isMap,
		// A list of mappings is never a single value (a list of strings
		// may be: `key: ip`).
		to.Kind() == reflect.Slice && !isList && to.Elem().Kind() == reflect.Struct:
		return nil, fmt.Errorf("must be a list, got %s", describeValue(data))
	}
	return data, nil
}

// durationHook decodes durations from strings with a unit, such as "1m30s".
// A bare number is refused, whatever its type (30, 1.5, "30"), since its
// unit would be a guess; 0 needs no unit.
func durationHook(_, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	var bare string
	switch v := data.(type) {
	case string:
		d, err := time.ParseDuration(v)
		if err == nil {
			return d, nil
		}
		if _, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
			return nil, fmt.Errorf("must be a duration such as 30s, 1m or 1h, got %q", v)
		}
		bare = strconv.Quote(v)
	case int, int64, uint64:
		if reflect.ValueOf(v).IsZero() {
			return time.Duration(0), nil
		}
		bare = fmt.Sprint(v)
	case float64:
		if v == 0 {
			return time.Duration(0), nil
		}
		bare = strconv.FormatFloat(v, 'g', -1, 64)
	default:
		return nil, fmt.Errorf("must be a duration such as 30s, 1m or 1h, got %s", describeValue(data))
	}
	return nil, fmt.Errorf("a duration needs a unit, such as 30s or 1m; got %s", bare)
}

// wholeNumberHook decodes integer keys, refusing what is not a whole
// number (10.5, true, "ten") rather than truncating or converting it.
func wholeNumberHook(_, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if to == durationType {
			return data, nil
		}
	default:
		return data, nil
	}
	switch v := data.(type) {
	case float64:
		if v != math.Trunc(v) {
			return nil, fmt.Errorf("must be a whole number, got %s", strconv.FormatFloat(v, 'g', -1, 64))
		}
		if v < math.MinInt64 || v >= math.MaxInt64 {
			return nil, fmt.Errorf("must be a whole number from %d to %d, got %s",
				math.MinInt64, math.MaxInt64, strconv.FormatFloat(v, 'g', -1, 64))
		}
		return int64(v), nil
	case uint64:
		if v > math.MaxInt64 {
			return nil, fmt.Errorf("must be a whole number from %d to %d, got %d", math.MinInt64, math.MaxInt64, v)
		}
		return int64(v), nil
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("must be a whole number, got %q", v)
		}
		return n, nil
	case bool:
		return nil, fmt.Errorf("must be a whole number, got %t", v)
	}
	return data, nil
}

// describeValue names a decoded YAML value for an error: a scalar as written, a
// list or mapping by its kind (it could be long, and hold anything).
func describeValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "nothing"
	case string:
		return strconv.Quote(v)
	case []any:
		return "a list"
	case map[string]any, map[any]any:
		return "a mapping"
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// decodeErrors rewrites mapstructure's decoding errors into edge's
// `path: message` form, naming the offending value (but no secret), one
// error per problem. It also returns the path of every field that failed
// to decode; an unknown key fails nothing.
func decodeErrors(err error) ([]error, []string) {
	var out []error
	var failed []string
	var walk func(error)
	walk = func(err error) {
		for _, err := range rules.Problems(err) {
			de, ok := err.(*mapstructure.DecodeError)
			if !ok {
				if inner := errors.Unwrap(err); inner != nil && hasDecodeError(inner) {
					walk(inner) // a wrapper around the list of problems
					continue
				}
				out = append(out, err) // e.g. "invalid keys: listen_port"
				continue
			}
			fe, unknown := decodeError(de)
			if !unknown && len(fe) == 1 {
				failed = append(failed, fe[0].(*rules.FieldError).Path)
			}
			out = append(out, fe...)
		}
	}
	if err != nil {
		walk(err)
	}
	return out, failed
}

// decodeError rewrites one mapstructure error: one error per unknown key
// (unknown is then true), or the field's path with a message naming the
// value.
func decodeError(de *mapstructure.DecodeError) (errs []error, unknown bool) {
	inner, name := de.Unwrap(), de.Name()
	if name == reflect.TypeFor[rules.Config]().String() {
		name = "" // mapstructure names the root by its Go type
	}
	if keys, ok := strings.CutPrefix(inner.Error(), "has invalid keys: "); ok {
		for _, k := range strings.Split(keys, ", ") {
			errs = append(errs, &rules.FieldError{Path: strings.TrimPrefix(name+"."+k, "."), Msg: "unknown key"})
		}
		return errs, true
	}
	secret := rules.IsSecret(name)
	value := func(v any) string {
		if secret {
			return string(rules.Redacted)
		}
		return describeValue(v)
	}
	var pe *mapstructure.ParseError
	var ue *mapstructure.UnconvertibleTypeError
	var msg string
	switch {
	case errors.As(inner, &pe):
		msg = fmt.Sprintf("must be %s, got %s", kindName(pe.Expected.Type()), value(pe.Value))
	case errors.As(inner, &ue):
		msg = fmt.Sprintf("must be %s, got %s", kindName(ue.Expected.Type()), value(ue.Value))
	case secret:
		msg = "is not valid: " + string(rules.Redacted)
	default:
		msg = inner.Error()
	}
	return []error{&rules.FieldError{Path: name, Msg: msg}}, false
}

func hasDecodeError(err error) bool {
	var de *mapstructure.DecodeError
	return errors.As(err, &de)
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32:
		return "a whole number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		return "a mapping"
	}
	return "a " + t.String()
}
