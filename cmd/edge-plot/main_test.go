package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/replay"
	"github.com/edgerate/edge/trace"
)

// svgTexts parses an SVG document with encoding/xml and returns the text
// of its <text> elements; it fails the test if the root is not <svg> or
// the document does not parse.
func svgTexts(t *testing.T, data []byte) []string {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	var texts []string
	root, inText := "", false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not valid XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = el.Name.Local
			}
			inText = el.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(el))
			}
		case xml.EndElement:
			inText = false
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	return texts
}

// plotData is what edge replay -plot writes for the first cell of the
// nearlimit scenario (limit 10 a minute).
func plotData(t *testing.T) replay.PlotData {
	t.Helper()
	ins, err := replay.SyntheticInputs("nearlimit", 0, trace.CI)
	if err != nil {
		t.Fatal(err)
	}
	in := ins[0]
	ctx := context.Background()
	rep, err := replay.Run(ctx, in, replay.Options{ByRate: true})
	if err != nil {
		t.Fatal(err)
	}
	other := in
	other.Rule.Algorithm = algorithm.FixedWindow
	fixed, err := replay.Run(ctx, other, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	traces, err := replay.Follow(in, replay.FollowChoice(in, rep, 2))
	if err != nil {
		t.Fatal(err)
	}
	return replay.PlotData{
		Command: "edge replay -synthetic nearlimit -plot DIR",
		Report:  rep,
		Pair:    [2]replay.Labelled{{Label: "standard", Report: rep}, {Label: "fixed", Report: fixed}},
		Traces:  traces,
	}
}

// TestFiguresAreSVGWithTheirSeries draws the three figures from edge
// replay's data and checks that each is an SVG document holding the
// series it should.
func TestFiguresAreSVGWithTheirSeries(t *testing.T) {
	dir := t.TempDir()
	d := plotData(t)
	if len(d.Traces) != 2 {
		t.Fatalf("followed %d sources, want 2", len(d.Traces))
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nearlimit.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	tests := []struct {
		file string
		want []string
	}{
		{"nearlimit-sources.svg", []string{d.Traces[0].Name + ": limit 10 per 1m0s", d.Traces[1].Name + ": limit 10 per 1m0s",
			seriesExact, seriesEstimate, seriesLimit, seriesWronglyAllowed}},
		{"nearlimit-difference.svg", []string{seriesMeasured, seriesPoisson, "average difference |E − N|/N"}},
		{"nearlimit-side-by-side.svg", []string{"standard", "fixed", "misjudged requests", "average difference", "D1 (all)", "D3 (N ≥ L/2)", "worst sliding period admitted"}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			if !strings.Contains(stdout.String(), "wrote "+filepath.Join(dir, tc.file)) {
				t.Errorf("stdout %q does not report %s", stdout.String(), tc.file)
			}
			data, err := os.ReadFile(filepath.Join(dir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			texts := strings.Join(svgTexts(t, data), "\n")
			for _, w := range tc.want {
				if !strings.Contains(texts, w) {
					t.Errorf("no text %q among the SVG's texts:\n%s", w, texts)
				}
			}
		})
	}
}

func TestArguments(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"none", nil, 2, "usage: edge-plot DIR"},
		{"a flag", []string{"-h"}, 2, "usage: edge-plot DIR"},
		{"no data", []string{t.TempDir()}, 1, "no figure data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("got exit %d, %q; want %d, %q", code, stderr.String(), tc.code, tc.want)
			}
		})
	}
}
