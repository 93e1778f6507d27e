package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/edgerate/edge/config"
	"github.com/edgerate/edge/replay"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/trace"
	"github.com/edgerate/edge/window"
)

const replayUsage = `Usage:
  edge replay [flags] LOG...                       replay access logs ("-" is standard input)
  edge replay -synthetic NAME [-seed N] [-scale S]  replay a synthetic scenario

Replays traffic through edge's production counters (the sliding window,
or the algorithm -algorithm or the configuration names) and through an
exact sliding log side by side, in both counting modes (count_blocked true
and false), and reports where they disagree. With -compare it replays the
traffic through every algorithm and prints one table to choose from; with
-suggest it reports each rule's per-source peak rates and a limit
suggested from them instead.

Logs: Common and Combined Log Format, JSON lines, or the NASA TSV trace
(-format auto detects them). A log's source is its client address; IPv6
addresses are grouped by -ipv6-prefix as the proxy groups them.

Scenarios: %s.

Flags:
`

// replayFlags are the parsed flags of edge replay.
type replayFlags struct {
	limit        int64
	period       time.Duration
	algorithm    string
	precision    string
	burst        int64
	compare      bool
	mitigation   time.Duration
	key          string
	countBlocked bool
	config       string
	rule         string
	format       string
	ipv6Prefix   int
	synthetic    string
	seed         uint64
	scale        string
	json         bool
	progress     bool
	suggest      bool
	percentile   float64
	headroom     float64
	capacity     int
	workers      int
	sample       int
	plot         string
	plotSources  string
	command      string // the command line, for the figures
	files        []string
	set          map[string]bool // flags given on the command line

	countBlockedByRule []bool // per input, for -suggest
}

// runReplay is `edge replay`. It returns 0 on success, 1 when the input or
// the configuration cannot be used, 2 for bad flags.
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f replayFlags
	fs := newReplayFlagSet(stderr, &f)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	f.files = fs.Args()
	f.command = strings.Join(append([]string{"edge", "replay"}, args...), " ")
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if err := f.check(); err != nil {
		fmt.Fprintf(stderr, "edge replay: %v\n", err)
		return 2
	}

	inputs, err := f.inputs(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "edge replay: %v\n", err)
		return 1
	}
	total := 0
	for _, in := range inputs {
		total += in.Sources
		switch {
		case f.suggest:
			total += in.Sources // Suggest replays twice
		case f.compare:
			total += (len(replay.Algorithms) - 1) * in.Sources
		default:
			total += (len(f.precisions(in)) - 1) * in.Sources
			if f.plot != "" {
				total += in.Sources // the second report of the side-by-side figure
			}
		}
	}
	bar := startProgress(stderr, f.progress, total)
	opts := replay.Options{Workers: f.workers, Capacity: f.capacity, Interleaved: f.capacity > 0, Progress: bar.update, Sample: f.sample}
	start := time.Now()
	out, err := f.replay(ctx, inputs, opts, bar)
	bar.stop()
	if err != nil {
		fmt.Fprintf(stderr, "edge replay: %v\n", err)
		return 1
	}
	if bar.bar {
		fmt.Fprintf(stderr, "replayed in %s\n", time.Since(start).Round(time.Millisecond))
	}
	if err := out(stdout); err != nil {
		fmt.Fprintf(stderr, "edge replay: writing output: %v\n", err)
		return 1
	}
	if f.plot != "" {
		if err := drawPlots(ctx, f.plot, stderr); err != nil {
			fmt.Fprintf(stderr, "edge replay: %v\n", err)
			return 1
		}
	}
	return 0
}

// newReplayFlagSet defines the flags of edge replay into f. A placeholder
// in backquotes in a usage string is the value's name in -h
// ("-limit N"), as package flag reads it.
func newReplayFlagSet(stderr io.Writer, f *replayFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("edge replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, replayUsage, strings.Join(trace.Scenarios(), ", "))
		fs.PrintDefaults()
	}
	fs.Int64Var(&f.limit, "limit", 100, "allow at most `N` requests per -period and source")
	fs.DurationVar(&f.period, "period", time.Minute, "window length (whole milliseconds)")
	fs.StringVar(&f.algorithm, "algorithm", "sliding_window", "count by algorithm `NAME`: sliding_window, fixed_window, token_bucket or leaky_bucket")
	fs.StringVar(&f.precision, "precision", "standard", "sliding window precision `P`: standard, or fine to replay every sliding-window rule at both precisions, side by side")
	fs.Int64Var(&f.burst, "burst", 0, "with -algorithm token_bucket or leaky_bucket, or -compare: the bucket's capacity `N` (0: the limit)")
	fs.BoolVar(&f.compare, "compare", false, "replay through every algorithm with the same limit and period and print one table")
	fs.DurationVar(&f.mitigation, "mitigation", 0, "block a source this long once it goes over the limit (0: none)")
	fs.StringVar(&f.key, "key", "ip", "what identifies a source in logs: comma-separated ip, path, host, header:NAME")
	fs.BoolVar(&f.countBlocked, "count-blocked", false, "with -suggest: count blocked requests (as the rule's count_blocked)")
	fs.StringVar(&f.config, "config", "", "take the rules from this configuration `file` instead of -limit, -period, -key")
	fs.StringVar(&f.rule, "rule", "", "with -config: replay only this `domain/rule` (default: every rule)")
	fs.StringVar(&f.format, "format", "auto", "log format: auto, clf, json or nasa")
	fs.IntVar(&f.ipv6Prefix, "ipv6-prefix", rules.DefaultIPv6Prefix, "group IPv6 sources by this prefix length (with -config: the config's)")
	fs.StringVar(&f.synthetic, "synthetic", "", "replay the synthetic scenario `NAME` instead of logs; \"all\" for every one")
	fs.Uint64Var(&f.seed, "seed", 0, "synthetic seed `N` (0: the scenario's default)")
	fs.StringVar(&f.scale, "scale", "ci", "synthetic scale `S`: ci, medium or full")
	fs.BoolVar(&f.json, "json", false, "write JSON instead of tables")
	fs.BoolVar(&f.progress, "progress", false, "draw a progress bar on standard error even when it is not a terminal (otherwise: a line every 10s)")
	fs.BoolVar(&f.suggest, "suggest", false, "report per-source peak rates and suggest a limit for each rule")
	fs.Float64Var(&f.percentile, "percentile", 99.9, "with -suggest: the percentile of per-source peaks to start from")
	fs.Float64Var(&f.headroom, "headroom", 0.2, "with -suggest: headroom over that percentile (0.2 = 20%)")
	fs.IntVar(&f.capacity, "capacity", 0, "replay every source through one shared store of `N` sources, in time order (0: a store per source)")
	fs.IntVar(&f.workers, "workers", 0, "`N` sources replayed at once (0: GOMAXPROCS); results do not depend on it")
	fs.IntVar(&f.sample, "sample", 0, "also report what accuracy_sample: `N` would: the store's decisions on the sources it samples, judged against an exact log of what the store counted (0: not)")
	fs.StringVar(&f.plot, "plot", "", "also draw SVG figures into directory `DIR` (with edge-plot, a module of its own in cmd/edge-plot; see docs/accuracy.md)")
	fs.StringVar(&f.plotSources, "plot-sources", "", "with -plot: the sources to follow, comma-separated `NAMES` as the report names them (default: the top missed and wrongly limited ones)")
	return fs
}

// check validates the combination of flags.
func (f *replayFlags) check() error {
	var errs []error
	if f.sample < 0 {
		errs = append(errs, fmt.Errorf("-sample: must be at least 0, got %d", f.sample))
	}
	if f.sample > 0 && (f.compare || f.suggest) {
		errs = append(errs, errors.New("-sample: not with -compare or -suggest; it reports on one replay's sliding window"))
	}
	if f.plot != "" && (f.compare || f.suggest) {
		errs = append(errs, errors.New("-plot: not with -compare or -suggest; it draws one replay's figures"))
	}
	if f.plotSources != "" && f.plot == "" {
		errs = append(errs, errors.New("-plot-sources: only with -plot"))
	}
	ruleFlags := []string{"limit", "period", "key", "mitigation"}
	if f.synthetic != "" {
		if len(f.files) > 0 {
			errs = append(errs, fmt.Errorf("-synthetic replays a generated trace; got log files too: %q", f.files))
		}
		for _, name := range append(ruleFlags, "config", "rule", "format") {
			if f.set[name] {
				errs = append(errs, fmt.Errorf("-%s: not with -synthetic, whose scenarios carry their own rules", name))
			}
		}
		if f.synthetic != "all" {
			if _, ok := trace.DefaultSeed(f.synthetic); !ok {
				errs = append(errs, fmt.Errorf("-synthetic: unknown scenario %q; want all or one of %s", f.synthetic, strings.Join(trace.Scenarios(), ", ")))
			}
		}
		if _, err := trace.ParseScale(f.scale); err != nil {
			errs = append(errs, fmt.Errorf("-%w", err))
		}
	} else {
		if len(f.files) == 0 {
			errs = append(errs, errors.New("give log files to replay (\"-\" for standard input) or -synthetic NAME"))
		}
		for _, name := range []string{"seed", "scale"} {
			if f.set[name] {
				errs = append(errs, fmt.Errorf("-%s: only with -synthetic", name))
			}
		}
		if _, err := trace.ParseFormat(f.format); err != nil {
			errs = append(errs, fmt.Errorf("-%w", err))
		}
	}
	if f.config != "" {
		for _, name := range ruleFlags {
			if f.set[name] {
				errs = append(errs, fmt.Errorf("-%s: not with -config, whose rules say it", name))
			}
		}
	} else {
		if f.set["rule"] {
			errs = append(errs, errors.New("-rule: only with -config"))
		}
		if f.limit < 1 {
			errs = append(errs, fmt.Errorf("-limit: must be at least 1, got %d", f.limit))
		}
		if f.period < time.Millisecond || f.period%time.Millisecond != 0 {
			errs = append(errs, fmt.Errorf("-period: must be a whole number of milliseconds, at least 1ms, got %v", f.period))
		}
		if f.mitigation < 0 {
			errs = append(errs, fmt.Errorf("-mitigation: must not be negative, got %v", f.mitigation))
		}
		if _, err := replay.ParseKeyList(f.key); err != nil {
			errs = append(errs, fmt.Errorf("-key: %w", err))
		}
	}
	if f.ipv6Prefix < 32 || f.ipv6Prefix > 128 {
		errs = append(errs, fmt.Errorf("-ipv6-prefix: must be between 32 and 128, got %d", f.ipv6Prefix))
	}
	if !(f.percentile > 0 && f.percentile <= 100) {
		errs = append(errs, fmt.Errorf("-percentile: must be in (0, 100], got %g", f.percentile))
	}
	if !(f.headroom >= 0 && f.headroom < 100) {
		errs = append(errs, fmt.Errorf("-headroom: must be in [0, 100), got %g", f.headroom))
	}
	errs = append(errs, f.checkAlgorithm()...)
	if f.capacity < 0 || f.workers < 0 {
		errs = append(errs, errors.New("-capacity and -workers: must not be negative"))
	}
	return errors.Join(errs...)
}

// checkAlgorithm validates -algorithm, -burst and -compare.
func (f *replayFlags) checkAlgorithm() []error {
	var errs []error
	alg, err := replay.ParseAlgorithm(f.algorithm)
	if err != nil {
		errs = append(errs, fmt.Errorf("-algorithm: %w", err))
	}
	bucket := alg == window.TokenBucket || alg == window.LeakyBucket
	switch {
	case f.config != "" && f.set["algorithm"]:
		errs = append(errs, errors.New("-algorithm: not with -config, whose rules say it"))
	case f.compare && f.set["algorithm"]:
		errs = append(errs, errors.New("-algorithm: not with -compare, which replays through every algorithm"))
	}
	switch {
	case f.burst < 0 || f.burst > window.MaxLimit:
		errs = append(errs, fmt.Errorf("-burst: must be between 0 and %d, got %d", int64(window.MaxLimit), f.burst))
	case !f.set["burst"] || f.compare:
	case f.config != "":
		errs = append(errs, errors.New("-burst: not with -config, whose rules say it (except with -compare)"))
	case err == nil && !bucket:
		errs = append(errs, fmt.Errorf("-burst: applies only to -algorithm token_bucket or leaky_bucket, got %s", alg))
	}
	if f.compare && f.suggest {
		errs = append(errs, errors.New("-compare: not with -suggest"))
	}
	switch {
	case f.precision != window.Standard.String() && f.precision != window.Fine.String():
		errs = append(errs, fmt.Errorf("-precision: want standard or fine, got %q", f.precision))
	case f.precision == window.Standard.String():
	case f.compare || f.suggest:
		errs = append(errs, errors.New("-precision: not with -compare or -suggest"))
	case err == nil && alg != window.SlidingWindow:
		errs = append(errs, fmt.Errorf("-precision: applies only to the sliding window, got -algorithm %s", alg))
	}
	return errs
}

// inputs builds what to replay from the flags, reading the logs.
func (f *replayFlags) inputs(stderr io.Writer) ([]replay.Input, error) {
	if f.synthetic != "" {
		scale, _ := trace.ParseScale(f.scale)
		ins, err := replay.SyntheticInputs(f.synthetic, f.seed, scale)
		return f.withAlgorithm(ins), err
	}
	lrs, prefix, err := f.logRules()
	if err != nil {
		return nil, err
	}
	format, _ := trace.ParseFormat(f.format)
	recs, err := replay.ReadLogs(f.files, format, os.Stdin, func(file string, st trace.LogStats) {
		fmt.Fprintf(stderr, "edge replay: %s: skipped %d malformed of %d lines; first: %v\n", file, st.Skipped, st.Lines, st.FirstError)
	})
	if err != nil {
		return nil, err
	}
	for _, lr := range lrs {
		f.countBlockedByRule = append(f.countBlockedByRule, lr.CountBlocked)
	}
	return replay.LogInputs(recs, lrs, prefix), nil
}

// withAlgorithm sets -algorithm and -burst on the rules of ins. A
// configuration's rules keep their own.
func (f *replayFlags) withAlgorithm(ins []replay.Input) []replay.Input {
	alg, _ := replay.ParseAlgorithm(f.algorithm)
	for i := range ins {
		ins[i].Rule.Algorithm, ins[i].Rule.Burst = alg, f.burst
	}
	return ins
}

// logRules returns the rules to replay logs against, from -config (and
// -rule) or from -limit, -period, -mitigation and -key, and the IPv6
// prefix sources are keyed by.
func (f *replayFlags) logRules() ([]replay.LogRule, int, error) {
	if f.config == "" {
		key, _ := replay.ParseKeyList(f.key)
		alg, _ := replay.ParseAlgorithm(f.algorithm)
		name := fmt.Sprintf("%d/%v", f.limit, f.period)
		return []replay.LogRule{{
			Rule: replay.Rule{
				Name: name, Algorithm: alg, Limit: f.limit, Period: f.period,
				Burst: f.burst, Mitigation: f.mitigation,
			},
			Key:          key,
			CountBlocked: f.countBlocked,
		}}, f.ipv6Prefix, nil
	}
	table, _, err := config.Load(f.config)
	if err != nil {
		return nil, 0, fmt.Errorf("invalid configuration %s:\n%s", f.config, rules.ProblemText(err))
	}
	lrs := replay.TableRules(table, f.rule)
	if len(lrs) == 0 {
		if f.rule != "" {
			return nil, 0, fmt.Errorf("-rule: %s has no rule %q; rules are named domain/rule", f.config, f.rule)
		}
		return nil, 0, fmt.Errorf("%s has no rules", f.config)
	}
	return lrs, table.IPv6Prefix, nil
}

// precisions returns in as it is to replay, and with -precision fine a
// sliding window twice, at each precision, standard first.
func (f *replayFlags) precisions(in replay.Input) []replay.Input {
	if f.precision != window.Fine.String() || in.Rule.Algorithm != window.SlidingWindow {
		return []replay.Input{in}
	}
	std, fine := in, in
	std.Rule.Precision, fine.Rule.Precision = window.Standard, window.Fine
	return []replay.Input{std, fine}
}

// replayOutput is the -json document.
type replayOutput struct {
	GoVersion   string               `json:"go_version"`
	Synthetic   string               `json:"synthetic,omitempty"`
	Seed        uint64               `json:"seed,omitempty"`
	Scale       string               `json:"scale,omitempty"`
	Files       []string             `json:"files,omitempty"`
	Reports     []*replay.Report     `json:"reports,omitempty"`
	Suggestions []*replay.Suggestion `json:"suggestions,omitempty"`
	Comparisons []*replay.Comparison `json:"comparisons,omitempty"`
}

// replay runs the inputs and returns what writes the result.
func (f *replayFlags) replay(ctx context.Context, inputs []replay.Input, opts replay.Options, bar *progressBar) (func(io.Writer) error, error) {
	doc := replayOutput{GoVersion: runtime.Version(), Files: f.files}
	if f.synthetic != "" {
		doc.Synthetic, doc.Seed, doc.Scale = f.synthetic, f.seed, f.scale
	}
	for i, in := range inputs {
		if f.compare {
			burst := in.Rule.Burst // a configuration's bucket's
			if f.set["burst"] {
				burst = f.burst
			}
			c, err := replay.Compare(ctx, in, burst, opts)
			if err != nil {
				return nil, err
			}
			doc.Comparisons = append(doc.Comparisons, c)
			bar.next(len(replay.Algorithms) * in.Sources)
			continue
		}
		if f.suggest {
			cb := f.countBlocked
			if i < len(f.countBlockedByRule) {
				cb = f.countBlockedByRule[i]
			}
			s, err := replay.Suggest(ctx, in, f.percentile, f.headroom, cb, opts)
			if err != nil {
				return nil, err
			}
			doc.Suggestions = append(doc.Suggestions, s)
			bar.next(2 * in.Sources)
			continue
		}
		runOpts := opts
		runOpts.ByRate = f.plot != ""
		var first *replay.Report
		for _, in := range f.precisions(in) {
			r, err := replay.Run(ctx, in, runOpts)
			if err != nil {
				return nil, err
			}
			doc.Reports = append(doc.Reports, r)
			bar.next(in.Sources)
			if first == nil {
				first = r
			}
		}
		if f.plot != "" {
			if err := f.plotData(ctx, in, first, opts); err != nil {
				return nil, err
			}
			bar.next(in.Sources)
		}
	}
	return func(w io.Writer) error {
		if f.json {
			b, err := json.MarshalIndent(doc, "", "  ")
			if err != nil {
				return err
			}
			_, err = w.Write(append(b, '\n'))
			return err
		}
		if f.synthetic != "" {
			seed := "default seeds"
			if f.seed != 0 {
				seed = fmt.Sprintf("seed %d", f.seed)
			}
			fmt.Fprintf(w, "edge replay: synthetic %s, %s, scale %s\n\n", f.synthetic, seed, f.scale)
		} else {
			fmt.Fprintf(w, "edge replay: %s\n\n", strings.Join(f.files, ", "))
		}
		if f.suggest {
			return replay.WriteSuggestions(w, doc.Suggestions)
		}
		if f.compare {
			return replay.WriteComparisons(w, doc.Comparisons)
		}
		return replay.WriteTable(w, doc.Reports)
	}, nil
}

// progressBar reports replay progress on standard error. On a terminal,
// or with -progress, it redraws a bar four times a second; otherwise it
// writes a line every progressEvery, so that a log (CI's, say) shows a long
// replay is alive without filling with redraws. Its goroutine is started
// by startProgress and ended by stop.
type progressBar struct {
	bar   bool // redraw a bar; else write lines
	w     io.Writer
	total int
	start time.Time

	mu   sync.Mutex
	base int // sources of the inputs already finished
	cur  int // sources finished of the current input

	quit chan struct{}
	done chan struct{}
}

// progressEvery is how often progress is written when it is not drawn as
// a bar.
const progressEvery = 10 * time.Second

// startProgress starts reporting progress over total sources: as a bar when
// force is set or w is a terminal, else as a line every progressEvery.
func startProgress(w io.Writer, force bool, total int) *progressBar {
	b := &progressBar{w: w, total: max(total, 1), start: time.Now(), quit: make(chan struct{}), done: make(chan struct{})}
	b.bar = force || isTerminal(w)
	every := progressEvery
	if b.bar {
		every = 250 * time.Millisecond
	}
	go func() {
		defer close(b.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-b.quit:
				if b.bar {
					b.draw()
					fmt.Fprintln(b.w)
				}
				return
			case <-tick.C:
				if b.bar {
					b.draw()
				} else {
					b.line()
				}
			}
		}
	}()
	return b
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// update records that done sources of the current input are finished. It
// is safe to call from several goroutines.
func (b *progressBar) update(done int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cur = max(b.cur, done)
}

// next moves on to the next input after n sources.
func (b *progressBar) next(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.base += n
	b.cur = 0
}

// finished returns the sources finished so far.
func (b *progressBar) finished() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return min(b.base+b.cur, b.total)
}

func (b *progressBar) draw() {
	done := b.finished()
	const width = 30
	filled := width * done / b.total
	fmt.Fprintf(b.w, "\r[%s%s] %3d%% %d/%d sources %s ",
		strings.Repeat("#", filled), strings.Repeat(" ", width-filled),
		100*done/b.total, done, b.total, time.Since(b.start).Round(time.Second))
}

// line writes one progress line, for a log rather than a terminal.
func (b *progressBar) line() {
	done := b.finished()
	fmt.Fprintf(b.w, "edge replay: %d/%d sources (%d%%) after %s\n",
		done, b.total, 100*done/b.total, time.Since(b.start).Round(time.Second))
}

// stop ends the goroutine and waits for it.
func (b *progressBar) stop() {
	close(b.quit)
	<-b.done
}
