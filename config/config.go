// Package config reads edge's configuration: YAML, and the environment
// variables that override its secrets, decoded into a rules.Config and
// compiled into a rules.Table. Its problems are worded for the person who
// wrote the file: each names the path, with the names of the domain and
// rule on it, and the value ("domains[0] (api).rules[1] (login).period: a
// duration needs a unit, such as 30s or 1m; got 60"), a YAML syntax error
// quotes its line, every problem of a file
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
// "reading config: ", with no hash.
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
// problem at once: those that keep a value from decoding (unknown keys,
// values of the wrong type) and the validation problems of every other
// field. A field that failed to decode is reported once; no
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
			tlsVersionHook,
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
	return nil, secrets.RedactError(cfg.NameProblems(errors.Join(errs...)))
}
