package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/edgerate/edge/internal/wait"
)

// fence is one fenced block of a Markdown file: its info string ("yaml",
// "sh", or "" for output) and its text, newline-terminated.
type fence struct{ lang, text string }

var fenceBlock = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```$")

// fences returns the fenced blocks of a Markdown text, in order.
func fences(md string) []fence {
	var fs []fence
	for _, m := range fenceBlock.FindAllStringSubmatch(md, -1) {
		fs = append(fs, fence{m[1], m[2]})
	}
	return fs
}

// TestReadmeFirstDeployment follows README's "A first real deployment" as a
// reader would: edge -check on the file README shows prints what README
// shows, and with an API behind it the write loop, the reload that raises
// the limit, and the metrics grep print README's output, line for line.
func TestReadmeFirstDeployment(t *testing.T) {
	fs := fences(docSection(t, "README.md", "A first real deployment"))
	var langs []string
	for _, f := range fs {
		langs = append(langs, f.lang)
	}
	if got, want := strings.Join(langs, ","), "sh,yaml,sh,,sh,,sh,,sh,"; got != want {
		t.Fatalf("README's first deployment has blocks %s, want %s", got, want)
	}
	config := fs[1].text
	if fs[0].text != "go build -o edge ./cmd/edge\n" || fs[2].text != "./edge -check -config my-api.yaml\n./edge -config my-api.yaml\n" {
		t.Fatalf("README's first deployment builds and runs edge otherwise than this test does:\n%s%s", fs[0].text, fs[2].text)
	}
	t.Chdir(t.TempDir())
	must(t, os.WriteFile("my-api.yaml", []byte(config), 0o644))
	if code, out, errOut := runEdge("-check", "-config", "my-api.yaml"); code != 0 || out != fs[3].text {
		t.Errorf("edge -check: exit %d, stdout\n%s\nstderr %s\nREADME shows\n%s", code, out, errOut, fs[3].text)
	}

	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "order taken")
	}))
	defer origin.Close()
	running := func(cfg string) string {
		r := strings.NewReplacer(`listen: ":8080"`, fmt.Sprintf("listen: %q", publicAnyPort),
			`admin_listen: "127.0.0.1:8077"`, fmt.Sprintf("admin_listen: %q", adminAnyPort),
			`origin: "http://127.0.0.1:9001"`, fmt.Sprintf("origin: %q", origin.URL))
		out := r.Replace(cfg)
		if strings.Contains(out, ":8080") || strings.Contains(out, ":8077") || strings.Contains(out, ":9001") {
			t.Fatalf("README's configuration names its addresses otherwise than this test expects:\n%s", cfg)
		}
		return out
	}
	path, _ := filepath.Abs("my-api.yaml")
	must(t, os.WriteFile(path, []byte(running(config)), 0o644))
	e := startEdge(t, path)

	loop := regexp.MustCompile(`(?m)^for i in \$\(seq (\d+)\); do curl -s -o /dev/null -w '%\{http_code\}\\n' -X ([A-Z]+) localhost:8080(/\S*); done$`)
	send := func(block string) string {
		m := loop.FindStringSubmatch(block)
		if m == nil {
			t.Fatalf("no curl loop in README's\n%s", block)
		}
		n, _ := strconv.Atoi(m[1])
		var got strings.Builder
		for range n {
			req, _ := http.NewRequest(m[2], "http://"+e.public+m[3], nil)
			req.Host = "localhost:8080"
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			fmt.Fprintf(&got, "%d\n", resp.StatusCode)
		}
		return got.String()
	}
	if got := send(fs[4].text); got != fs[5].text {
		t.Errorf("the first loop got\n%sREADME shows\n%s", got, fs[5].text)
	}

	// The reload: writes raised to 5, the file replaced as an editor saves
	// it, and SIGHUP.
	if !strings.HasPrefix(fs[6].text, "kill -HUP $(pgrep -x edge)\n") {
		t.Fatalf("README's reload is not a SIGHUP:\n%s", fs[6].text)
	}
	const before, after = "        limit: 3\n        period: 1m\n", "        limit: 5\n        period: 1m\n"
	if strings.Count(config, before) != 1 || !strings.Contains(config, "- name: writes ") {
		t.Fatalf("README's configuration has no single rule of limit 3 to raise:\n%s", config)
	}
	h := loadedHash(t, e)
	must(t, os.WriteFile(path+".tmp", []byte(running(strings.Replace(config, before, after, 1))), 0o644))
	must(t, os.Rename(path+".tmp", path))
	must(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	wait.For(t, 10*time.Second, "the raised limit to be loaded", func() bool { return loadedHash(t, e) != h })
	if got := send(fs[6].text); got != fs[7].text {
		t.Errorf("the loop after the reload got\n%sREADME shows\n%s", got, fs[7].text)
	}

	grep := regexp.MustCompile(`^curl -s localhost:8077/metrics \| grep -E '([^']+)'\n$`).FindStringSubmatch(fs[8].text)
	if grep == nil {
		t.Fatalf("README reads the metrics otherwise than this test does:\n%s", fs[8].text)
	}
	_, metrics := e.adminGet("/metrics")
	pick := regexp.MustCompile(grep[1])
	var got strings.Builder
	for line := range strings.SplitSeq(metrics, "\n") {
		if pick.MatchString(line) {
			got.WriteString(line + "\n")
		}
	}
	if got.String() != fs[9].text {
		t.Errorf("the metrics README greps are\n%sREADME shows\n%s", got.String(), fs[9].text)
	}
}

// markdownLink matches an inline link or image's target: [text](target).
var markdownLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)

// explicitAnchor matches an HTML anchor a Markdown file sets itself.
var explicitAnchor = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)

// githubAnchor is the anchor GitHub gives a heading: lower case, every
// character but letters, digits, '_', '-' and ' ' dropped, spaces as '-'.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && unicode.IsLetter(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// markdownProse returns md without its fenced blocks and code spans, where
// a link or a heading is text rather than markup.
func markdownProse(md string) []string {
	var lines []string
	fenced := false
	for line := range strings.SplitSeq(md, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			line = ""
		}
		if fenced {
			line = ""
		}
		lines = append(lines, regexp.MustCompile("`[^`]*`").ReplaceAllStringFunc(line, func(s string) string {
			if strings.HasPrefix(line, "#") {
				return s // a heading's code span is part of its anchor
			}
			return "``"
		}))
	}
	return lines
}

// markdownAnchors returns the anchors of a Markdown file's headings (a
// repeated one numbered as GitHub does: x, x-1, x-2) and its explicit ones.
func markdownAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range markdownProse(md) {
		if hashes := len(line) - len(strings.TrimLeft(line, "#")); hashes > 0 && hashes <= 6 && strings.HasPrefix(line[hashes:], " ") {
			a := githubAnchor(line[hashes:])
			if n := seen[a]; n > 0 {
				anchors[fmt.Sprintf("%s-%d", a, n)] = true
			} else {
				anchors[a] = true
			}
			seen[a]++
		}
		for _, m := range explicitAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
	}
	return anchors
}

func TestGithubAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Quick start":                                      "quick-start",
		"Sharing counters in a PoP (Redis)":                "sharing-counters-in-a-pop-redis",
		"Limits without coordination (`sync: share`)":      "limits-without-coordination-sync-share",
		"`domains[]`":                                      "domains",
		"`cluster.redis`":                                  "clusterredis",
		"The check listener: nginx, Traefik and Caddy":     "the-check-listener-nginx-traefik-and-caddy",
		"`edge replay`: flags and log formats":             "edge-replay-flags-and-log-formats",
		"How it is checked (`go test ./replay/ ./trace/`)": "how-it-is-checked-go-test-replay-trace",
	} {
		if got := githubAnchor(heading); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestDocLinksResolve: every relative link in README.md and docs/*.md
// names a file or directory of the repository and, with a #fragment, a
// heading (or an explicit anchor) of the Markdown file it names.
func TestDocLinksResolve(t *testing.T) {
	root := "../.."
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = markdownAnchors(string(b))
		return anchors[path]
	}
	links := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for i, line := range markdownProse(string(b)) {
			for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				name, fragment, _ := strings.Cut(target, "#")
				path := file
				if name != "" {
					path = filepath.Join(filepath.Dir(file), name)
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s:%d: link %s: no file %s", rel, i+1, target, name)
						continue
					}
				}
				if fragment == "" {
					continue
				}
				if filepath.Ext(path) != ".md" {
					t.Errorf("%s:%d: link %s: an anchor in a file that is not Markdown", rel, i+1, target)
					continue
				}
				if !anchorsOf(path)[fragment] {
					t.Errorf("%s:%d: link %s: %s has no heading with the anchor #%s", rel, i+1, target, filepath.Base(path), fragment)
				}
			}
		}
	}
	if links == 0 {
		t.Error("found no relative links at all")
	}
}

// readmeCommands are the commands README may show outside its first
// deployment (whose commands TestReadmeFirstDeployment runs), each with
// the test that checks it.
var readmeCommands = []struct {
	line  *regexp.Regexp
	where string
}{
	{regexp.MustCompile(`^go run \./cmd/edge$`), "TestReadmeQuickStartLoop runs the embedded default it serves"},
	{regexp.MustCompile(`^for i in \$\(seq \d+\); do curl -si localhost:8080/ \| head -1; done$`), "TestReadmeQuickStartLoop"},
	{regexp.MustCompile(`^go test -race -timeout 30m \./\.\.\.$`), "TestReadmeExamplesChecked: the command .ci/run runs"},
	{regexp.MustCompile(`^edge replay `), "TestReadmeCommandLine parses its flags"},
	{regexp.MustCompile(`^edge -config edge\.yaml +# serve, logging every request$`), "TestReplayAgreesWithAccessLog serves such a configuration and replays its log"},
}

// TestReadmeExamplesChecked: every YAML block of README.md is a
// configuration that loads, and every command README shows is one a test
// checks: those of the first deployment, or one of readmeCommands.
func TestReadmeExamplesChecked(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	deployment := map[string]bool{}
	for _, f := range fences(docSection(t, "README.md", "A first real deployment")) {
		if f.lang == "sh" {
			deployment[f.text] = true
		}
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	yamls := 0
	for _, f := range fences(string(b)) {
		switch f.lang {
		case "yaml":
			yamls++
			if _, err := parseConfig([]byte(f.text)); err != nil {
				t.Errorf("README's configuration does not load: %v\n%s", err, f.text)
			}
		case "sh":
			if deployment[f.text] {
				continue
			}
			for line := range strings.SplitSeq(strings.TrimSuffix(f.text, "\n"), "\n") {
				known := false
				for _, c := range readmeCommands {
					known = known || c.line.MatchString(line)
				}
				if !known {
					t.Errorf("README shows the command %q, which no test checks", line)
				}
				if strings.HasPrefix(line, "go test ") && !strings.Contains(string(ci), "\n"+line+"\n") {
					t.Errorf("README's test command %q is not the one .ci/run runs", line)
				}
			}
		case "":
		default:
			t.Errorf("README has a ```%s block, which no test reads", f.lang)
		}
	}
	if yamls == 0 {
		t.Error("README shows no configuration")
	}
}

// TestMetricsTableComplete: docs/operations.md's metrics table has a row
// for every metric edge registers, and none for a metric it does not.
func TestMetricsTableComplete(t *testing.T) {
	sec := docSection(t, "docs/operations.md", "Metrics")
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(edge_[a-z0-9_]+)` \\|").FindAllStringSubmatch(sec, -1) {
		rows[m[1]] = true
	}
	registered := registeredMetrics(t)
	for name := range registered {
		if strings.HasPrefix(name, "edge_") && !rows[name] {
			t.Errorf("docs/operations.md's metrics table has no row for %s", name)
		}
	}
	for name := range rows {
		if !registered[name] {
			t.Errorf("docs/operations.md's metrics table has a row for %s, which edge does not register", name)
		}
	}
}
