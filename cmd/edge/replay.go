package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/edgerate/edge/config"
	"github.com/edgerate/edge/replay"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/trace"
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

// runReplay is `edge replay`. It returns 0 on success, 1 when the input or
// the configuration cannot be used, 2 for bad flags. A -config file is read
// as edge reads it, with the settings of env over it.
func runReplay(ctx context.Context, args []string, env []string, stdout, stderr io.Writer) int {
	var c replay.Command
	fs := newReplayFlagSet(stderr, &c)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	c.Files = fs.Args()
	c.CommandLine = strings.Join(append([]string{"edge", "replay"}, args...), " ")
	c.Given = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { c.Given[fl.Name] = true })
	c.Stdin = os.Stdin
	if err := c.Check(); err != nil {
		fmt.Fprintf(stderr, "edge replay: %v\n", err)
		return 2
	}
	if c.Config != "" {
		table, _, err := config.LoadEnv(c.Config, env)
		if err != nil {
			fmt.Fprintf(stderr, "edge replay: invalid configuration %s:\n%s\n", c.Config, rules.ProblemText(err))
			return 1
		}
		c.Table = table
	}
	if err := c.Run(ctx, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "edge replay: %v\n", err)
		return 1
	}
	if c.Plot != "" {
		if err := drawPlots(ctx, c.Plot, stderr); err != nil {
			fmt.Fprintf(stderr, "edge replay: %v\n", err)
			return 1
		}
	}
	return 0
}

// newReplayFlagSet defines the flags of edge replay into c. A placeholder
// in backquotes in a usage string is the value's name in -h
// ("-limit N"), as package flag reads it.
func newReplayFlagSet(stderr io.Writer, c *replay.Command) *flag.FlagSet {
	fs := flag.NewFlagSet("edge replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, replayUsage, strings.Join(trace.Scenarios(), ", "))
		fs.PrintDefaults()
	}
	fs.Int64Var(&c.Limit, "limit", 100, "allow at most `N` requests per -period and source")
	fs.DurationVar(&c.Period, "period", time.Minute, "window length (whole milliseconds)")
	fs.StringVar(&c.Algorithm, "algorithm", "sliding_window", "count by algorithm `NAME`: sliding_window, fixed_window, token_bucket or leaky_bucket")
	fs.StringVar(&c.Precision, "precision", "standard", "sliding window precision `P`: standard, or fine to replay every sliding-window rule at both precisions, side by side")
	fs.Int64Var(&c.Burst, "burst", 0, "with -algorithm token_bucket or leaky_bucket, or -compare: the bucket's capacity `N` (0: the limit)")
	fs.BoolVar(&c.Compare, "compare", false, "replay through every algorithm with the same limit and period and print one table")
	fs.DurationVar(&c.Mitigation, "mitigation", 0, "block a source this long once it goes over the limit (0: none)")
	fs.StringVar(&c.Key, "key", "ip", "what identifies a source in logs: comma-separated ip, path, host, header:NAME")
	fs.BoolVar(&c.CountBlocked, "count-blocked", false, "with -suggest: count blocked requests (as the rule's count_blocked)")
	fs.StringVar(&c.Config, "config", "", "take the rules from this configuration `file` instead of -limit, -period, -key")
	fs.StringVar(&c.Rule, "rule", "", "with -config: replay only this `domain/rule` (default: every rule)")
	fs.StringVar(&c.Format, "format", "auto", "log format: auto, clf, json or nasa")
	fs.IntVar(&c.IPv6Prefix, "ipv6-prefix", rules.DefaultIPv6Prefix, "group IPv6 sources by this prefix length (with -config: the config's)")
	fs.StringVar(&c.Synthetic, "synthetic", "", "replay the synthetic scenario `NAME` instead of logs; \"all\" for every one")
	fs.Uint64Var(&c.Seed, "seed", 0, "synthetic seed `N` (0: the scenario's default)")
	fs.StringVar(&c.Scale, "scale", "ci", "synthetic scale `S`: ci, medium or full")
	fs.BoolVar(&c.JSON, "json", false, "write JSON instead of tables")
	fs.BoolVar(&c.Progress, "progress", false, "draw a progress bar on standard error even when it is not a terminal (otherwise: a line every 10s)")
	fs.BoolVar(&c.Suggest, "suggest", false, "report per-source peak rates and suggest a limit for each rule")
	fs.Float64Var(&c.Percentile, "percentile", 99.9, "with -suggest: the percentile of per-source peaks to start from")
	fs.Float64Var(&c.Headroom, "headroom", 0.2, "with -suggest: headroom over that percentile (0.2 = 20%)")
	fs.IntVar(&c.Capacity, "capacity", 0, "replay every source through one shared store of `N` sources, in time order (0: a store per source)")
	fs.IntVar(&c.Workers, "workers", 0, "`N` sources replayed at once (0: GOMAXPROCS); results do not depend on it")
	fs.IntVar(&c.Sample, "sample", 0, "also report what accuracy_sample: `N` would: the store's decisions on the sources it samples, judged against an exact log of what the store counted (0: not)")
	fs.StringVar(&c.Plot, "plot", "", "also draw SVG figures into directory `DIR` (with edge-plot, a module of its own in cmd/edge-plot; see docs/accuracy.md)")
	fs.StringVar(&c.PlotSources, "plot-sources", "", "with -plot: the sources to follow, comma-separated `NAMES` as the report names them (default: the top missed and wrongly limited ones)")
	return fs
}
