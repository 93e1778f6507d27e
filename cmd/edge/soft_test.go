package main

import (
	"strings"
	"testing"
)

// TestDocsSoftExample: the example in docs/shedding.md's "Soft limits" loads as a
// soft rule beside a hard one.
func TestDocsSoftExample(t *testing.T) {
	section := docSection(t, "docs/shedding.md", "Soft limits")
	i := strings.Index(section, "```yaml\n")
	if i < 0 {
		t.Fatal("docs/shedding.md's Soft limits has no yaml example")
	}
	example, _, _ := strings.Cut(section[i+len("```yaml\n"):], "```")
	cfg := "domains:\n  - hosts: [\"*\"]\n    respond: {body: ok}\n" + indent(example, "    ")
	table, err := parseConfig([]byte(cfg))
	if err != nil {
		t.Fatalf("docs/shedding.md's soft example: %v\n%s", err, cfg)
	}
	rs := table.Domains[0].Rules
	if len(rs) != 2 || !rs[0].Soft || rs[1].Soft {
		t.Errorf("docs/shedding.md's soft example: got %d rules, want a soft one, then a hard one", len(rs))
	}
}
