package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/edgerate/edge/replay"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Series names, as the figures' legends show them (the test looks for
// them in the SVG).
const (
	seriesExact          = "exact count N"
	seriesEstimate       = "estimate E"
	seriesLimit          = "limit L"
	seriesWronglyAllowed = "wrongly allowed"
	seriesWronglyLimited = "wrongly limited"
	seriesMeasured       = "measured (requests binned by N)"
	seriesPoisson        = "0.313/√λ (Poisson source)"
)

var (
	colExact    = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colEstimate = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	colLimit    = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}
	colAllowed  = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colLimited  = color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
)

// spanPeriods is how many periods of a followed source the first figure
// shows: the stretch around its first misjudged request.
const spanPeriods = 8

// drawSources draws one panel per followed source: N and E before each
// request over time, the limit, and the misjudged requests marked at
// their N.
func drawSources(w io.Writer, traces []replay.SourceTrace) error {
	plots := make([][]*plot.Plot, len(traces))
	for i, st := range traces {
		p, err := sourcePlot(st)
		if err != nil {
			return err
		}
		plots[i] = []*plot.Plot{p}
	}
	return writeTiles(w, plots, 8*vg.Inch, vg.Length(len(traces))*3*vg.Inch)
}

func sourcePlot(st replay.SourceTrace) (*plot.Plot, error) {
	pts := around(st)
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: limit %d per %s", st.Name, st.Limit, time.Duration(st.PeriodSeconds*float64(time.Second)))
	p.X.Label.Text = "time (s from the first request shown)"
	p.Y.Label.Text = "requests in the last period"
	p.Legend.Top = true
	if len(pts) == 0 {
		return p, nil
	}
	t0 := pts[0].At
	var exact, est, allowed, limited plotter.XYs
	for _, pt := range pts {
		x := float64(pt.At-t0) / 1e6
		exact = append(exact, plotter.XY{X: x, Y: float64(pt.Exact)})
		est = append(est, plotter.XY{X: x, Y: pt.Estimate})
		switch {
		case pt.Allowed && !pt.ExactAllowed:
			allowed = append(allowed, plotter.XY{X: x, Y: float64(pt.Exact)})
		case !pt.Allowed && pt.ExactAllowed:
			limited = append(limited, plotter.XY{X: x, Y: float64(pt.Exact)})
		}
	}
	last := exact[len(exact)-1].X
	lines := []struct {
		name string
		xys  plotter.XYs
		col  color.Color
	}{
		{seriesExact, exact, colExact},
		{seriesEstimate, est, colEstimate},
		{seriesLimit, plotter.XYs{{X: 0, Y: float64(st.Limit)}, {X: last, Y: float64(st.Limit)}}, colLimit},
	}
	for _, l := range lines {
		line, err := plotter.NewLine(l.xys)
		if err != nil {
			return nil, err
		}
		line.Color = l.col
		line.Width = vg.Points(1)
		if l.name == seriesLimit {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(line)
		p.Legend.Add(l.name, line)
	}
	for _, m := range []struct {
		name  string
		xys   plotter.XYs
		col   color.Color
		shape draw.GlyphDrawer
	}{
		{fmt.Sprintf("%s (%d)", seriesWronglyAllowed, len(allowed)), allowed, colAllowed, draw.TriangleGlyph{}},
		{fmt.Sprintf("%s (%d)", seriesWronglyLimited, len(limited)), limited, colLimited, draw.CrossGlyph{}},
	} {
		if len(m.xys) == 0 {
			continue
		}
		s, err := plotter.NewScatter(m.xys)
		if err != nil {
			return nil, err
		}
		s.GlyphStyle = draw.GlyphStyle{Color: m.col, Radius: vg.Points(3.5), Shape: m.shape}
		p.Add(s)
		p.Legend.Add(m.name, s)
	}
	top := float64(st.Limit)
	for _, pt := range pts {
		top = max(top, float64(pt.Exact), pt.Estimate)
	}
	p.Y.Min, p.Y.Max = 0, 1.45*top // room for the legend above the lines
	p.Legend.Left = true
	return p, nil
}

// around returns the points of st within spanPeriods periods around its
// first misjudged request (all of them if it has none and is short).
func around(st replay.SourceTrace) []replay.Point {
	pts := st.Points
	period := int64(st.PeriodSeconds * 1e6)
	if len(pts) == 0 || period <= 0 {
		return pts
	}
	center := pts[0].At + spanPeriods*period/2
	for _, pt := range pts {
		if pt.Allowed != pt.ExactAllowed {
			center = pt.At
			break
		}
	}
	from, to := center-spanPeriods*period/2, center+spanPeriods*period/2
	var out []replay.Point
	for _, pt := range pts {
		if pt.At >= from && pt.At <= to {
			out = append(out, pt)
		}
	}
	return out
}

// drawDifference draws the average difference D1 against the exact
// count N that each request saw (requests per period), binned by powers
// of two, on log axes, with the curve 0.313/√λ that the requests of a
// Poisson source of λ requests per period follow (docs/accuracy.md).
func drawDifference(w io.Writer, r *replay.Report) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s (limit %d): average difference by requests per period", r.Name, r.Rule.Limit)
	p.X.Label.Text = "requests in the last period N, as each request saw it"
	p.Y.Label.Text = "average difference |E − N|/N"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = ticks125{}, ticks125{}
	var xys plotter.XYs
	for _, b := range r.ByRate {
		if b.D1 > 0 && b.N > 0 {
			xys = append(xys, plotter.XY{X: b.N, Y: b.D1})
		}
	}
	if len(xys) == 0 {
		return fmt.Errorf("%s: no requests with a difference to draw", r.Name)
	}
	line, points, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	line.Color = colExact
	points.GlyphStyle = draw.GlyphStyle{Color: colExact, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{}}
	p.Add(line, points)
	p.Legend.Add(seriesMeasured, line, points)
	poisson := func(l float64) float64 { return 0.313 / math.Sqrt(l) }
	curve := plotter.NewFunction(poisson)
	xmin, xmax, ymin, ymax := plotter.XYRange(xys)
	curve.XMin, curve.XMax = xmin, xmax
	curve.Samples = 200
	curve.Color = colEstimate
	curve.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(curve)
	p.Legend.Add(seriesPoisson, curve)
	// A Function has no data range of its own: make room for it.
	p.Y.Min, p.Y.Max = min(ymin, poisson(xmax))/1.2, max(ymax, poisson(xmin))*1.2
	p.Legend.Left = true // bottom left: both fall to the right
	return writeTiles(w, [][]*plot.Plot{{p}}, 7*vg.Inch, 4.5*vg.Inch)
}

// drawSideBySide sets two labelled reports of the same traffic side by
// side: the share of requests each misjudged (wrongly allowed, wrongly
// limited), its average differences D1 and D3 (none for an algorithm
// without an estimate), and the most one source had admitted in a
// sliding period. Any two reports will do: two algorithms, two
// precisions, two runs.
func drawSideBySide(w io.Writer, a, b replay.Labelled) error {
	pct := func(f float64) float64 { return 100 * f }
	panels := []struct {
		title, unit string
		names       []string
		values      func(r *replay.Report) plotter.Values
	}{
		{"misjudged requests", "% of requests", []string{"wrongly allowed", "wrongly limited", "misjudged"},
			func(r *replay.Report) plotter.Values {
				c := r.CountAll
				return plotter.Values{pct(c.WronglyAllowedFraction), pct(c.WronglyLimitedFraction), pct(c.MisjudgedFraction)}
			}},
		{"average difference", "%", []string{"D1 (all)", "D3 (N ≥ L/2)"},
			func(r *replay.Report) plotter.Values {
				return plotter.Values{pct(r.CountAll.D1), pct(r.CountAll.D3)}
			}},
		{"worst sliding period admitted", "× limit", []string{"count_blocked: false"},
			func(r *replay.Report) plotter.Values {
				return plotter.Values{r.CountAdmitted.OvershootApprox}
			}},
	}
	row := make([]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Y.Label.Text = pn.unit
		top := 0.0
		for _, l := range []replay.Labelled{a, b} {
			for _, v := range pn.values(l.Report) {
				top = max(top, v)
			}
		}
		p.Y.Min, p.Y.Max = 0, 1.3*max(top, 1e-9) // room for the legend
		for j, l := range []replay.Labelled{a, b} {
			bars, err := plotter.NewBarChart(pn.values(l.Report), vg.Points(18))
			if err != nil {
				return err
			}
			bars.Color = []color.Color{colExact, colEstimate}[j]
			bars.LineStyle.Width = 0
			bars.Offset = vg.Points(float64(2*j-1) * 9)
			p.Add(bars)
			if i == 0 {
				p.Legend.Add(l.Label, bars)
			}
		}
		p.NominalX(pn.names...)
		p.Legend.Top, p.Legend.Left = true, true
		row[i] = p
	}
	return writeTiles(w, [][]*plot.Plot{row}, 11*vg.Inch, 4*vg.Inch)
}

// writeTiles draws plots, rows of columns, on one SVG canvas of w × h.
func writeTiles(out io.Writer, plots [][]*plot.Plot, w, h vg.Length) error {
	c := vgsvg.New(w, h)
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: len(plots), Cols: len(plots[0]), PadX: vg.Points(12), PadY: vg.Points(12),
		PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6)}
	canvases := plot.Align(plots, tiles, dc)
	for i, row := range plots {
		for j, p := range row {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	_, err := c.WriteTo(out)
	return err
}

// ticks125 marks a log axis at 1, 2 and 5 times the powers of ten in its
// range, with unlabelled minor ticks between: plot.LogTicks labels only
// powers of ten, of which a narrow range may hold none. A range of under
// a decade labels every tick, one of three decades or more only the
// powers of ten.
type ticks125 struct{}

func (ticks125) Ticks(lo, hi float64) []plot.Tick {
	decades := math.Log10(hi / lo)
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for m := 1.0; m < 10; m++ {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if decades < 1 || m == 1 || (decades < 3 && (m == 2 || m == 5)) {
				t.Label = strconv.FormatFloat(v, 'g', 3, 64)
				if v >= 1 && v < 1e7 {
					t.Label = strconv.FormatFloat(math.Round(v), 'f', -1, 64)
				}
			}
			ts = append(ts, t)
		}
	}
	return ts
}
