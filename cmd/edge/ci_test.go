package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCIFuzzesEveryTarget checks that .ci/run's fuzz loop names every fuzz
// target of the module, in its package, and nothing that no longer exists:
// a target that moves with its code must not silently stop being fuzzed.
func TestCIFuzzesEveryTarget(t *testing.T) {
	root := filepath.Join("..", "..")
	script, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`\./([a-z0-9/]+):(Fuzz[A-Za-z0-9]+)`).FindAllStringSubmatch(string(script), -1) {
		listed[m[1]+":"+m[2]] = true
	}
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz[A-Za-z0-9]+)\(`)
	found := map[string]bool{}
	for _, f := range repoFiles(t, root, func(name string) bool { return strings.HasSuffix(name, "_test.go") }) {
		rel, err := filepath.Rel(root, filepath.Dir(f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(rel, "bench") {
			continue // a module of its own, compiled but not fuzzed by CI
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(src), -1) {
			found[filepath.ToSlash(rel)+":"+m[1]] = true
		}
	}
	for target := range found {
		if !listed[target] {
			t.Errorf("fuzz target %s is not in .ci/run's fuzz loop", target)
		}
	}
	for target := range listed {
		if !found[target] {
			t.Errorf(".ci/run fuzzes %s, which does not exist", target)
		}
	}
	if len(found) == 0 {
		t.Fatal("found no fuzz targets; is the repository root right?")
	}
	// docs/development.md's table names each target in its package's row.
	doc, err := os.ReadFile(filepath.Join(root, "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9/]+)` \\| (.*) \\|$").FindAllStringSubmatch(string(doc), -1) {
		rows[m[1]] = m[2]
	}
	for target := range found {
		pkg, name, _ := strings.Cut(target, ":")
		if !strings.Contains(rows[pkg], "`"+name+"`") {
			t.Errorf("docs/development.md's fuzz table does not name %s in the row of %s", name, pkg)
		}
	}
}
