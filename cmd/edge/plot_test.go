package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgerate/edge/replay"
)

// TestReplayPlot runs edge replay -plot DIR with edge-plot on PATH, built
// from this module, and without it: the figures' data is written either
// way, the figures only when edge-plot is found, and its absence is an
// error that says where edge-plot lives. (edge-plot's own tests check the
// SVG files.)
func TestReplayPlot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds edge-plot")
	}
	bin := t.TempDir()
	build := exec.Command("go", "-C", "../edge-plot", "build", "-o", filepath.Join(bin, "edge-plot"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	args := []string{"replay", "-synthetic", "nearlimit", "-sample", "5", "-plot-sources", "1,2"}
	t.Run("edge-plot on PATH", func(t *testing.T) {
		t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		dir := filepath.Join(t.TempDir(), "figures")
		code, out, errOut := runEdge(append(args, "-plot", dir)...)
		if code != 0 {
			t.Fatalf("exit %d, stderr %s", code, errOut)
		}
		if !strings.Contains(out, "accuracy sample 1 in 5") {
			t.Errorf("stdout lacks the sample's figures:\n%s", out)
		}
		for _, name := range []string{"nearlimit_L_10", "nearlimit_L_100"} {
			b, err := os.ReadFile(filepath.Join(dir, name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var d replay.PlotData
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatal(err)
			}
			if len(d.Traces) != 2 || d.Traces[0].Name != "1" || len(d.Report.ByRate) == 0 ||
				d.Pair[0].Label != "sliding_window (standard)" || d.Pair[1].Label != "sliding_window (fine)" || !strings.HasPrefix(d.Command, "edge replay -synthetic nearlimit") {
				t.Errorf("%s: %d traces, %d rate bins, pair %q/%q, command %q", name, len(d.Traces), len(d.Report.ByRate), d.Pair[0].Label, d.Pair[1].Label, d.Command)
			}
			for _, fig := range []string{"-sources.svg", "-difference.svg", "-side-by-side.svg"} {
				if _, err := os.Stat(filepath.Join(dir, name+fig)); err != nil || !strings.Contains(errOut, "wrote "+filepath.Join(dir, name+fig)) {
					t.Errorf("%s%s: %v; stderr %s", name, fig, err, errOut)
				}
			}
		}
	})
	t.Run("no edge-plot", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		dir := t.TempDir()
		code, _, errOut := runEdge(append(args, "-plot", dir)...)
		if code != 1 || !strings.Contains(errOut, "go -C cmd/edge-plot build -o ../../edge-plot .") {
			t.Errorf("exit %d, stderr %q; want 1 and where edge-plot lives", code, errOut)
		}
		if _, err := os.Stat(filepath.Join(dir, "nearlimit_L_10.json")); err != nil {
			t.Errorf("figure data not written: %v", err)
		}
	})
}
