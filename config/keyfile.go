package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/edgerate/edge/rules"
	"go.yaml.in/yaml/v4"
)

// This file reads the API key files that domains' api_keys name: a YAML
// mapping of API key to plan name. The keys are secrets: no message here
// quotes one, or a line that holds one (a YAML syntax error is reported by
// its line number alone), and rules.Compile keeps only their hashes.

// KeyFilePath returns where a file the configuration names, file, is read
// from (the api_keys file, origin_tls's) for the configuration at
// configPath: relative to its directory ("" for the embedded default:
// relative to the working directory).
func KeyFilePath(configPath, file string) string {
	if file == "" || filepath.IsAbs(file) || configPath == "" {
		return file
	}
	return filepath.Join(filepath.Dir(configPath), file)
}

// readKeyFiles fills in the Keys of every domain's api_keys from its file,
// returning a problem (a *rules.FieldError at domains[i].api_keys.file) for
// each file that cannot be read or is not such a mapping.
func readKeyFiles(cfg *rules.Config, configPath string) []error {
	var errs []error
	for i := range cfg.Domains {
		ac := cfg.Domains[i].APIKeys
		if ac == nil || ac.File == "" {
			continue
		}
		keys, err := readKeyFile(KeyFilePath(configPath, ac.File))
		if err != nil {
			errs = append(errs, &rules.FieldError{Path: fmt.Sprintf("domains[%d].api_keys.file", i), Msg: err.Error()})
			continue
		}
		ac.Keys = keys
	}
	return errs
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// readKeyFile reads one API key file.
func readKeyFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line := ""
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			line = " (line " + m[1] + ")"
		}
		return nil, fmt.Errorf("%s is not YAML%s", path, line)
	}
	keys := map[string]string{}
	if len(doc.Content) == 0 {
		return keys, nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return keys, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s must be a mapping of API key to plan name", path)
	}
	for j := 0; j+1 < len(root.Content); j += 2 {
		k, v := root.Content[j], root.Content[j+1]
		switch {
		case k.Kind != yaml.ScalarNode || k.Value == "":
			return nil, fmt.Errorf("%s line %d: an API key must be a non-empty string", path, k.Line)
		case v.Kind != yaml.ScalarNode || !rules.IsLabel(v.Value):
			return nil, fmt.Errorf("%s line %d: the plan must be a name of [A-Za-z0-9_.-]", path, v.Line)
		}
		if _, dup := keys[k.Value]; dup {
			return nil, fmt.Errorf("%s line %d: the key is listed twice", path, k.Line)
		}
		keys[k.Value] = v.Value
	}
	return keys, nil
}
