package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/go-viper/mapstructure/v2"
)

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

// passiveHook decodes `passive: false` (and true) as the section with
// enabled set, so that the switch and the mapping are one key.
func passiveHook(_, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[*rules.PassiveConfig]() && to != reflect.TypeFor[rules.PassiveConfig]() {
		return data, nil
	}
	if b, ok := data.(bool); ok {
		return map[string]any{"enabled": b}, nil
	}
	return data, nil
}

// statusSpecHook decodes a status written as a YAML number (204) into its
// text, as a range ("200-399") is written.
func statusSpecHook(_, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[rules.StatusSpec]() {
		return data, nil
	}
	switch v := data.(type) {
	case int, int64, uint64:
		return fmt.Sprint(v), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	}
	return data, nil
}

// tlsVersionHook decodes a TLS version written as a YAML number
// (min_version: 1.2) into its text, as if it had been quoted.
func tlsVersionHook(_, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[rules.TLSVersion]() {
		return data, nil
	}
	switch v := data.(type) {
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case int, int64, uint64:
		return fmt.Sprint(v), nil
	}
	return data, nil
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
