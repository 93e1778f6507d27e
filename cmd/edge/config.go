package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/edgerate/edge/configs"
	"github.com/edgerate/edge/rules"
	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// loadConfig reads and compiles the configuration at path, or the embedded
// default when path is empty. Unknown keys, type mismatches and every
// validation problem are errors; the returned error lists them all.
func loadConfig(path string) (*rules.Table, error) {
	data := configs.Default
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("reading config: %w", err)
		}
	}
	return parseConfig(data)
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
		mapstructure.StringToTimeDurationHookFunc(),
		// A single string where a list is expected is a list of one
		// (`key: ip`), never split on commas.
		mapstructure.StringToSliceHookFunc("\x00"),
	)))
	if err != nil {
		return nil, fmt.Errorf("decoding config: %w", err)
	}
	return rules.Compile(cfg)
}
