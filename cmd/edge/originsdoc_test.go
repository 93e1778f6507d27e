package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// TestDocsOriginsExamples: every YAML block of docs/origins.md is a
// configuration that loads, and the one of "A limit per server" compiles
// to its servers' max_in_flight and its origin_queue. Two have tests of
// their own, which give them what they need: the Routes example, a
// domain's keys (TestDocsRoutesExample), and the TLS one, whose files
// the test makes (TestOriginTLSDocExample).
func TestDocsOriginsExamples(t *testing.T) {
	b, err := os.ReadFile("../../docs/origins.md")
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]bool{
		docExample(t, "docs/origins.md", "Routes"):                       true,
		docExample(t, "docs/origins.md", "TLS to origins: `origin_tls`"): true,
	}
	yamls := 0
	for _, f := range fences(string(b)) {
		if f.lang != "yaml" || own[f.text] {
			continue
		}
		yamls++
		if _, err := parseConfig([]byte(f.text)); err != nil {
			t.Errorf("docs/origins.md's configuration does not load: %v\n%s", err, f.text)
		}
	}
	if yamls < 2 {
		t.Errorf("docs/origins.md has %d yaml blocks, want at least 2", yamls)
	}
	section := docSection(t, "docs/origins.md", "A limit per server: `max_in_flight`")
	_, example, ok := strings.Cut(section, "```yaml\n")
	if !ok {
		t.Fatal("docs/origins.md's A limit per server has no yaml example")
	}
	example, _, _ = strings.Cut(example, "```")
	table, err := parseConfig([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	d := table.Domains[0]
	if got := []int{d.Upstream.Servers[0].MaxInFlight, d.Upstream.Servers[1].MaxInFlight}; got[0] != 100 || got[1] != 100 {
		t.Errorf("max_in_flight %v, want [100 100]", got)
	}
	if want := (rules.OriginQueue{Max: 500, Timeout: 2 * time.Second}); d.OriginQueue != want {
		t.Errorf("origin_queue %+v, want %+v", d.OriginQueue, want)
	}
}
