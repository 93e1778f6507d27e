package rls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadLyftDirectory(t *testing.T) {
	c, err := Load("testdata", []string{"lyft/*.yaml"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(c.Files), 3; got != want {
		t.Fatalf("files: got %d, want %d", got, want)
	}
	shop, api := c.Domains["shop"], c.Domains["api"]
	if shop == nil || api == nil {
		t.Fatalf("domains: got %v, want shop and api", c.Domains)
	}
	if got := len(api.Descriptors()); got != 2 {
		t.Errorf("api merged from two files: got %d descriptors, want 2", got)
	}
	if got := len(shop.Descriptors()); got != 13 {
		t.Errorf("shop: got %d top-level descriptors, want 13", got)
	}
	warned := strings.Join(c.Warnings, "\n")
	for _, want := range []string{"detailed_metric", "value_to_metric", "metadata"} {
		if !strings.Contains(warned, want) {
			t.Errorf("warnings %q: want one for %s", warned, want)
		}
	}
	// Without merge_domains the same directory is refused, naming both files.
	_, err = Load("testdata", []string{"lyft/*.yaml"}, false)
	if err == nil || !strings.Contains(err.Error(), `duplicate domain "api"`) || !strings.Contains(err.Error(), "merge_a.yaml") {
		t.Errorf("without merge: got %v, want a duplicate domain error naming both files", err)
	}
}

func TestLoadGlobs(t *testing.T) {
	for _, glob := range []string{"lyft/nothing*.yaml", "l*"} { // "l*" matches only the directory
		_, err := Load("testdata", []string{glob}, false)
		if err == nil || !strings.Contains(err.Error(), "matches no file") {
			t.Errorf("%s: got %v, want matches no file", glob, err)
		}
	}
	// A file named twice (a glob and its name) is read once.
	c, err := Load("testdata", []string{"lyft/basic.yaml", "lyft/b*.yaml"}, false)
	if err != nil || len(c.Files) != 1 {
		t.Errorf("got %v, %v; want basic.yaml once", c, err)
	}
}

// TestConfigErrors: every error Lyft's loader reports, and the ones edge
// adds, name the file, the line and the path.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		merge      bool
		want       string // substring of the error
	}{
		{"unknown key", "domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      unit: second\n",
			false, `f.yaml:4: descriptors[0].rate_limits: config error, unknown key "rate_limits"`},
		{"unknown key in rate_limit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: 3\n",
			false, `f.yaml:7: descriptors[0].rate_limit.burst: config error, unknown key "burst"`},
		{"unknown top-level key", "domain: d\ndescriptor: []\n", false, `f.yaml:2: descriptor: config error, unknown key "descriptor"`},
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
			false, `f.yaml:5: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'`},
		{"missing unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1\n",
			false, `descriptors[0].rate_limit.unit: invalid rate limit unit ''`},
		{"duplicate descriptor", "domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n    value: b\n",
			false, `f.yaml:5: descriptors[1]: duplicate descriptor composite key 'd.a_b'`},
		{"duplicate nested descriptor", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n",
			false, `descriptors[0].descriptors[1]: duplicate descriptor composite key 'd.a.b'`},
		{"empty key", "domain: d\ndescriptors:\n  - value: b\n", false, `f.yaml:3: descriptors[0].key: descriptor has empty key`},
		{"empty domain", "descriptors:\n  - key: a\n", false, `f.yaml:1: domain: config file cannot have empty domain`},
		{"empty file", "", false, `f.yaml: config file cannot have empty domain`},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: second\n",
			false, `f.yaml:6: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited`},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: self\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: self\n",
			false, `descriptors[0].rate_limit.replaces[0].name: replaces should not contain name of same descriptor ("self")`},
		{"replaces empty", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n",
			false, `descriptors[0].rate_limit.replaces[0].name: should not have an empty replaces entry`},
		{"not a mapping", "- domain: d\n", false, `f.yaml:1: the file must be a mapping with domain and descriptors; it is a list`},
		{"scalar file", "hello\n", false, `it is a string`},
		{"list of non-maps", "domain: d\ndescriptors:\n  - a\n", false, `f.yaml:3: descriptors[0]: config error, yaml file contains list of type other than map`},
		{"non-string key", "domain: d\n1: x\n", false, `f.yaml:2: config error, key is not of type string: a number`},
		{"bad yaml", "domain: d\n  descriptors: [\n", false, `f.yaml: error loading config file`},
		{"negative requests", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n",
			false, `descriptors[0].rate_limit.requests_per_unit: must be a whole number from 0 to 4294967295, got "-1"`},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n",
			false, `descriptors[0].share_threshold: share_threshold can only be used with wildcard values`},
		{"bool not bool", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n", false, `descriptors[0].shadow_mode: must be true or false, got "maybe"`},
		{"merge key", "domain: d\n<<: {a: b}\n", false, `merge keys (<<) are not supported yet`},
		{"duplicate domain", "domain: d\n", false, `f.yaml:1: domain: duplicate domain "d": also in f.yaml`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := []File{{Name: "f.yaml", Data: []byte(tc.yaml)}}
			if tc.name == "duplicate domain" {
				files = append(files, files[0])
			}
			_, err := Parse(files, tc.merge)
			if err == nil {
				t.Fatalf("got no error, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %q, want it to contain %q", err, tc.want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.File != "f.yaml" {
				t.Errorf("got %#v, want a ConfigError naming f.yaml", err)
			}
		})
	}
}

// TestDuplicateAcrossMergedFiles: merging domains never lets a descriptor
// be defined twice.
func TestDuplicateAcrossMergedFiles(t *testing.T) {
	a := File{Name: "a.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n")}
	b := File{Name: "b.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n")}
	_, err := Parse([]File{a, b}, true)
	if err == nil || !strings.Contains(err.Error(), "b.yaml:3: descriptors[0]: duplicate descriptor composite key 'd.k'") {
		t.Errorf("got %v, want a duplicate descriptor in b.yaml", err)
	}
}

// TestEveryProblemAtOnce: one file's problems are all reported.
func TestEveryProblemAtOnce(t *testing.T) {
	_, err := Parse([]File{{Name: "f.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: a\n    bogus: 1\n  - value: x\n  - key: c\n    rate_limit: {unit: nope}\n")}}, false)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"unknown key \"bogus\"", "empty key", "invalid rate limit unit 'nope'"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("got %q, want it to contain %q", err, want)
		}
	}
}

func TestMisplacedKeyWarns(t *testing.T) {
	c, err := Parse([]File{{Name: "f.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: a\n    unit: second\n")}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "descriptors[0].unit: ignored") {
		t.Errorf("got %q, want one warning that unit is ignored", c.Warnings)
	}
}

func TestLoadRelativeAndAbsolute(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.yaml")
	if err := os.WriteFile(p, []byte("domain: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"x.yaml", p} {
		if _, err := Load(dir, []string{path}, false); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
}
