package e2e

import (
	"bufio"
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	colInflight = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff} // orange
	colGlobal   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff} // blue
	colC        = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff} // dark grey
	colKill     = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff} // red
)

// writeFleetChart draws one panel per run — the backend's in flight, the
// coordinator's L_global, the capacity C and the kill — into
// dir/fleet-gate.png, and writes each run's samples to
// dir/fleet-gate-<run>.csv.
func writeFleetChart(dir string, runs []*fleetRun) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var plots [][]*plot.Plot
	top := 0.0
	for _, r := range runs {
		for _, s := range r.samples {
			top = max(top, float64(max(s.inflight, s.global)))
		}
	}
	for _, r := range runs {
		if err := writeFleetCSV(filepath.Join(dir, "fleet-gate-"+r.name+".csv"), r); err != nil {
			return err
		}
		p, err := fleetPanel(r, top*1.4) // headroom for the legend
		if err != nil {
			return err
		}
		plots = append(plots, []*plot.Plot{p})
	}
	return writeStackedPNG(filepath.Join(dir, "fleet-gate.png"), plots)
}

// writeStackedPNG draws plots (one column) one above the other, aligned,
// into a PNG at path.
func writeStackedPNG(path string, plots [][]*plot.Plot) error {
	const w, rowH = 11 * vg.Inch, 2.6 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, rowH*vg.Length(len(plots))), vgimg.UseDPI(100))
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4)}
	canvases := plot.Align(plots, tiles, draw.New(img))
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fleetPanel(r *fleetRun, top float64) (*plot.Plot, error) {
	p := plot.New()
	title := fmt.Sprintf("%d sidecars, coordinator: %s", fleetSize, r.name)
	switch r.name {
	case "independent":
		title = fmt.Sprintf("%d sidecars, no coordinator (each gate on its own)", fleetSize)
	case "single":
		title = fmt.Sprintf("one sidecar with all %d clients (the reference)", fleetSize*fleetWorkers)
	}
	p.Title.Text = title
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "requests"
	p.Y.Min, p.Y.Max = 0, top
	p.Legend.Top, p.Legend.Left = true, true
	var in, global plotter.XYs
	for _, s := range r.samples {
		x := s.at.Seconds()
		in = append(in, plotter.XY{X: x, Y: float64(s.inflight)})
		if s.global > 0 {
			global = append(global, plotter.XY{X: x, Y: float64(s.global)})
		}
	}
	if len(in) == 0 {
		return p, nil
	}
	last := in[len(in)-1].X
	if err := addLine(p, "backend in flight", in, colInflight, nil); err != nil {
		return nil, err
	}
	if len(global) > 0 {
		if err := addLine(p, "L_global (fleet ceiling)", global, colGlobal, nil); err != nil {
			return nil, err
		}
	}
	if err := addLine(p, fmt.Sprintf("true capacity C = %d", fleetC), plotter.XYs{{X: 0, Y: fleetC}, {X: last, Y: fleetC}},
		colC, []vg.Length{vg.Points(4), vg.Points(3)}); err != nil {
		return nil, err
	}
	if r.killAt > 0 {
		k := r.killAt.Seconds()
		if err := addLine(p, "one sidecar killed", plotter.XYs{{X: k, Y: 0}, {X: k, Y: top}}, colKill, []vg.Length{vg.Points(2), vg.Points(2)}); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func addLine(p *plot.Plot, name string, xys plotter.XYs, c color.Color, dashes []vg.Length) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color, l.Width, l.Dashes = c, vg.Points(1.2), dashes
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

func writeFleetCSV(path string, r *fleetRun) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "seconds,backend_inflight,l_global,sum_share,live")
	for _, s := range r.samples {
		fmt.Fprintf(w, "%.3f,%d,%d,%d,%d\n", s.at.Seconds(), s.inflight, s.global, s.shares, s.live)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
