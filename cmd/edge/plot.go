package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/edgerate/edge/replay"
	"github.com/edgerate/edge/window"
)

// edge replay -plot DIR. The figures are drawn by edge-plot, a module of
// its own (cmd/edge-plot), so that neither edge's binary nor its go.mod
// carries a plotting library and its fonts (docs/accuracy.md): edge replay
// writes each input's figures' data into DIR as JSON (replay.PlotData) and
// runs edge-plot on DIR.

// plotData writes in's figures' data into f.plot: r (with ByRate), r
// beside the same traffic counted by another algorithm (the fixed window
// beside the sliding window, the sliding window beside any other), and
// the followed sources.
func (f *replayFlags) plotData(ctx context.Context, in replay.Input, r *replay.Report, opts replay.Options) error {
	// The side-by-side figure: a sliding window at both precisions, any
	// other algorithm beside the sliding window.
	other := in
	switch {
	case in.Rule.Algorithm == window.SlidingWindow && in.Rule.Precision == window.Fine:
		other.Rule.Precision = window.Standard
	case in.Rule.Algorithm == window.SlidingWindow:
		other.Rule.Precision = window.Fine
	default:
		other.Rule.Algorithm = window.SlidingWindow
	}
	second, err := replay.Run(ctx, other, opts)
	if err != nil {
		return err
	}
	names := replay.FollowChoice(in, r, 3)
	if f.plotSources != "" {
		names = strings.Split(f.plotSources, ",")
	}
	var traces []replay.SourceTrace
	if len(names) > 0 {
		if traces, err = replay.Follow(in, names); err != nil {
			return err
		}
	}
	data := replay.PlotData{
		Command: f.command,
		Report:  r,
		Pair: [2]replay.Labelled{
			{Label: plotLabel(r), Report: r},
			{Label: plotLabel(second), Report: second},
		},
		Traces: traces,
	}
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.plot, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(f.plot, plotFileName(r.Name)+".json"), b, 0o644)
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

// errNoPlotter says that edge-plot was not found.
var errNoPlotter = errors.New("edge-plot, which draws the figures, is neither beside edge nor on PATH; " +
	"build it beside edge with `go -C cmd/edge-plot build -o ../../edge-plot .` at the top of edge's source tree (a module of its own there), " +
	"or run `go -C cmd/edge-plot run . DIR`")

// drawPlots runs edge-plot on dir: the one beside the running binary, or
// the first on PATH.
func drawPlots(ctx context.Context, dir string, stderr io.Writer) error {
	bin := ""
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "edge-plot"); isFile(p) {
			bin = p
		}
	}
	if bin == "" {
		p, err := exec.LookPath("edge-plot")
		if err != nil {
			return fmt.Errorf("-plot: wrote the figures' data into %s, but %w", dir, errNoPlotter)
		}
		bin = p
	}
	cmd := exec.CommandContext(ctx, bin, dir)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("-plot: %s %s: %w", bin, dir, err)
	}
	return nil
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// plotLabel names a report in the side-by-side figure: its algorithm, and
// a sliding window's precision.
func plotLabel(r *replay.Report) string {
	if r.Rule.Algorithm == window.SlidingWindow.String() {
		return r.Rule.Algorithm + " (" + r.Precision + ")"
	}
	return r.Rule.Algorithm
}
