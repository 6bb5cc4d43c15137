package sim

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The chart's size: one row of two panels per controller under a title.
const (
	chartWidth  = 13 * vg.Inch
	rowHeight   = 2.7 * vg.Inch
	titleHeight = 0.6 * vg.Inch
	chartDPI    = 100
)

var (
	colLimit    = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff} // blue
	colInflight = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff} // orange
	colP95      = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff} // red
	colRef      = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff} // dark grey
	colChange   = color.RGBA{R: 0xbb, G: 0xbb, B: 0xbb, A: 0xff} // light grey
)

// WriteSVG draws the chart of results (see drawChart) as SVG.
func WriteSVG(w io.Writer, sc *Scenario, results []*Result) error {
	c := vgsvg.New(chartWidth, chartHeight(results))
	if err := drawChart(draw.New(c), sc, results); err != nil {
		return err
	}
	_, err := c.WriteTo(w)
	return err
}

// WritePNG draws the chart of results (see drawChart) as PNG.
func WritePNG(w io.Writer, sc *Scenario, results []*Result) error {
	c := vgimg.NewWith(vgimg.UseWH(chartWidth, chartHeight(results)), vgimg.UseDPI(chartDPI))
	if err := drawChart(draw.New(c), sc, results); err != nil {
		return err
	}
	_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}

func chartHeight(results []*Result) vg.Length {
	return titleHeight + rowHeight*vg.Length(max(len(results), 1))
}

// drawChart draws one row per controller: on the left its limit and the
// requests in flight, with the concurrency at which the backend's latency
// reaches 2× base; on the right its per-second p95 service latency, with the
// 2× base line. Grey verticals mark capacity and load changes.
func drawChart(dc draw.Canvas, sc *Scenario, results []*Result) error {
	if len(results) == 0 {
		return fmt.Errorf("sim: no results to chart")
	}
	title := text.Style{
		Color: color.Black, Font: font.From(sansFont, 15), Handler: plot.DefaultTextHandler,
		XAlign: draw.XCenter, YAlign: draw.YTop,
	}
	head := sc.Name
	if sc.Description != "" {
		head += ": " + sc.Description
	}
	top := dc.Max.Y - 0.12*vg.Inch
	dc.FillText(title, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: top}, head)
	sub := title
	sub.Font = font.From(sansFont, 11)
	sub.Color = colRef
	dc.FillText(sub, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: top - 0.26*vg.Inch},
		fmt.Sprintf("seed %d · base latency %v · grey verticals: capacity or load changes · good = latency ≤ %v",
			sc.Seed, sc.Backend.Base, GoodFactor*sc.Backend.Base))

	// A closed loop's work may be done long before the duration: draw to
	// the end of the longest run.
	xmax := sc.Duration.Seconds()
	if sc.Clients != nil && sc.Clients.Requests > 0 {
		xmax = 1
		for _, res := range results {
			if n := len(res.Rows); n > 0 {
				xmax = max(xmax, res.Rows[n-1].T.Seconds())
			}
		}
	}
	body := dc
	body.Max.Y -= titleHeight
	plots := make([][]*plot.Plot, len(results))
	for i, res := range results {
		last := i == len(results)-1
		left, err := countsPlot(sc, res, xmax, last)
		if err != nil {
			return err
		}
		right, err := latencyPlot(sc, res, xmax, last)
		if err != nil {
			return err
		}
		plots[i] = []*plot.Plot{left, right}
	}
	tiles := draw.Tiles{
		Rows: len(results), Cols: 2,
		PadX: 0.35 * vg.Inch, PadY: 0.15 * vg.Inch,
		PadLeft: 0.15 * vg.Inch, PadRight: 0.25 * vg.Inch, PadBottom: 0.1 * vg.Inch,
	}
	canvases := plot.Align(plots, tiles, body)
	for i := range plots {
		for j, p := range plots[i] {
			p.Draw(canvases[i][j])
		}
	}
	return nil
}

var sansFont = font.Font{Typeface: "Liberation", Variant: "Sans"}

// newPlot returns a plot in the chart's style: sans fonts, a grid, the
// legend at the top left, x in seconds.
func newPlot(xmax float64, title, ylabel string, xlabel bool) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = font.From(sansFont, 12)
	p.Title.Padding = 0.05 * vg.Inch
	p.Y.Label.Text = ylabel
	if xlabel {
		p.X.Label.Text = "time (s)"
	}
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sansFont, 11)
		a.Tick.Label.Font = font.From(sansFont, 10)
	}
	p.X.Min, p.X.Max = 0, xmax
	p.X.Tick.Marker = secondTicks{}
	p.Y.Min = 0
	p.Y.Tick.Marker = plainTicks{}
	p.Legend.TextStyle.Font = font.From(sansFont, 10)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = 0.08 * vg.Inch
	p.Legend.ThumbnailWidth = 0.3 * vg.Inch
	p.Legend.Padding = 0.02 * vg.Inch
	g := plotter.NewGrid()
	g.Vertical.Color = color.Gray{Y: 0xe8}
	g.Horizontal.Color = color.Gray{Y: 0xe8}
	p.Add(g)
	return p
}

// addLine adds a line through xs, ys to p, with a legend entry if name is
// given.
func addLine(p *plot.Plot, name string, pts plotter.XYs, c color.Color, width vg.Length, dashed bool) error {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color, l.Width = c, width
	if dashed {
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	p.Add(l)
	if name != "" {
		p.Legend.Add(name, l)
	}
	return nil
}

// addChanges draws a grey vertical at each capacity or load change, up to
// ymax; Y.Max is then set to ymax so the verticals span the panel.
func addChanges(p *plot.Plot, sc *Scenario, ymax float64) error {
	for _, t := range sc.changes()[1:] {
		x := t.Seconds()
		if x >= p.X.Max {
			break
		}
		if err := addLine(p, "", plotter.XYs{{X: x, Y: 0}, {X: x, Y: ymax}}, colChange, vg.Points(1.2), false); err != nil {
			return err
		}
	}
	p.Y.Max = ymax
	return nil
}

func countsPlot(sc *Scenario, res *Result, xmax float64, xlabel bool) (*plot.Plot, error) {
	p := newPlot(xmax, res.Controller+": limit and requests in flight", "requests", xlabel)
	n := len(res.Rows)
	limit, inflight := make(plotter.XYs, n), make(plotter.XYs, n)
	ymax := 1.0
	for i, r := range res.Rows {
		x := r.T.Seconds()
		limit[i] = plotter.XY{X: x, Y: float64(r.Limit)}
		inflight[i] = plotter.XY{X: x, Y: float64(r.Inflight)}
		ymax = max(ymax, float64(r.Limit), float64(r.Inflight))
	}
	// The knee, c·Knee, as a step line with a vertical at each change.
	b := sc.Backend
	var knee plotter.XYs
	for _, t := range sc.changes() {
		if t > 0 {
			knee = append(knee, plotter.XY{X: t.Seconds(), Y: knee[len(knee)-1].Y})
		}
		knee = append(knee, plotter.XY{X: t.Seconds(), Y: b.capacityAt(t) * b.Knee})
		ymax = max(ymax, b.capacityAt(t)*b.Knee)
	}
	knee = append(knee, plotter.XY{X: xmax, Y: knee[len(knee)-1].Y})
	ymax *= 1.5 // room for the legend
	if err := addChanges(p, sc, ymax); err != nil {
		return nil, err
	}
	kneeLabel := "c·knee: latency = 2× base at this concurrency"
	if b.Latency != Quadratic {
		kneeLabel = "c·knee: latency rises above this concurrency"
	}
	if err := addLine(p, kneeLabel, knee, colRef, vg.Points(1.2), true); err != nil {
		return nil, err
	}
	if cc := b.ConcurrencyCap; cc != nil {
		capLine := plotter.XYs{{X: 0, Y: float64(cc.Limit)}, {X: xmax, Y: float64(cc.Limit)}}
		if err := addLine(p, fmt.Sprintf("backend cap (%s above)", cc.Action), capLine, colP95, vg.Points(1.2), true); err != nil {
			return nil, err
		}
	}
	if err := addLine(p, "in flight", inflight, colInflight, vg.Points(1.5), false); err != nil {
		return nil, err
	}
	if err := addLine(p, "limit", limit, colLimit, vg.Points(2), false); err != nil {
		return nil, err
	}
	return p, nil
}

func latencyPlot(sc *Scenario, res *Result, xmax float64, xlabel bool) (*plot.Plot, error) {
	p := newPlot(xmax, res.Controller+": p95 service latency per second", "milliseconds", xlabel)
	good := ms(GoodFactor * sc.Backend.Base)
	p95 := make(plotter.XYs, len(res.Rows))
	ymax := good
	for i, r := range res.Rows {
		p95[i] = plotter.XY{X: r.T.Seconds(), Y: ms(r.P95)}
		ymax = max(ymax, p95[i].Y)
	}
	ymax *= 1.3
	if err := addChanges(p, sc, ymax); err != nil {
		return nil, err
	}
	ref := plotter.XYs{{X: 0, Y: good}, {X: xmax, Y: good}}
	if err := addLine(p, fmt.Sprintf("2× base = %v", GoodFactor*sc.Backend.Base), ref, colRef, vg.Points(1.2), true); err != nil {
		return nil, err
	}
	if err := addLine(p, "p95", p95, colP95, vg.Points(1.5), false); err != nil {
		return nil, err
	}
	return p, nil
}

// plainTicks label about five round values (1, 2, 2.5 or 5 × 10ⁿ apart),
// without trailing zeros.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	mag := math.Pow(10, math.Floor(math.Log10((hi-lo)/5)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if (hi-lo)/(m*mag) <= 6 {
			step = m * mag
			break
		}
	}
	var ts []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		if minor := v + step/2; minor < hi {
			ts = append(ts, plot.Tick{Value: minor})
		}
	}
	return ts
}

// secondTicks mark round numbers of seconds, at most about ten labels.
type secondTicks struct{}

func (secondTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 3600.0
	for _, s := range []float64{5, 10, 15, 30, 60, 120, 300, 600, 900, 1800} {
		if (hi-lo)/s <= 10 {
			step = s
			break
		}
	}
	var ts []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return ts
}
