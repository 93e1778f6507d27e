package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/edgerate/edge/configs"
	"github.com/edgerate/edge/rules"
	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// loadConfig reads and compiles the configuration at path, or the embedded
// default when path is empty, and returns it with its content hash. Unknown
// keys, type mismatches and every validation problem are errors; the
// returned error lists them all.
func loadConfig(path string) (*rules.Table, string, error) {
	data, err := readConfig(path)
	if err != nil {
		return nil, "", err
	}
	t, err := parseConfig(data)
	return t, configHash(data), err
}

// readConfig returns the bytes of the configuration at path, or of the
// embedded default when path is empty.
func readConfig(path string) ([]byte, error) {
	if path == "" {
		return configs.Default, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return data, nil
}

// parseConfig decodes YAML into a rules.Config with viper and compiles it.
func parseConfig(data []byte) (*rules.Table, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("parsing config: %w", err)
	}
	var cfg rules.Config
	err := v.UnmarshalExact(&cfg, viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		durationHook, sizeHook,
		// A single string where a list is expected is a list of one
		// (`key: ip`), never split on commas.
		mapstructure.StringToSliceHookFunc("\x00"),
	)))
	if err != nil {
		return nil, decodeErrors(err)
	}
	return rules.Compile(cfg)
}

// durationHook decodes durations from strings such as "1m30s", naming the
// value when it is not one.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[time.Duration]() || from.Kind() != reflect.String {
		return data, nil
	}
	d, err := time.ParseDuration(data.(string))
	if err != nil {
		return nil, fmt.Errorf("must be a duration such as 30s, 1m or 1h, got %q", data)
	}
	return d, nil
}

// decodeErrors rewrites mapstructure's decoding errors into edge's
// `path: message` form, naming the offending value, one error per problem.
func decodeErrors(err error) error {
	var out []error
	var walk func(error)
	walk = func(err error) {
		for _, err := range leafErrors(err) {
			de, ok := err.(*mapstructure.DecodeError)
			if !ok {
				if inner := errors.Unwrap(err); inner != nil && hasDecodeError(inner) {
					walk(inner) // a wrapper around the list of problems
					continue
				}
				out = append(out, err) // e.g. "invalid keys: listen_port"
				continue
			}
			out = append(out, decodeError(de)...)
		}
	}
	walk(err)
	return errors.Join(out...)
}

// decodeError rewrites one mapstructure error: one error per unknown key,
// or the field's path with a message naming the value.
func decodeError(de *mapstructure.DecodeError) []error {
	inner, name := de.Unwrap(), de.Name()
	if name == reflect.TypeFor[rules.Config]().String() {
		name = "" // mapstructure names the root by its Go type
	}
	if keys, ok := strings.CutPrefix(inner.Error(), "has invalid keys: "); ok {
		var out []error
		for _, k := range strings.Split(keys, ", ") {
			out = append(out, fmt.Errorf("%s: unknown key", strings.TrimPrefix(name+"."+k, ".")))
		}
		return out
	}
	var pe *mapstructure.ParseError
	var ue *mapstructure.UnconvertibleTypeError
	switch {
	case errors.As(inner, &pe):
		inner = fmt.Errorf("must be %s, got %q", kindName(pe.Expected.Type()), fmt.Sprint(pe.Value))
	case errors.As(inner, &ue):
		inner = fmt.Errorf("must be %s, got %v", kindName(ue.Expected.Type()), ue.Value)
	}
	return []error{fmt.Errorf("%s: %w", name, inner)}
}

func hasDecodeError(err error) bool {
	var de *mapstructure.DecodeError
	return errors.As(err, &de)
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32:
		return "an integer"
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
