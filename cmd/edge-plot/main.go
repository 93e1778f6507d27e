// Command edge-plot draws the figures of edge replay -plot DIR: for each
// input's data that edge replay wrote into DIR (NAME.json, a
// replay.PlotData), three SVG files beside it:
//
//   - NAME-sources.svg: for the followed sources, the exact count and the
//     window's estimate over time against the limit, with the requests the
//     window misjudged marked;
//   - NAME-difference.svg: the average difference against requests per
//     period, on log axes, with the 0.313/√λ curve of a Poisson source;
//   - NAME-side-by-side.svg: two reports of the same traffic side by side
//     (drawSideBySide takes any two labelled reports).
//
// It is a command of its own because gonum.org/v1/plot, with its fonts,
// would make edge's binary about 36% larger; edge replay -plot runs it.
//
// Usage:
//
//	edge-plot DIR
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/edgerate/edge/replay"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is edge-plot: 0 on success, 1 when a file cannot be read or
// written, 2 for bad arguments.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "usage: edge-plot DIR (the directory edge replay -plot DIR wrote)")
		return 2
	}
	dir := args[0]
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		fmt.Fprintf(stderr, "edge-plot: no figure data (*.json) in %s: run edge replay -plot %s first\n", dir, dir)
		return 1
	}
	slices.Sort(files)
	for _, file := range files {
		written, err := drawFile(file)
		if err != nil {
			fmt.Fprintf(stderr, "edge-plot: %s: %v\n", file, err)
			return 1
		}
		for _, w := range written {
			fmt.Fprintf(stdout, "wrote %s\n", w)
		}
	}
	return 0
}

// drawFile draws the figures of one data file and returns the files it
// wrote.
func drawFile(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var d replay.PlotData
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	if d.Report == nil {
		return nil, fmt.Errorf("no report in it")
	}
	base := strings.TrimSuffix(file, ".json")
	var written []string
	for _, fig := range []struct {
		suffix string
		draw   func(io.Writer) error
		skip   bool
	}{
		{"-sources.svg", func(w io.Writer) error { return drawSources(w, d.Traces) }, len(d.Traces) == 0},
		{"-difference.svg", func(w io.Writer) error { return drawDifference(w, d.Report) }, len(d.Report.ByRate) == 0},
		{"-side-by-side.svg", func(w io.Writer) error { return drawSideBySide(w, d.Pair[0], d.Pair[1]) }, d.Pair[0].Report == nil || d.Pair[1].Report == nil},
	} {
		if fig.skip {
			continue
		}
		name := base + fig.suffix
		if err := writeFile(name, fig.draw); err != nil {
			return written, err
		}
		written = append(written, name)
	}
	return written, nil
}

func writeFile(name string, draw func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := draw(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
