package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// edge replay -plot DIR. The figures are drawn by edge-plot, a module of
// its own (cmd/edge-plot), so that neither edge's binary nor its go.mod
// carries a plotting library and its fonts (docs/accuracy.md):
// replay.Command.Run writes each input's figures' data into DIR as JSON
// (replay.PlotData), and edge replay then runs edge-plot on DIR.

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
