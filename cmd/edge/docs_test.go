package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/proxy"
	"github.com/edgerate/edge/replay"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The operator documents checked here, relative to this package.
const (
	docsAlerts     = "../../docs/alerts.yaml"
	docsAlertTests = "../../docs/alerts_test.yaml"
	docsDashboard  = "../../docs/grafana-dashboard.json"
)

// docsPromtool returns the path of promtool (Debian package prometheus,
// installed by .ci/run), skipping the test without it, except in CI.
func docsPromtool(t *testing.T) string {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not installed: .ci/run must install the prometheus package")
		}
		t.Skip("promtool not installed (apt-get install prometheus)")
	}
	return promtool
}

// runPromtool runs promtool with args and fails t with its output if it
// exits non-zero.
func runPromtool(t *testing.T, promtool string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool, args...).CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// exportedMetricNames returns the name of every edge_* series that a
// running edge exposes, as PromQL sees them (a histogram as its _bucket,
// _sum and _count series), from a real proxy registered the way serve
// registers it. It fails t if a family lacks the pop label.
// describing is a Registerer that records the names of the metrics each
// collector it registers describes.
type describing struct {
	prometheus.Registerer
	names map[string]bool
}

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for desc := range ch {
		if m := descName.FindStringSubmatch(desc.String()); m != nil {
			d.names[m[1]] = true
		}
	}
	return d.Registerer.Register(c)
}

func (d describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

func exportedMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	const config = `pop: docs
max_keys: 1000
domains:
  - name: site
    hosts: ["site.test"]
    respond: {body: "ok\n"}
    rules: [{name: per-ip, limit: 3, period: 1m}]
  - name: api
    hosts: ["api.test"]
    origin: "http://127.0.0.1:9"
    rules: [{name: per-ip, limit: 3, period: 1m, action: log}]
`
	table, err := parseConfig([]byte(config))
	if err != nil {
		t.Fatalf("test configuration: %v", err)
	}
	reg := prometheus.NewRegistry()
	described := map[string]bool{}
	p, err := proxy.New(proxy.Options{
		Table:      table,
		Registerer: describing{prometheus.WrapRegistererWith(prometheus.Labels{"pop": table.Pop}, reg), described},
	})
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	// One reload of each result, so that edge_config_reloads_total has
	// series: it has none until the first reload attempt.
	again, err := parseConfig([]byte(config))
	if err != nil {
		t.Fatalf("test configuration: %v", err)
	}
	if _, err := p.Reload(again, "again"); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	p.ReloadFailed(errors.New("docs test"))

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	// And an edge sharing its counters through Redis (sync: share), for
	// the metrics only such an edge has; Redis is not there, which its
	// metrics show.
	shared, err := parseConfig([]byte(config + "cluster: {store: redis, redis: {addresses: [\"" +
		redistest.RefusingAddr(t) + "\"]}, sync: share}\n"))
	if err != nil {
		t.Fatalf("test configuration: %v", err)
	}
	sreg := prometheus.NewRegistry()
	sp, err := proxy.New(proxy.Options{Table: shared,
		Registerer: describing{prometheus.WrapRegistererWith(prometheus.Labels{"pop": shared.Pop}, sreg), described}})
	if err != nil {
		t.Fatalf("proxy.New with Redis: %v", err)
	}
	defer sp.Close()
	var smfs []*dto.MetricFamily
	wait.For(t, 10*time.Second, "the first heartbeat's failed round trip to be counted and timed", func() bool {
		if smfs, err = sreg.Gather(); err != nil {
			t.Fatalf("Gather: %v", err)
		}
		// The error is counted and the round trip timed one after the
		// other: wait for both.
		return slices.ContainsFunc(smfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == "edge_store_errors_total" }) &&
			slices.ContainsFunc(smfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == "edge_store_round_trip_seconds" })
	})
	mfs = append(mfs, smfs...)
	names := map[string]bool{}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "edge_") {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pop" {
					continue series
				}
			}
			t.Errorf("%s has a series without the pop label", name)
			break
		}
		if mf.GetType().String() == "HISTOGRAM" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[name+suffix] = true
			}
			continue
		}
		names[name] = true
	}
	// A metric with labels has no series until its first child (a shed
	// request, a fallback decision): its collector describes it all the
	// same. (The histograms among them have series here.)
	for name := range described {
		if strings.HasPrefix(name, "edge_") {
			names[name] = true
		}
	}
	if len(names) == 0 {
		t.Fatal("the registry has no edge_* metrics")
	}
	return names
}

// promqlToken splits a PromQL expression into strings, label matchers,
// range selectors, numbers (durations included), identifiers and single
// punctuation characters.
var promqlToken = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\{[^}]*\}|\[[^\]]*\]|[0-9][0-9a-zA-Z.]*|[a-zA-Z_:][a-zA-Z0-9_:]*|\S`)

var promqlIdent = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

var (
	promqlAggregations = map[string]bool{
		"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
		"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
		"limitk": true, "limit_ratio": true,
	}
	promqlLabelLists = map[string]bool{
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	}
	promqlKeywords = map[string]bool{
		"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
		"inf": true, "nan": true,
	}
)

// promqlMetricNames returns the metric names an expression selects: every
// identifier that is not a function, an aggregation, a keyword or a label
// in a grouping or matching list.
func promqlMetricNames(expr string) []string {
	toks := promqlToken.FindAllString(expr, -1)
	var names []string
	for i := 0; i < len(toks); i++ {
		tok := toks[i]
		if !promqlIdent.MatchString(tok) {
			continue
		}
		next := ""
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		switch {
		case promqlLabelLists[tok]:
			if next == "(" {
				for i++; i < len(toks) && toks[i] != ")"; i++ {
				}
			}
		case next == "(", promqlAggregations[tok] && promqlLabelLists[next], promqlKeywords[strings.ToLower(tok)]:
		default:
			names = append(names, tok)
		}
	}
	return names
}

func TestGrafanaPromQLMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (domain, le) (rate(edge_a_bucket{pop=~"$pop", x="y(z)"}[$__rate_interval]))`: {"edge_a_bucket"},
		`histogram_quantile(0.99, sum(rate(b[5m])) by (le)) > 1e3`:                           {"b"},
		`a / on (instance) group_left (version) c offset 5m`:                                 {"a", "c"},
		`max without (job) (x) * 1000 > bool y`:                                              {"x", "y"},
		`count by (pop, version) (edge_build_info{pop=~"$pop"})`:                             {"edge_build_info"},
	} {
		if got := promqlMetricNames(expr); !slices.Equal(got, want) {
			t.Errorf("promqlMetricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// TestAlertRulesPassPromtool checks docs/alerts.yaml with promtool, runs
// its unit tests in docs/alerts_test.yaml, and checks that every edge_*
// name the rules mention is one edge exports.
func TestAlertRulesPassPromtool(t *testing.T) {
	data, err := os.ReadFile(docsAlerts)
	if err != nil {
		t.Fatal(err)
	}
	exported := exportedMetricNames(t)
	for _, name := range regexp.MustCompile(`\bedge_[a-z0-9_]*[a-z0-9]\b`).FindAllString(string(data), -1) {
		if !exported[name] {
			t.Errorf("%s mentions %s, which edge does not export", docsAlerts, name)
		}
	}
	promtool := docsPromtool(t)
	runPromtool(t, promtool, "check", "rules", docsAlerts)
	runPromtool(t, promtool, "test", "rules", docsAlertTests)
}

type grafanaDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type grafanaPanel struct {
	ID         int                `json:"id"`
	Type       string             `json:"type"`
	Title      string             `json:"title"`
	Datasource *grafanaDatasource `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string             `json:"refId"`
		Expr       string             `json:"expr"`
		Datasource *grafanaDatasource `json:"datasource"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaDashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string             `json:"name"`
			Type       string             `json:"type"`
			Query      json.RawMessage    `json:"query"`
			Definition string             `json:"definition"`
			Datasource *grafanaDatasource `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name       string             `json:"name"`
			Expr       string             `json:"expr"`
			Datasource *grafanaDatasource `json:"datasource"`
		} `json:"list"`
	} `json:"annotations"`
	Panels []grafanaPanel `json:"panels"`
}

// dashboardQuery is one PromQL expression of the dashboard and where it is.
type dashboardQuery struct{ where, expr string }

// TestGrafanaDashboardIsValid checks docs/grafana-dashboard.json: its
// structure, that every query selects only metrics edge exports and
// filters edge_* series by $pop, that the panels cover edge's metrics, and
// (with promtool) that every query parses.
func TestGrafanaDashboardIsValid(t *testing.T) {
	data, err := os.ReadFile(docsDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", docsDashboard, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q: want both", d.UID, d.Title)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d, want at least 36", d.SchemaVersion)
	}
	const dsUID = "${datasource}"
	var queries []dashboardQuery

	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		switch v.Name {
		case "datasource":
			var q string
			if v.Type != "datasource" || json.Unmarshal(v.Query, &q) != nil || q != "prometheus" {
				t.Errorf("variable datasource: type %q, query %s; want a prometheus datasource variable", v.Type, v.Query)
			}
		case "pop", "domain":
			m := regexp.MustCompile(`^label_values\((.+),\s*` + v.Name + `\)$`).FindStringSubmatch(v.Definition)
			if v.Type != "query" || m == nil {
				t.Errorf("variable %s: type %q, definition %q; want label_values(..., %s)", v.Name, v.Type, v.Definition, v.Name)
				continue
			}
			if !strings.Contains(string(v.Query), v.Definition) && !strings.Contains(string(v.Query), strings.ReplaceAll(v.Definition, `"`, `\"`)) {
				t.Errorf("variable %s: query %s does not run its definition %q", v.Name, v.Query, v.Definition)
			}
			if v.Datasource == nil || v.Datasource.UID != dsUID {
				t.Errorf("variable %s: datasource %+v, want uid %s", v.Name, v.Datasource, dsUID)
			}
			queries = append(queries, dashboardQuery{"variable " + v.Name, m[1]})
		}
	}
	for _, name := range []string{"datasource", "pop", "domain"} {
		if !vars[name] {
			t.Errorf("no template variable %q", name)
		}
	}
	for _, a := range d.Annotations.List {
		if a.Expr == "" {
			continue
		}
		if a.Datasource == nil || a.Datasource.UID != dsUID {
			t.Errorf("annotation %q: datasource %+v, want uid %s", a.Name, a.Datasource, dsUID)
		}
		queries = append(queries, dashboardQuery{"annotation " + a.Name, a.Expr})
	}

	ids := map[int]bool{}
	var walk func([]grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, p := range panels {
			where := "panel " + strconv.Quote(p.Title)
			if p.ID == 0 || ids[p.ID] {
				t.Errorf("%s: id %d missing or not unique", where, p.ID)
			}
			ids[p.ID] = true
			if p.Title == "" {
				t.Errorf("panel %d has no title", p.ID)
			}
			if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("%s: gridPos %+v outside the 24-column grid", where, g)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != dsUID {
				t.Errorf("%s: datasource %+v, want uid %s", where, p.Datasource, dsUID)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s has no queries", where)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("%s: refId %q missing or not unique", where, tg.RefID)
				}
				refs[tg.RefID] = true
				if tg.Datasource != nil && tg.Datasource.UID != dsUID {
					t.Errorf("%s/%s: datasource %+v, want uid %s", where, tg.RefID, tg.Datasource, dsUID)
				}
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s/%s: empty expr", where, tg.RefID)
					continue
				}
				queries = append(queries, dashboardQuery{where + "/" + tg.RefID, tg.Expr})
			}
		}
	}
	walk(d.Panels)

	exported := exportedMetricNames(t)
	used := map[string]bool{}
	selector := regexp.MustCompile(`\b(edge_[a-zA-Z0-9_:]*)\s*(\{[^}]*\})?`)
	for _, q := range queries {
		names := promqlMetricNames(q.expr)
		if len(names) == 0 {
			t.Errorf("%s: %q selects no metric", q.where, q.expr)
		}
		for _, name := range names {
			used[name] = true
			if !exported[name] {
				t.Errorf("%s: %q selects %s, which edge does not export", q.where, q.expr, name)
			}
		}
		if q.where == "variable pop" {
			continue // it lists the pops
		}
		for _, m := range selector.FindAllStringSubmatch(q.expr, -1) {
			if !strings.Contains(m[2], `pop=~"$pop"`) {
				t.Errorf("%s: %s is not filtered by pop=~\"$pop\"", q.where, m[0])
			}
		}
	}
	for _, name := range []string{
		"edge_requests_total", "edge_blocked_requests_total", "edge_rule_decisions_total",
		"edge_upstream_request_duration_seconds_bucket", "edge_upstream_request_duration_seconds_count",
		"edge_tracked_keys", "edge_key_capacity", "edge_key_evictions_total", "edge_overflow_requests_total",
		"edge_config_last_reload_successful", "edge_config_last_reload_success_timestamp_seconds",
		"edge_config_reloads_total", "edge_misdirected_requests_total", "edge_build_info",
		"edge_origin_healthy", "edge_origin_drained", "edge_origin_in_flight", "edge_origin_requests_total",
		"edge_origin_retries_total", "edge_origin_ejections_total",
	} {
		if !used[name] {
			t.Errorf("no panel shows %s", name)
		}
	}

	t.Run("promql parses", func(t *testing.T) {
		promtool := docsPromtool(t)
		checkDashboardPromQL(t, promtool, queries)
	})
}

// checkDashboardPromQL has promtool parse every query, as recording rules,
// with Grafana's variables replaced by values of their kind.
func checkDashboardPromQL(t *testing.T, promtool string, queries []dashboardQuery) {
	vars := strings.NewReplacer(
		"$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
		"${pop}", "fra-1", "$pop", "fra-1", "${domain}", "shop", "$domain", "shop",
	)
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	where := map[string]string{}
	for i, q := range queries {
		expr := vars.Replace(q.expr)
		if strings.Contains(expr, "$") {
			t.Errorf("%s: unknown Grafana variable in %q", q.where, q.expr)
			continue
		}
		name := fmt.Sprintf("dashboard:query_%03d", i)
		where[name] = q.where
		rules = append(rules, rule{name, expr})
	}
	sort.Slice(rules, func(i, j int) bool { return rules[i].Record < rules[j].Record })
	file := map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}}
	data, err := json.Marshal(file) // JSON is YAML
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool, "check", "rules", path).CombinedOutput()
	if err != nil {
		report := string(out)
		for name, w := range where {
			report = strings.ReplaceAll(report, name, name+" ("+w+")")
		}
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s", err, report)
	}
}

// docExample returns the first yaml block of docSection(t, path, title),
// failing t without one.
func docExample(t *testing.T, path, title string) string {
	t.Helper()
	return docYAML(t, path, title, docSection(t, path, title))
}

// docYAML returns the first yaml block of section, the text of path's
// section docSection returned.
func docYAML(t *testing.T, path, title, section string) string {
	t.Helper()
	_, example, ok := strings.Cut(section, "```yaml\n")
	if !ok {
		t.Fatalf("%s's %s has no yaml example", path, title)
	}
	example, _, _ = strings.Cut(example, "```")
	return example
}

// docSection returns the text of the section of the Markdown file at path
// (relative to the repository) whose heading is title, at any level, up to
// the next heading of the same or a higher level; headings inside fenced
// blocks (a shell comment) are not headings.
func docSection(t *testing.T, path, title string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../..", path))
	if err != nil {
		t.Fatal(err)
	}
	var sec strings.Builder
	level, fenced := 0, false
	for line := range strings.SplitAfterSeq(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if !fenced {
			hashes := len(line) - len(strings.TrimLeft(line, "#"))
			if hashes > 0 && strings.HasPrefix(line[hashes:], " ") {
				if level > 0 && hashes <= level {
					break
				}
				if level == 0 && strings.TrimSpace(line[hashes:]) == title {
					level = hashes
					continue
				}
			}
		}
		if level > 0 {
			sec.WriteString(line)
		}
	}
	if level == 0 {
		t.Fatalf("%s has no section %q", path, title)
	}
	return sec.String()
}

// TestDocsChoosingAlgorithm runs each command of docs/algorithms.md's
// "Choosing an algorithm" on the NASA trace the repository ships and
// requires the output it shows, byte for byte: a replay of 31,000 requests through
// five counters takes well under a second.
func TestDocsChoosingAlgorithm(t *testing.T) {
	sec := docSection(t, "docs/algorithms.md", "Choosing an algorithm")
	blocks := regexp.MustCompile("(?s)```sh\nedge (replay [^\n]*)\n```\n\n```text\n(.*?)```\n").FindAllStringSubmatch(sec, -1)
	if len(blocks) != 2 {
		t.Fatalf("found %d commands with their output, want 2", len(blocks))
	}
	t.Chdir("../..") // the commands' paths are the repository's
	for _, b := range blocks {
		t.Run(b[1], func(t *testing.T) {
			code, out, errOut := runEdge(strings.Fields(b[1])...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %s", code, errOut)
			}
			if out != b[2] {
				t.Errorf("docs/algorithms.md shows\n%s\nedge %s prints\n%s", b[2], b[1], out)
			}
		})
	}
}

// TestReadmeCommandLine checks README's "Command line" and docs/replay.md
// against the binary's own help: README's command list is edge -h's
// verbatim, docs/replay.md has one row per replay flag with the value name
// -h shows ("-limit N"), and every edge replay example of either parses.
func TestReadmeCommandLine(t *testing.T) {
	sec := docSection(t, "README.md", "Command line")
	if !strings.Contains(sec, "```\n"+edgeCommands+"```\n") {
		t.Errorf("README's command list differs from edge -h's:\n%s", edgeCommands)
	}
	code, _, errOut := runEdge("-h")
	if code != 0 || !strings.Contains(errOut, edgeCommands) || !strings.Contains(errOut, "-config file") {
		t.Errorf("edge -h: exit %d, stderr:\n%s", code, errOut)
	}

	rows := map[string]bool{}
	replayDoc := docSection(t, "docs/replay.md", replayTitle)
	for _, m := range regexp.MustCompile("(?m)^\\| `(-[^`]+)` \\|").FindAllStringSubmatch(replayDoc, -1) {
		rows[m[1]] = true
	}
	var f replay.Command
	fs := newReplayFlagSet(&strings.Builder{}, &f)
	want := map[string]bool{}
	fs.VisitAll(func(fl *flag.Flag) {
		name, _ := flag.UnquoteUsage(fl)
		row := "-" + fl.Name
		if name != "" {
			row += " " + name
		}
		want[row] = true
	})
	for row := range want {
		if !rows[row] {
			t.Errorf("docs/replay.md's flags have no row `%s`", row)
		}
	}
	for row := range rows {
		if !want[row] {
			t.Errorf("docs/replay.md's flags have a row `%s`, which edge replay -h does not show", row)
		}
	}
	if !want["-limit N"] {
		t.Errorf("edge replay -h shows -limit without the value name N: %v", want)
	}

	if !strings.Contains(sec, "\nedge replay ") {
		t.Error("README's Command line has no edge replay example")
	}
	examples := 0
	for line := range strings.SplitSeq(docSection(t, "README.md", "edge")+replayDoc, "\n") {
		args, ok := strings.CutPrefix(line, "edge replay ")
		if !ok {
			continue
		}
		args, _, _ = strings.Cut(args, "#")
		examples++
		t.Run(strings.TrimSpace(args), func(t *testing.T) {
			var f replay.Command
			fs := newReplayFlagSet(&strings.Builder{}, &f)
			if err := fs.Parse(strings.Fields(args)); err != nil {
				t.Errorf("flags do not parse: %v", err)
			}
			f.Files = fs.Args()
			f.Given = map[string]bool{}
			fs.Visit(func(fl *flag.Flag) { f.Given[fl.Name] = true })
			if err := f.Check(); err != nil {
				t.Errorf("flags refused: %v", err)
			}
		})
	}
	if examples == 0 {
		t.Error("README and docs/replay.md show no edge replay example")
	}
}

// replayTitle is the title of docs/replay.md.
const replayTitle = "`edge replay`: flags and log formats"

// TestMultiSiteKeyShares checks what configs/multi-site.yaml's comments say
// of its key shares: the explicit ones kept, 400,000 left over split between
// the two domains with rules and no max_keys, none for the rule-less status
// page.
func TestMultiSiteKeyShares(t *testing.T) {
	table, _, err := loadConfig("../../configs/multi-site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"shop": 1_000_000, "tenants": 200_000, "docs": 200_000, "status": 0, "fallback": 200_000}
	got := map[string]int{}
	for _, d := range table.Domains {
		got[d.Name] = d.MaxKeys
	}
	if !maps.Equal(got, want) {
		t.Errorf("got shares %v, want %v", got, want)
	}
}

// TestReadmeQuickStartLoop checks the quick start's loop: README and
// configs/edge.yaml suggest the same one, and the embedded default answers
// it with the status lines README shows.
func TestReadmeQuickStartLoop(t *testing.T) {
	sec := docSection(t, "README.md", "Quick start")
	m := regexp.MustCompile(`(?m)^for i in \$\(seq (\d+)\); do curl -si localhost:8080/ \| head -1; done$`).FindStringSubmatch(sec)
	if m == nil {
		t.Fatal("README's quick start has no curl loop")
	}
	n, _ := strconv.Atoi(m[1])
	yaml, err := os.ReadFile("../../configs/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(yaml), "#   "+m[0]+"\n") {
		t.Errorf("configs/edge.yaml does not suggest README's loop %q", m[0])
	}
	_, after, ok := strings.Cut(sec, m[0]+"\n```\n\n```\n")
	want, _, _ := strings.Cut(after, "```")
	if !ok || want == "" {
		t.Fatal("README's quick start shows no output after the loop")
	}

	table, _, err := loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 4, 1, 0, 0, time.UTC)
	p, err := proxy.New(proxy.Options{Table: table, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var got strings.Builder
	for range n {
		req := httptest.NewRequest(http.MethodGet, "http://localhost:8080/", nil)
		req.RemoteAddr = "127.0.0.1:50000"
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)
		fmt.Fprintf(&got, "HTTP/1.1 %d %s\n", rec.Code, http.StatusText(rec.Code))
	}
	if got.String() != want {
		t.Errorf("the loop against the embedded default got\n%s\nREADME shows\n%s", got.String(), want)
	}
}

// outsideReference matches what points a reader outside the repository:
// issue numbers of a tracker the reader cannot see, and files that are not
// in the repository. Public references (a GitHub issue link, an RFC) do not
// match.
var outsideReference = regexp.MustCompile(`(?i)\bissues? \d+|\(issue\b|\bshared/(data|reference)\b|\baccuracy note\b|/work/`)

// TestNoReferencesOutsideRepository reads every Go, Markdown, YAML and shell
// file and the Dockerfile for references a reader of the repository cannot
// follow.
func TestNoReferencesOutsideRepository(t *testing.T) {
	root := "../.."
	read := func(name string) bool {
		switch filepath.Ext(name) {
		case ".go", ".md", ".yaml", ".yml", ".sh":
			return name != "docs_test.go" // holds the pattern itself
		}
		return name == "Dockerfile" || name == "run"
	}
	for _, path := range repoFiles(t, root, read) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := outsideReference.FindString(line); m != "" {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d: %q refers outside the repository: %s", rel, i+1, m, strings.TrimSpace(line))
			}
		}
	}
}
