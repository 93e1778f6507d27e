// Package config reads edge's configuration: YAML and the environment
// variables that give settings over it (EDGE_LISTEN, see ParseEnv),
// decoded into a rules.Config and compiled into a rules.Table. Its
// problems are worded for the person who wrote the file: each names the
// path, with the names of the domain and rule on it, and the value
// ("domains[0] (api).rules[1] (login).period: a duration needs a unit,
// such as 30s or 1m; got 60"), or the variable that gave it
// ("EDGE_TIMEOUTS_READ (timeouts.read): ..."), a YAML syntax error quotes
// its line, every problem of a file is reported at once, and no message
// shows a secret's value.
//
// The package keeps no state and reads no clock and no environment (the
// caller passes the environment in): its functions are safe for concurrent
// use.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/edgerate/edge/configs"
	"github.com/edgerate/edge/rules"
	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// Load reads and compiles the configuration at path, or the embedded
// default (configs.Default) when path is empty, and returns it with the
// content's Hash. Unknown keys, type mismatches and every validation
// problem are errors; the returned error lists them all (rules.Problems
// splits it), and the table is then nil but the hash is still the
// content's. A file that cannot be read is an error prefixed
// "reading config: ", with no hash. Load reads the file alone: it is
// LoadEnv with no environment.
func Load(path string) (*rules.Table, string, error) { return LoadEnv(path, nil) }

// LoadEnv is Load with the settings env gives over the file's (see
// ParseEnv). The hash is the file's content alone.
func LoadEnv(path string, env []string) (*rules.Table, string, error) {
	data, err := Read(path)
	if err != nil {
		return nil, "", err
	}
	t, err := ParseAt(path, data, env)
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
// problem at once: those that keep a value from decoding (unknown keys,
// values of the wrong type) and the validation problems of every other
// field. A field that failed to decode is reported once; no
// validation problem is reported for it, for anything under it, or for the
// section that holds it (a domain whose respond failed to decode is not
// also said to have no upstream).
//
// Every problem passes through the file's secrets (see fileSecrets) on its
// way out, so that no message shows a secret's value wherever the file
// puts it: on a line the YAML parser quotes, or copied by an alias into a
// key whose problem names its value.
//
// Parse reads the file alone: it is ParseEnv with no environment.
func Parse(data []byte) (*rules.Table, error) { return ParseEnv(data, nil) }

// ParseEnv is Parse with the settings env, a list of "NAME=value" as
// os.Environ returns it, gives over the file's. Every setting outside
// domains has a variable: EDGE_ and its path in upper case, with _
// for each dot (EDGE_LISTEN, EDGE_ADMIN_LISTEN,
// EDGE_CLUSTER_REDIS_PASSWORD). A variable's value is decoded as the
// file's would be, from text (durations, sizes, numbers and true or false
// as the file writes them), a list of strings comma-separated
// (EDGE_ADMIN_HOSTS=a.internal,b.internal); an empty variable is an unset
// one. A list of mappings (domains) only the file gives. A variable's key
// counts as given (rules.Config.Given), its problems name the variable
// beside the path ("EDGE_TIMEOUTS_READ (timeouts.read): ..."), the value
// of one whose key is a secret is a secret, and the table's Sources say
// which settings the environment gave. A variable that names no setting
// is ignored here; EnvWarnings names it.
func ParseEnv(data []byte, env []string) (*rules.Table, error) { return ParseAt("", data, env) }

// ParseAt is ParseEnv for the configuration read from path, whose
// directory the files it names (api_keys.file, origin_tls's) are relative to; "" is the
// working directory. The API key files are read as part of the
// configuration: one that cannot be read, or is not a mapping of API key
// to plan name, is a problem of the configuration, and a reload with it
// fails as with any other.
func ParseAt(path string, data []byte, env []string) (*rules.Table, error) {
	secrets := newFileSecrets(data)
	fromEnv := readEnv(env, secrets.Secrets)
	settings, err := readYAML(data, secrets)
	if err != nil {
		return nil, secrets.RedactError(err)
	}
	// The environment is merged over the file by viper, key by key, as
	// its own AutomaticEnv would, but from env rather than the process's:
	// viper reads the process's environment itself.
	v := viper.New()
	if err := v.MergeConfigMap(settings); err != nil {
		return nil, secrets.RedactError(err)
	}
	fileGiven := givenPaths(v.AllSettings())
	if err := v.MergeConfigMap(fromEnv.settings); err != nil {
		return nil, secrets.RedactError(err)
	}
	var cfg rules.Config
	err = v.UnmarshalExact(&cfg, func(c *mapstructure.DecoderConfig) {
		c.DecodeHook = mapstructure.ComposeDecodeHookFunc(
			passiveHook,
			statusSpecHook,
			shapeHook,
			durationHook,
			sizeHook,
			tlsVersionHook,
			wholeNumberHook,
			// A single string where a list is expected is a list of one
			// (`key: ip`), never split on commas.
			mapstructure.StringToSliceHookFunc("\x00"),
		)
	})
	errs, failed := decodeErrors(err)
	failed = append(failed, pointerAncestors(failed)...)
	errs = append(errs, readKeyFiles(&cfg, path)...) // keyfile.go
	// viper drops an empty mapping: a section written {} would be no
	// section at all. It is the section with every default (acme: {} is
	// Let's Encrypt without an email), or the error that names what it
	// requires (check: {} lacks its listen).
	emptySection(&cfg.TLS.ACME, settings, "tls", "acme")
	emptySection(&cfg.Check, settings, "check")
	emptySection(&cfg.Connections.RatePerClient, settings, "connections", "rate_per_client")
	emptySection(&cfg.Connections.Allow, settings, "connections", "allow")
	emptyUpstream(&cfg.UpstreamConfig, settings)
	if ds, ok := settings["domains"].([]any); ok {
		for i := range min(len(ds), len(cfg.Domains)) {
			if m, ok := ds[i].(map[string]any); ok {
				emptyUpstream(&cfg.Domains[i].UpstreamConfig, m)
				rs, _ := m["routes"].([]any)
				for j := range min(len(rs), len(cfg.Domains[i].Routes)) {
					if rm, ok := rs[j].(map[string]any); ok {
						emptyUpstream(&cfg.Domains[i].Routes[j].UpstreamConfig, rm)
					}
				}
			}
		}
	}
	cfg.Given = givenPaths(v.AllSettings())
	cfg.Secrets = secrets.Secrets
	cfg.Sources = fromEnv.sources()
	cfg.ReadFile = func(name string) ([]byte, error) { return os.ReadFile(KeyFilePath(path, name)) }
	table, err := rules.Compile(cfg)
	if err == nil && len(errs) == 0 {
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
	named := fromEnv.nameVariables(cfg.NameProblems(errors.Join(errs...)), fileGiven)
	return nil, secrets.RedactError(named)
}

// emptyUpstream gives u the upstream sections written {} in settings (the
// top level's, or a domain's): passive: {}, retries: {} and when_down: {}
// are the sections with every default, health: {} the error that names
// its path.
func emptyUpstream(u *rules.UpstreamConfig, settings map[string]any) {
	emptySection(&u.Health, settings, "health")
	emptySection(&u.Passive, settings, "passive")
	emptySection(&u.Retries, settings, "retries")
	emptySection(&u.WhenDown, settings, "when_down")
	emptySection(&u.OriginTLS, settings, "origin_tls")
}

// emptySection gives *section its zero value when the file wrote it as an
// empty mapping at path, which viper drops, and the decoding left nil.
func emptySection[T any](section **T, settings map[string]any, path ...string) {
	if *section == nil && emptyMapping(settings, path...) {
		*section = new(T)
	}
}

// emptyMapping reports whether the file's settings hold an empty mapping
// at path.
func emptyMapping(settings map[string]any, path ...string) bool {
	var cur any = settings
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[k]; !ok {
			return false
		}
	}
	m, ok := cur.(map[string]any)
	return ok && len(m) == 0
}
