package config

import (
	"encoding"
	"errors"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"github.com/edgerate/edge/rules"
)

// envPrefix begins the name of every environment variable that gives a
// setting: EDGE_ and the setting's path in upper case, with _ for each
// dot (admin_listen is EDGE_ADMIN_LISTEN, cluster.redis.password
// EDGE_CLUSTER_REDIS_PASSWORD).
const envPrefix = "EDGE_"

// envKind is what an environment variable's name stands for.
type envKind int

const (
	envSetting  envKind = iota // a scalar: the variable's value as written
	envList                    // a list of scalars: comma-separated
	envSection                 // a mapping of settings: not a setting itself
	envFileOnly                // a list of mappings (domains): only the file gives it
)

// envName is one name of the schema: a setting, a section or a key only
// the file gives.
type envName struct {
	name, path string
	kind       envKind
	// first is a section's first setting, for a warning that names one;
	// what says what a key only the file gives is ("a list of mappings").
	first, what string
	// optional: a section that is there only when given (check), not
	// always (timeouts).
	optional bool
}

// envNames lists every name of rules.Config, in the schema's order. Key
// paths hold underscores of their own (admin_listen, timeouts.read_header),
// so a variable's name is never split to find its key: each path's name is
// computed and looked up (envByName), and a test checks that no two paths
// share one.
var envNames = schemaNames(reflect.TypeFor[rules.Config](), "")

var envByName = func() map[string]envName {
	m := make(map[string]envName, len(envNames))
	for _, n := range envNames {
		m[n.name] = n
	}
	return m
}()

// schemaNames walks the mapstructure keys of struct type t, under path.
func schemaNames(t reflect.Type, path string) []envName {
	var out []envName
	for i := range t.NumField() {
		f := t.Field(i)
		key := strings.Split(f.Tag.Get("mapstructure"), ",")[0]
		if !f.IsExported() || key == "" || key == "-" {
			continue
		}
		p := key
		if path != "" {
			p = path + "." + key
		}
		n := envName{name: envPrefix + strings.ToUpper(strings.ReplaceAll(p, ".", "_")), path: p}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case isSection(ft):
			inner := schemaNames(ft, p)
			n.kind, n.optional = envSection, f.Type.Kind() == reflect.Pointer
			for _, s := range inner {
				if s.kind == envSetting || s.kind == envList {
					n.first = s.name
					break
				}
			}
			out = append(append(out, n), inner...)
			continue
		case ft.Kind() == reflect.Map:
			n.kind, n.what = envFileOnly, "a mapping"
		case ft.Kind() == reflect.Slice && (isSection(ft.Elem()) || ft.Elem().Kind() == reflect.Map):
			n.kind, n.what = envFileOnly, "a list of mappings"
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Slice:
			n.kind, n.what = envFileOnly, "a list of lists"
		case ft.Kind() == reflect.Slice:
			n.kind = envList
		}
		out = append(out, n)
	}
	return out
}

// isSection reports whether t (or what it points to) decodes from a
// mapping of keys: a struct that does not decode itself from text.
func isSection(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]())
}

// envSettings are the settings an environment gives.
type envSettings struct {
	// settings nest them as a file's mapping would: {"timeouts":
	// {"read": "5s"}}, a list as a list of strings.
	settings map[string]any
	// names are their variables by path: "timeouts.read" →
	// "EDGE_TIMEOUTS_READ".
	names map[string]string
}

// readEnv returns the settings env gives, a list of "NAME=value" as
// os.Environ returns it, and adds to secrets the value of each variable
// whose key is a secret ([rules.IsSecret]) and the password of any URL.
// A variable that names no setting is left out (EnvWarnings names it), and
// so is an empty one: an empty value is an unset variable. Of a name given
// twice the first counts, as os.Getenv reads it.
func readEnv(env []string, secrets *rules.Secrets) envSettings {
	out := envSettings{settings: map[string]any{}, names: map[string]string{}}
	seen := map[string]bool{}
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || seen[name] {
			continue
		}
		seen[name] = true
		n, known := envByName[name]
		if !known || value == "" || (n.kind != envSetting && n.kind != envList) {
			continue
		}
		if rules.IsSecret(n.path) {
			secrets.Add(name, value)
		}
		addURLPassword(secrets, name, value)
		var v any = value
		if n.kind == envList {
			var list []any
			for _, e := range strings.Split(value, ",") {
				list = append(list, strings.TrimSpace(e))
			}
			v = list
		}
		setPath(out.settings, strings.Split(n.path, "."), v)
		out.names[n.path] = name
	}
	return out
}

// sources returns where each setting the environment gave comes from,
// for rules.Config.Sources: "timeouts.read" → "env EDGE_TIMEOUTS_READ".
func (e envSettings) sources() map[string]string {
	if len(e.names) == 0 {
		return nil
	}
	out := make(map[string]string, len(e.names))
	for path, name := range e.names {
		out[path] = "env " + name
	}
	return out
}

// nameVariables returns err with the variable beside the path of each
// problem at a key the environment gave, or at an element of a list it
// gave: "EDGE_TIMEOUTS_READ (timeouts.read): ...". A problem in an
// optional section (check) that the file, whose keys are fileGiven, does
// not have says which variables give the section: it is there only for
// them. Other errors are kept as they are.
func (e envSettings) nameVariables(err error, fileGiven map[string]bool) error {
	if err == nil || len(e.names) == 0 {
		return err
	}
	var out []error
	for _, p := range rules.Problems(err) {
		var fe *rules.FieldError
		if !errors.As(p, &fe) || fe.Error() != p.Error() {
			out = append(out, p)
			continue
		}
		where, msg := fe.Where, fe.Msg
		if where == "" {
			where = fe.Path
		}
		key, _, _ := strings.Cut(fe.Path, "[")
		if name, ok := e.names[key]; ok {
			where = name + " (" + where + ")"
		} else if s, names := e.optionalSection(fe.Path); len(names) > 0 && !fileGiven[s] {
			msg += "; the file has no " + s + " section, " + strings.Join(names, " and ") + " gives it"
		}
		out = append(out, &rules.FieldError{Path: fe.Path, Msg: msg, Where: where})
	}
	return errors.Join(out...)
}

// optionalSection returns the optional section that holds path, and the
// variables of e that give keys in it, sorted.
func (e envSettings) optionalSection(path string) (string, []string) {
	for _, n := range envNames {
		if n.kind != envSection || !n.optional || !strings.HasPrefix(path, n.path+".") {
			continue
		}
		var names []string
		for p, name := range e.names {
			if strings.HasPrefix(p, n.path+".") {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		return n.path, names
	}
	return "", nil
}

// setPath sets the key at path of m to v, making the mappings on the way.
func setPath(m map[string]any, path []string, v any) {
	for _, k := range path[:len(path)-1] {
		inner, ok := m[k].(map[string]any)
		if !ok {
			inner = map[string]any{}
			m[k] = inner
		}
		m = inner
	}
	m[path[len(path)-1]] = v
}

// addURLPassword adds the password of value, if it is a URL with one, as
// the secret at path.
func addURLPassword(s *rules.Secrets, path, value string) {
	if !strings.Contains(value, "@") {
		return
	}
	if u, err := url.Parse(value); err == nil && u.User != nil {
		pw, _ := u.User.Password()
		s.Add(path, pw)
	}
}

// EnvWarnings returns a warning for each variable of env, a list of
// "NAME=value" as os.Environ returns it, whose name begins with EDGE_
// but names no setting: a misspelt name, a section (EDGE_TIMEOUTS), or a
// key only the file gives, a list of mappings such as domains
// (EDGE_DOMAINS). Such a variable is ignored; it is no error. The
// warnings name variables, never their values, in env's order.
func EnvWarnings(env []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || seen[name] {
			continue
		}
		seen[name] = true
		n, known := envByName[name]
		switch {
		case !known:
			msg := name + ": names no setting; ignored"
			if i := slices.IndexFunc(envNames, func(f envName) bool {
				return f.kind == envFileOnly && strings.HasPrefix(name, f.name+"_")
			}); i >= 0 {
				f := envNames[i]
				msg = name + ": names no setting (" + f.path + " is " + f.what + ", which only the file gives); ignored"
			}
			out = append(out, msg)
		case n.kind == envSection:
			out = append(out, name+": names the section "+n.path+", not a setting: give each of its settings (such as "+n.first+"); ignored")
		case n.kind == envFileOnly:
			out = append(out, name+": "+n.path+" is "+n.what+", which only the file gives; ignored")
		}
	}
	return out
}
