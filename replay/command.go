package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/trace"
	"github.com/edgerate/edge/window"
)

// Command is one run of edge replay: what to replay (log files or a
// synthetic scenario), through which rules, and what to report. Most
// fields are one of the command's flags, which the field's comment names;
// their defaults are the flag set's, not the zero value. Run it after
// Check has passed. A Command is used by one goroutine at a time.
type Command struct {
	Limit        int64         // -limit: requests per Period and source
	Period       time.Duration // -period: whole milliseconds
	Algorithm    string        // -algorithm, as ParseAlgorithm reads it
	Precision    string        // -precision: standard or fine
	Burst        int64         // -burst: a bucket's capacity (0: the limit)
	Compare      bool          // -compare: every algorithm, one table
	Mitigation   time.Duration // -mitigation (0: none)
	Key          string        // -key, as ParseKeyList reads it
	CountBlocked bool          // -count-blocked, for Suggest
	// Config is the -config file's name, as given; Table is its compiled
	// content, which the caller loads (and reports the problems of)
	// before Run. With Config set the rules are Table's.
	Config      string
	Table       *rules.Table
	Rule        string          // -rule: only this domain/rule of Table
	Format      string          // -format, as trace.ParseFormat reads it
	IPv6Prefix  int             // -ipv6-prefix, unless Table says it
	Synthetic   string          // -synthetic: a scenario, or "all"; else Files
	Seed        uint64          // -seed (0: the scenario's default)
	Scale       string          // -scale, as trace.ParseScale reads it
	JSON        bool            // -json: a JSON document instead of tables
	Progress    bool            // -progress: a bar even off a terminal
	Suggest     bool            // -suggest: peak rates and suggested limits
	Percentile  float64         // -percentile, for Suggest
	Headroom    float64         // -headroom, for Suggest
	Capacity    int             // -capacity: one shared store of N sources (0: one per source)
	Workers     int             // -workers (0: GOMAXPROCS)
	Sample      int             // -sample: also report accuracy_sample: N (0: not)
	Plot        string          // -plot: the directory for the figures' data
	PlotSources string          // -plot-sources: comma-separated source names
	CommandLine string          // the command line, quoted in the figures
	Files       []string        // the logs to replay, "-" being Stdin
	Given       map[string]bool // the flags set on the command line, by name without '-'
	Stdin       io.Reader       // the log named "-" (nil: os.Stdin)

	countBlockedByRule []bool     // per input, for Suggest
	agreement          *Agreement // with edge's own JSON log and a Table: the live decisions replayed
	skips              []Skip     // the rules of Table not replayed, and why
	requests           int        // the log records read
	screen             ScreenStats
}

// Run replays what c names and writes the result to stdout: tables, or
// with JSON one JSON document; with Plot, each input's figures' data into
// that directory (see PlotData; drawing them is edge-plot's). Progress,
// the time taken when drawn as a bar, and the lines of a log it skipped
// go to stderr. Its errors are those of reading the inputs, of a replay,
// and, prefixed "writing output: ", of writing to stdout.
func (c *Command) Run(ctx context.Context, stdout, stderr io.Writer) error {
	inputs, err := c.inputs(stderr)
	if err != nil {
		return err
	}
	total := 0
	for _, in := range inputs {
		total += in.Sources
		switch {
		case c.Suggest:
			total += in.Sources // Suggest replays twice
		case c.Compare:
			total += (len(Algorithms) - 1) * in.Sources
		default:
			total += (len(c.precisions(in)) - 1) * in.Sources
			if c.Plot != "" {
				total += in.Sources // the second report of the side-by-side figure
			}
		}
	}
	bar := startProgress(stderr, c.Progress, total)
	opts := Options{Workers: c.Workers, Capacity: c.Capacity, Interleaved: c.Capacity > 0, Progress: bar.update, Sample: c.Sample}
	start := time.Now()
	out, err := c.replayAll(ctx, inputs, opts, bar)
	bar.stop()
	if err != nil {
		return err
	}
	if bar.bar {
		fmt.Fprintf(stderr, "replayed in %s\n", time.Since(start).Round(time.Millisecond))
	}
	if err := out(stdout); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	return nil
}

// Check validates the combination of options, reporting every problem at
// once. Its messages name the options by their flags ("-limit: must be at
// least 1, got 0"). Given says which options were set rather than left at
// their defaults, where that matters (-burst, -seed and the rule options
// are refused where they do not apply).
func (c *Command) Check() error {
	var errs []error
	if c.Sample < 0 {
		errs = append(errs, fmt.Errorf("-sample: must be at least 0, got %d", c.Sample))
	}
	if c.Sample > 0 && (c.Compare || c.Suggest) {
		errs = append(errs, errors.New("-sample: not with -compare or -suggest; it reports on one replay's sliding window"))
	}
	if c.Plot != "" && (c.Compare || c.Suggest) {
		errs = append(errs, errors.New("-plot: not with -compare or -suggest; it draws one replay's figures"))
	}
	if c.PlotSources != "" && c.Plot == "" {
		errs = append(errs, errors.New("-plot-sources: only with -plot"))
	}
	ruleFlags := []string{"limit", "period", "key", "mitigation"}
	if c.Synthetic != "" {
		if len(c.Files) > 0 {
			errs = append(errs, fmt.Errorf("-synthetic replays a generated trace; got log files too: %q", c.Files))
		}
		for _, name := range append(ruleFlags, "config", "rule", "format") {
			if c.Given[name] {
				errs = append(errs, fmt.Errorf("-%s: not with -synthetic, whose scenarios carry their own rules", name))
			}
		}
		if c.Synthetic != "all" {
			if _, ok := trace.DefaultSeed(c.Synthetic); !ok {
				errs = append(errs, fmt.Errorf("-synthetic: unknown scenario %q; want all or one of %s", c.Synthetic, strings.Join(trace.Scenarios(), ", ")))
			}
		}
		if _, err := trace.ParseScale(c.Scale); err != nil {
			errs = append(errs, fmt.Errorf("-%w", err))
		}
	} else {
		if len(c.Files) == 0 {
			errs = append(errs, errors.New("give log files to replay (\"-\" for standard input) or -synthetic NAME"))
		}
		for _, name := range []string{"seed", "scale"} {
			if c.Given[name] {
				errs = append(errs, fmt.Errorf("-%s: only with -synthetic", name))
			}
		}
		if _, err := trace.ParseFormat(c.Format); err != nil {
			errs = append(errs, fmt.Errorf("-%w", err))
		}
	}
	if c.Config != "" {
		for _, name := range ruleFlags {
			if c.Given[name] {
				errs = append(errs, fmt.Errorf("-%s: not with -config, whose rules say it", name))
			}
		}
	} else {
		if c.Given["rule"] {
			errs = append(errs, errors.New("-rule: only with -config"))
		}
		if c.Limit < 1 {
			errs = append(errs, fmt.Errorf("-limit: must be at least 1, got %d", c.Limit))
		}
		if c.Period < time.Millisecond || c.Period%time.Millisecond != 0 {
			errs = append(errs, fmt.Errorf("-period: must be a whole number of milliseconds, at least 1ms, got %v", c.Period))
		}
		if c.Mitigation < 0 {
			errs = append(errs, fmt.Errorf("-mitigation: must not be negative, got %v", c.Mitigation))
		}
		if _, err := ParseKeyList(c.Key); err != nil {
			errs = append(errs, fmt.Errorf("-key: %w", err))
		}
	}
	if c.IPv6Prefix < 32 || c.IPv6Prefix > 128 {
		errs = append(errs, fmt.Errorf("-ipv6-prefix: must be between 32 and 128, got %d", c.IPv6Prefix))
	}
	if !(c.Percentile > 0 && c.Percentile <= 100) {
		errs = append(errs, fmt.Errorf("-percentile: must be in (0, 100], got %g", c.Percentile))
	}
	if !(c.Headroom >= 0 && c.Headroom < 100) {
		errs = append(errs, fmt.Errorf("-headroom: must be in [0, 100), got %g", c.Headroom))
	}
	errs = append(errs, c.checkAlgorithm()...)
	if c.Capacity < 0 || c.Workers < 0 {
		errs = append(errs, errors.New("-capacity and -workers: must not be negative"))
	}
	return errors.Join(errs...)
}

// checkAlgorithm validates -algorithm, -burst, -compare and -precision.
func (c *Command) checkAlgorithm() []error {
	var errs []error
	alg, err := ParseAlgorithm(c.Algorithm)
	if err != nil {
		errs = append(errs, fmt.Errorf("-algorithm: %w", err))
	}
	bucket := alg == algorithm.TokenBucket || alg == algorithm.LeakyBucket
	switch {
	case c.Config != "" && c.Given["algorithm"]:
		errs = append(errs, errors.New("-algorithm: not with -config, whose rules say it"))
	case c.Compare && c.Given["algorithm"]:
		errs = append(errs, errors.New("-algorithm: not with -compare, which replays through every algorithm"))
	}
	switch {
	case c.Burst < 0 || c.Burst > window.MaxLimit:
		errs = append(errs, fmt.Errorf("-burst: must be between 0 and %d, got %d", int64(window.MaxLimit), c.Burst))
	case !c.Given["burst"] || c.Compare:
	case c.Config != "":
		errs = append(errs, errors.New("-burst: not with -config, whose rules say it (except with -compare)"))
	case err == nil && !bucket:
		errs = append(errs, fmt.Errorf("-burst: applies only to -algorithm token_bucket or leaky_bucket, got %s", alg))
	}
	if c.Compare && c.Suggest {
		errs = append(errs, errors.New("-compare: not with -suggest"))
	}
	switch {
	case c.Precision != algorithm.Standard.String() && c.Precision != algorithm.Fine.String():
		errs = append(errs, fmt.Errorf("-precision: want standard or fine, got %q", c.Precision))
	case c.Precision == algorithm.Standard.String():
	case c.Compare || c.Suggest:
		errs = append(errs, errors.New("-precision: not with -compare or -suggest"))
	case err == nil && alg != algorithm.SlidingWindow:
		errs = append(errs, fmt.Errorf("-precision: applies only to the sliding window, got -algorithm %s", alg))
	}
	return errs
}

// inputs builds what to replay from the options, reading the logs.
func (c *Command) inputs(stderr io.Writer) ([]Input, error) {
	if c.Synthetic != "" {
		scale, _ := trace.ParseScale(c.Scale)
		ins, err := SyntheticInputs(c.Synthetic, c.Seed, scale)
		return c.withAlgorithm(ins), err
	}
	lrs, prefix, err := c.logRules()
	if err != nil {
		return nil, err
	}
	if c.Table != nil {
		c.skips = TableSkips(c.Table, c.Rule)
	}
	format, _ := trace.ParseFormat(c.Format)
	stdin := c.Stdin
	if stdin == nil {
		stdin = os.Stdin
	}
	recs, err := ReadLogs(c.Files, format, stdin, func(file string, st trace.LogStats) {
		fmt.Fprintf(stderr, "edge replay: %s: skipped %d malformed of %d lines; first: %v\n", file, st.Skipped, st.Lines, st.FirstError)
	})
	if err != nil {
		return nil, err
	}
	if c.Table != nil && slices.ContainsFunc(recs, func(r trace.Record) bool { return r.Edge != nil }) {
		if c.agreement, err = Agree(recs, c.Table); err != nil { // agree.go
			return nil, err
		}
	}
	// The proxy refuses these before any rule, whatever the rules are.
	c.requests = len(recs)
	recs, c.screen = Screen(recs)
	kept := lrs[:0]
	for _, lr := range lrs {
		if reason := lr.Unrecorded(recs); reason != "" {
			c.skips = append(c.skips, Skip{Rule: lr.Rule.Name, Reason: reason})
			continue
		}
		kept = append(kept, lr)
	}
	c.countBlockedByRule = c.countBlockedByRule[:0]
	for _, lr := range kept {
		c.countBlockedByRule = append(c.countBlockedByRule, lr.CountBlocked)
	}
	return LogInputs(recs, kept, prefix), nil
}

// withAlgorithm sets -algorithm and -burst on the rules of ins. A
// configuration's rules keep their own.
func (c *Command) withAlgorithm(ins []Input) []Input {
	alg, _ := ParseAlgorithm(c.Algorithm)
	for i := range ins {
		ins[i].Rule.Algorithm, ins[i].Rule.Burst = alg, c.Burst
	}
	return ins
}

// logRules returns the rules to replay logs against, from Table (and
// Rule) or from Limit, Period, Mitigation and Key, and the IPv6 prefix
// sources are keyed by. A Table's rules that cannot be replayed are left
// out (TableSkips); that may be all of them, which is not an error.
func (c *Command) logRules() ([]LogRule, int, error) {
	if c.Config == "" {
		key, _ := ParseKeyList(c.Key)
		alg, _ := ParseAlgorithm(c.Algorithm)
		name := fmt.Sprintf("%d/%v", c.Limit, c.Period)
		return []LogRule{{
			Rule: Rule{
				Name: name, Algorithm: alg, Limit: c.Limit, Period: c.Period,
				Burst: c.Burst, Mitigation: c.Mitigation,
			},
			Key:          key,
			CountBlocked: c.CountBlocked,
		}}, c.IPv6Prefix, nil
	}
	if c.Table == nil {
		return nil, 0, fmt.Errorf("%s: the configuration was not loaded", c.Config)
	}
	lrs, skips := tableRules(c.Table, c.Rule)
	if c.Rule != "" && len(lrs) == 0 && len(skips) == 0 {
		return nil, 0, fmt.Errorf("-rule: %s has no rule %q; rules are named domain/rule", c.Config, c.Rule)
	}
	return lrs, c.Table.IPv6Prefix, nil
}

// precisions returns in as it is to replay, and with Precision fine a
// sliding window twice, at each precision, standard first.
func (c *Command) precisions(in Input) []Input {
	if c.Precision != algorithm.Fine.String() || in.Rule.Algorithm != algorithm.SlidingWindow {
		return []Input{in}
	}
	std, fine := in, in
	std.Rule.Precision, fine.Rule.Precision = algorithm.Standard, algorithm.Fine
	return []Input{std, fine}
}

// output is the JSON document.
type output struct {
	GoVersion   string        `json:"go_version"`
	Synthetic   string        `json:"synthetic,omitempty"`
	Seed        uint64        `json:"seed,omitempty"`
	Scale       string        `json:"scale,omitempty"`
	Files       []string      `json:"files,omitempty"`
	Skipped     []Skip        `json:"skipped,omitempty"`  // a configuration's rules not replayed
	Screened    int           `json:"screened,omitempty"` // log records the proxy refuses before any rule
	Reports     []*Report     `json:"reports,omitempty"`
	Suggestions []*Suggestion `json:"suggestions,omitempty"`
	Comparisons []*Comparison `json:"comparisons,omitempty"`
	// Agreement is, for edge's own JSON log replayed through a
	// configuration, how often the replay decides as edge did live.
	Agreement *Agreement `json:"agreement,omitempty"`
}

// replayAll runs the inputs and returns what writes the result.
func (c *Command) replayAll(ctx context.Context, inputs []Input, opts Options, bar *progressBar) (func(io.Writer) error, error) {
	doc := output{GoVersion: runtime.Version(), Files: c.Files, Skipped: c.skips, Screened: c.screen.Screened, Agreement: c.agreement}
	if c.Synthetic != "" {
		doc.Synthetic, doc.Seed, doc.Scale = c.Synthetic, c.Seed, c.Scale
	}
	for i, in := range inputs {
		if c.Compare {
			burst := in.Rule.Burst // a configuration's bucket's
			if c.Given["burst"] {
				burst = c.Burst
			}
			c, err := Compare(ctx, in, burst, opts)
			if err != nil {
				return nil, err
			}
			doc.Comparisons = append(doc.Comparisons, c)
			bar.next(len(Algorithms) * in.Sources)
			continue
		}
		if c.Suggest {
			cb := c.CountBlocked
			if i < len(c.countBlockedByRule) {
				cb = c.countBlockedByRule[i]
			}
			s, err := Suggest(ctx, in, c.Percentile, c.Headroom, cb, opts)
			if err != nil {
				return nil, err
			}
			doc.Suggestions = append(doc.Suggestions, s)
			bar.next(2 * in.Sources)
			continue
		}
		runOpts := opts
		runOpts.ByRate = c.Plot != ""
		var first *Report
		for _, in := range c.precisions(in) {
			r, err := Run(ctx, in, runOpts)
			if err != nil {
				return nil, err
			}
			doc.Reports = append(doc.Reports, r)
			bar.next(in.Sources)
			if first == nil {
				first = r
			}
		}
		if c.Plot != "" {
			if err := c.plotData(ctx, in, first, opts); err != nil {
				return nil, err
			}
			bar.next(in.Sources)
		}
	}
	return func(w io.Writer) error {
		if c.JSON {
			b, err := json.MarshalIndent(doc, "", "  ")
			if err != nil {
				return err
			}
			_, err = w.Write(append(b, '\n'))
			return err
		}
		if c.Synthetic != "" {
			seed := "default seeds"
			if c.Seed != 0 {
				seed = fmt.Sprintf("seed %d", c.Seed)
			}
			fmt.Fprintf(w, "edge replay: synthetic %s, %s, scale %s\n\n", c.Synthetic, seed, c.Scale)
		} else {
			fmt.Fprintf(w, "edge replay: %s\n\n", strings.Join(c.Files, ", "))
		}
		if st := c.screen; st.Screened > 0 {
			fmt.Fprintf(w, "screened %d of %d requests, which the proxy refuses before any rule; first: %v\n\n", st.Screened, c.requests, st.First)
		}
		if len(doc.Skipped) > 0 {
			for _, s := range doc.Skipped {
				fmt.Fprintf(w, "skipped %s: %s\n", s.Rule, s.Reason)
			}
			fmt.Fprintln(w)
		}
		if a := doc.Agreement; a != nil {
			if err := WriteAgreement(w, a); err != nil {
				return err
			}
		}
		if c.Suggest {
			return WriteSuggestions(w, doc.Suggestions)
		}
		if c.Compare {
			return WriteComparisons(w, doc.Comparisons)
		}
		return WriteTable(w, doc.Reports)
	}, nil
}

// The figures of -plot are drawn by edge-plot, a module of its own
// (cmd/edge-plot), so that neither edge's binary nor its go.mod carries a
// plotting library and its fonts (docs/accuracy.md): Run writes each
// input's figures' data into Plot as JSON (PlotData), and edge replay runs
// edge-plot on the directory.

// plotData writes in's figures' data into c.Plot: r (with ByRate), r
// beside the same traffic counted by another algorithm (the fixed window
// beside the sliding window, the sliding window beside any other), and
// the followed sources.
func (c *Command) plotData(ctx context.Context, in Input, r *Report, opts Options) error {
	// The side-by-side figure: a sliding window at both precisions, any
	// other algorithm beside the sliding window.
	other := in
	switch {
	case in.Rule.Algorithm == algorithm.SlidingWindow && in.Rule.Precision == algorithm.Fine:
		other.Rule.Precision = algorithm.Standard
	case in.Rule.Algorithm == algorithm.SlidingWindow:
		other.Rule.Precision = algorithm.Fine
	default:
		other.Rule.Algorithm = algorithm.SlidingWindow
	}
	second, err := Run(ctx, other, opts)
	if err != nil {
		return err
	}
	names := FollowChoice(in, r, 3)
	if c.PlotSources != "" {
		names = strings.Split(c.PlotSources, ",")
	}
	var traces []SourceTrace
	if len(names) > 0 {
		if traces, err = Follow(in, names); err != nil {
			return err
		}
	}
	data := PlotData{
		Command: c.CommandLine,
		Report:  r,
		Pair: [2]Labelled{
			{Label: plotLabel(r), Report: r},
			{Label: plotLabel(second), Report: second},
		},
		Traces: traces,
	}
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.Plot, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Plot, plotFileName(r.Name)+".json"), b, 0o644)
}

// plotFileName is name with every character but letters, digits, '.',
// '_' and '-' made '_'.
func plotFileName(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, name)
}

// plotLabel names a report in the side-by-side figure: its algorithm, and
// a sliding window's precision.
func plotLabel(r *Report) string {
	if r.Rule.Algorithm == algorithm.SlidingWindow.String() {
		return r.Rule.Algorithm + " (" + r.Precision + ")"
	}
	return r.Rule.Algorithm
}
