package proxy

import (
	"encoding"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// configKeys returns the path of every key of the configuration file, as
// settings writes them: the mapstructure tags of rules.Config, nested
// mappings joined by ".", list elements as "[]". A mapping (a struct with
// tagged fields, or a pointer to one) is not a key of its own; its keys
// are. An exported field without a tag is reported as "?Name".
func configKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if slices.Contains(strings.Split(opts, ","), "squash") {
			out = append(out, configKeys(deref(f.Type), prefix)...)
			continue
		}
		if tag == "" || tag == "-" {
			if tag == "" {
				out = append(out, prefix+"?"+f.Name)
			}
			continue
		}
		key := prefix + tag
		ft := deref(f.Type)
		switch {
		case isMapping(ft):
			out = append(out, configKeys(ft, key+".")...)
		case ft.Kind() == reflect.Slice && isMapping(deref(ft.Elem())):
			out = append(out, configKeys(deref(ft.Elem()), key+"[].")...)
		default:
			out = append(out, key)
		}
	}
	return out
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// isMapping reports whether t is decoded from a YAML mapping of keys: a
// struct with at least one tagged field that does not decode itself from
// text.
func isMapping(t reflect.Type) bool {
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
		return false
	}
	for i := range t.NumField() {
		if _, ok := t.Field(i).Tag.Lookup("mapstructure"); ok {
			return true
		}
	}
	return false
}

// TestEverySettingIsClassified: every key of the configuration file is in
// settings, once, as taking effect on reload or at a restart, and settings
// names no key the file does not have.
func TestEverySettingIsClassified(t *testing.T) {
	keys := configKeys(reflect.TypeFor[rules.Config](), "")
	if len(keys) < 40 {
		t.Fatalf("found %d keys in rules.Config, want the whole schema: %v", len(keys), keys)
	}
	classified := map[string]int{}
	for _, s := range settings {
		classified[s.key]++
		switch {
		case classified[s.key] == 2:
			t.Errorf("settings in proxy/reload.go lists %q twice", s.key)
		case s.restart && s.value == nil:
			t.Errorf("settings lists %q as needing a restart but gives no value func to compare it", s.key)
		case !s.restart && s.value != nil:
			t.Errorf("settings lists %q as taking effect on reload but gives a value func", s.key)
		}
	}
	for _, k := range keys {
		if name, ok := strings.CutPrefix(k, "?"); ok {
			t.Errorf("rules.Config field %s has no mapstructure tag, so its key is not its documented name", name)
			continue
		}
		if classified[k] == 0 {
			t.Errorf("configuration key %q is not classified: add it to settings in proxy/reload.go, "+
				"as reloads(%q) if a reload applies it, or as restarts(%q, func(t *rules.Table) any { ... }) "+
				"if it takes effect only at a restart (and then to docs/configuration.md's list and to TestReloadRestartRequired in cmd/edge)",
				k, k, k)
		}
	}
	for _, s := range settings {
		if !slices.Contains(keys, s.key) {
			t.Errorf("settings in proxy/reload.go lists %q, which is not a key of rules.Config", s.key)
		}
	}
}

// TestRestartRequiredStaysUntilRestart: a restart setting changed by a
// reload stays listed by every later reload until the file sets it back,
// because the running value is still the one edge started with; settings
// that a reload applies are never listed.
func TestRestartRequiredStaysUntilRestart(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	base := func(limit int) rules.Config {
		cfg := oneDomain(origin.URL, rule("per-ip", limit, time.Minute))
		cfg.Listen, cfg.AdminListen = "127.0.0.1:8001", "127.0.0.1:9001"
		return cfg
	}
	e := newEnv(t, base(5))
	steps := []struct {
		name string
		cfg  func() rules.Config
		want []string
	}{
		{"listen and log.format changed", func() rules.Config {
			c := base(5)
			c.Listen, c.Log.Format = "127.0.0.1:8002", "json"
			return c
		}, []string{"listen", "log.format"}},
		{"only a limit changed since", func() rules.Config {
			c := base(6)
			c.Listen, c.Log.Format = "127.0.0.1:8002", "json"
			return c
		}, []string{"listen", "log.format"}},
		{"listen set back", func() rules.Config {
			c := base(6)
			c.Log.Format = "json"
			return c
		}, []string{"log.format"}},
		{"reloadable settings only", func() rules.Config {
			c := base(7)
			c.AdminToken, c.AdminHosts, c.Log.Level = "t", []string{"edge.internal"}, "debug"
			c.Timeouts.Upstream, c.Timeouts.Shutdown, c.Timeouts.DrainDelay = time.Second, time.Second, time.Second
			c.MaxKeys, c.ClientIP.IPv6Prefix = 500, 48
			return c
		}, nil},
		{"default written out is no change", func() rules.Config {
			c := base(7)
			c.Timeouts.ReadHeader, c.Pop = rules.DefaultReadHeaderTimeout, rules.DefaultPop
			return c
		}, nil},
	}
	for _, s := range steps {
		res, err := e.proxy.Reload(compile(t, s.cfg()), s.name)
		if err != nil {
			t.Fatalf("%s: Reload: %v", s.name, err)
		}
		if got := res.RestartRequired; !slices.Equal(got, s.want) {
			t.Errorf("%s: restart_required got %q, want %q", s.name, got, s.want)
		}
		if got := e.proxy.Result().RestartRequired; !slices.Equal(got, s.want) {
			t.Errorf("%s: Result().RestartRequired got %q, want %q", s.name, got, s.want)
		}
		// /v1/config shows the listener edge runs, not the file's.
		w := httptest.NewRecorder()
		e.proxy.AdminHandler().ServeHTTP(w, httptest.NewRequest("GET", "/v1/config", nil))
		var v struct {
			Listen   string            `json:"listen"`
			Timeouts map[string]string `json:"timeouts"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
			t.Fatalf("%s: /v1/config: %v", s.name, err)
		}
		if v.Listen != "127.0.0.1:8001" {
			t.Errorf("%s: /v1/config listen got %q, want the running 127.0.0.1:8001", s.name, v.Listen)
		}
	}
}

// TestRLSOnlyReloadAddsDomains: edge started as the rate limit service
// alone binds no public listener; a reload that adds domains lists listen
// under restart_required (the public listener is bound at the next
// start), and one back to no domains lists nothing.
func TestRLSOnlyReloadAddsDomains(t *testing.T) {
	origin, _ := newOrigin(t, "a")
	rlsOnly := rules.Config{AdminListen: "127.0.0.1:9001",
		RLS: rules.RLSConfig{Listen: "127.0.0.1:8081", Config: []string{"ratelimit/*.yaml"}}}
	e := newEnv(t, rlsOnly)
	withDomain := oneDomain(origin.URL, rule("per-ip", 5, time.Minute))
	withDomain.AdminListen, withDomain.RLS = rlsOnly.AdminListen, rlsOnly.RLS
	for _, s := range []struct {
		name string
		cfg  rules.Config
		want []string
	}{
		{"a domain added", withDomain, []string{"listen"}},
		{"the domain removed", rlsOnly, nil},
	} {
		res, err := e.proxy.Reload(compile(t, s.cfg), s.name)
		if err != nil {
			t.Fatalf("%s: Reload: %v", s.name, err)
		}
		if got := res.RestartRequired; !slices.Equal(got, s.want) {
			t.Errorf("%s: restart_required got %q, want %q", s.name, got, s.want)
		}
	}
}
