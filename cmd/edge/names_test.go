package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/edgerate/edge/proxy"
	"github.com/edgerate/edge/rls"
	"github.com/prometheus/client_golang/prometheus"
)

// describer is a prometheus.Registerer that records the name of every
// metric registered with it.
type describer struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d *describer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d.names[m[1]] = true
		}
	}
	return nil
}

func (d *describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		d.Register(c)
	}
}

func (d *describer) Unregister(prometheus.Collector) bool { return false }

// registeredMetrics returns the names of the metrics a real proxy
// registers, with Redis-shared counters so that the store's are included.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	table, err := parseConfig([]byte(`
cluster: {store: redis, redis: {addresses: ["127.0.0.1:1"]}}
domains: [{hosts: ["*"], respond: {body: ok}, rules: [{name: a, limit: 1, period: 1s}]}]
`))
	if err != nil {
		t.Fatalf("test configuration: %v", err)
	}
	d := &describer{names: map[string]bool{}}
	p, err := proxy.New(proxy.Options{Table: table, Registerer: d})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Logf("closing the proxy: %v", err) // nothing listens at 127.0.0.1:1
	}
	if len(d.names) == 0 {
		t.Fatal("the proxy registered no metrics")
	}
	// The rate limit service's metrics.
	rc, err := rls.Parse([]rls.File{{Name: "x.yaml", Data: []byte("domain: x\n")}}, false)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.New(rls.Options{Table: table, Config: rc, Registerer: d})
	if err != nil {
		t.Fatal(err)
	}
	svc.Close()
	return d.names
}

// prose is what a reader reads of a file: a Go file's comments, the
// whole of any other.
func prose(t *testing.T, path string) string {
	t.Helper()
	if filepath.Ext(path) != ".go" {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, g := range f.Comments {
		b.WriteString(g.Text())
		b.WriteByte('\n')
	}
	return b.String()
}

// repoFiles returns the files below root (the repository, .git left
// out) whose name keep accepts.
func repoFiles(t *testing.T, root string, keep func(name string) bool) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.IsDir() && keep(d.Name()) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	// metricName matches an edge metric name, and a counter's name with
	// the edge_ prefix left out (a name ending in _total); a name ending
	// in "_" is a prefix ("edge_connections_*") and is not checked.
	metricName = regexp.MustCompile(`\bedge_[a-z0-9_]*[a-z0-9]\b|\b[a-z][a-z0-9]*(?:_[a-z0-9]+)*_total\b`)
	// repoPath matches a slash-separated path ending in a file name; it is
	// checked when its first element is a top-level entry of the
	// repository, so that other projects' files (Go's
	// net/http/httputil/reverseproxy.go) are not.
	// bareGoFile matches a Go file named without a directory, which a Go
	// comment uses for a file of its own package.
	bareGoFile = regexp.MustCompile(`(?:^|[^\w./-])([a-z0-9_]+\.go)\b`)
	repoPath   = regexp.MustCompile(`(?:^|[^\w./:-])((?:\.?[\w-]+/)+[\w.-]+\.(?:go|md|yaml|yml|sh|json|txt|golden))\b`)
)

// TestNamesExist: every edge_ metric that a comment or document names is
// one edge registers (a histogram's _bucket, _sum and _count series
// count as its own), every repository path one names exists, and every Go
// file a Go comment names without a directory is in that comment's
// package.
func TestNamesExist(t *testing.T) {
	root := "../.."
	registered := registeredMetrics(t)
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var top []string
	for _, e := range entries {
		top = append(top, e.Name())
	}
	prosaic := func(name string) bool {
		return slices.Contains([]string{".go", ".md", ".yaml", ".yml"}, filepath.Ext(name))
	}
	for _, path := range repoFiles(t, root, prosaic) {
		rel, err := filepath.Rel(root, path)
		if err != nil {
			t.Fatal(err)
		}
		text := prose(t, path)
		for _, name := range metricName.FindAllString(text, -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suffix); ok && registered[b] {
					base = b
				}
			}
			if !registered[base] && !registered["edge_"+base] {
				t.Errorf("%s names the metric %s, which edge does not register", rel, name)
			}
		}
		if filepath.Ext(path) == ".go" {
			for _, m := range bareGoFile.FindAllStringSubmatch(text, -1) {
				if _, err := os.Stat(filepath.Join(filepath.Dir(path), m[1])); err != nil {
					t.Errorf("%s names the file %s, which is not in its package", rel, m[1])
				}
			}
		}
		for _, m := range repoPath.FindAllStringSubmatch(text, -1) {
			p := m[1]
			first, _, _ := strings.Cut(p, "/")
			if !slices.Contains(top, first) {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("%s names the file %s, which does not exist", rel, p)
			}
		}
	}
}
