package e2e

import (
	"bufio"
	"fmt"
	"image/color"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// soakSample is one second of a soak: the process as /proc and /metrics
// saw it at the end of the second, and the traffic during it.
type soakSample struct {
	at         time.Duration
	rss        float64 // bytes, /proc/<pid>/status VmRSS
	goroutines float64 // go_goroutines
	heap       float64 // bytes, go_memstats_heap_alloc_bytes
	gcCount    float64 // go_gc_duration_seconds_count: GCs since start
	gcPauseSum float64 // seconds, go_gc_duration_seconds_sum
	gcPauseMax float64 // seconds, go_gc_duration_seconds{quantile="1"}: the longest of the last 256 GCs
	l1Keys     float64 // throttlekit_l1_keys, all rules
	reloadsOK  float64 // throttlekit_policy_reloads_total{result="success"}
	// reloadsFailed is throttlekit_policy_reloads_total{result="failure"}.
	reloadsFailed   float64
	answers, errors int64 // during the second
	events          []string
}

// sampleSidecar reads the sidecar's RSS from /proc and the rest from one
// scrape of /metrics (its Go collector).
func sampleSidecar(s *sidecar, pid int) (soakSample, error) {
	var smp soakSample
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return smp, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			if err != nil {
				return smp, fmt.Errorf("VmRSS %q: %v", rest, err)
			}
			smp.rss = kb * 1024
		}
	}
	if smp.rss == 0 {
		return smp, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	code, body, err := s.get("/metrics")
	if err != nil || code != http.StatusOK {
		return smp, fmt.Errorf("GET /metrics: status %d, error %v", code, err)
	}
	m, err := parseMetrics(body)
	if err != nil {
		return smp, err
	}
	smp.goroutines = m.get("go_goroutines")
	smp.heap = m.get("go_memstats_heap_alloc_bytes")
	smp.gcCount = m.get("go_gc_duration_seconds_count")
	smp.gcPauseSum = m.get("go_gc_duration_seconds_sum")
	smp.gcPauseMax = m.get("go_gc_duration_seconds", "quantile", "1")
	smp.l1Keys = m.get("throttlekit_l1_keys")
	smp.reloadsOK = m.get("throttlekit_policy_reloads_total", "result", "success")
	smp.reloadsFailed = m.get("throttlekit_policy_reloads_total", "result", "failure")
	if smp.goroutines == 0 || smp.heap == 0 {
		return smp, fmt.Errorf("/metrics has no go_goroutines or go_memstats_heap_alloc_bytes")
	}
	return smp, nil
}

// soakTable is the soak as a markdown table, a row per minute (per tenth
// of the run when it is shorter than 10 minutes).
func soakTable(samples []soakSample, d time.Duration) string {
	bucket := time.Minute
	if d < 10*time.Minute {
		bucket = d / 10
	}
	var b strings.Builder
	b.WriteString("| until | answers/s | errors/s | RSS MiB (max) | heap MiB (max) | goroutines (max) | L1 keys (max) | GCs | GC pause mean | GC pause max | events |\n")
	b.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	var prev soakSample
	for i := 0; i < len(samples); {
		end := time.Duration(int64(samples[i].at/bucket)+1) * bucket
		var row []soakSample
		for ; i < len(samples) && samples[i].at < end; i++ {
			row = append(row, samples[i])
		}
		var ans, errs int64
		var rss, heap, gor, keys float64
		var events []string
		for _, smp := range row {
			ans, errs = ans+smp.answers, errs+smp.errors
			rss, heap, gor, keys = max(rss, smp.rss), max(heap, smp.heap), max(gor, smp.goroutines), max(keys, smp.l1Keys)
			events = append(events, smp.events...)
		}
		last := row[len(row)-1]
		secs := (last.at - prev.at).Seconds()
		gcs := last.gcCount - prev.gcCount
		mean := "–"
		if gcs > 0 {
			mean = fmtSeconds((last.gcPauseSum - prev.gcPauseSum) / gcs)
		}
		fmt.Fprintf(&b, "| %v | %.0f | %.1f | %.1f | %.1f | %.0f | %.0f | %.0f | %s | %s | %s |\n",
			last.at.Round(time.Second), float64(ans)/secs, float64(errs)/secs, rss/(1<<20), heap/(1<<20), gor, keys,
			gcs, mean, fmtSeconds(last.gcPauseMax), summarize(events))
		prev = last
	}
	return b.String()
}

func fmtSeconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond).String()
}

// summarize counts repeated events: "reload×12, restart, up".
func summarize(events []string) string {
	var order []string
	n := map[string]int{}
	for _, e := range events {
		if n[e] == 0 {
			order = append(order, e)
		}
		n[e]++
	}
	for i, e := range order {
		if n[e] > 1 {
			order[i] = fmt.Sprintf("%s×%d", e, n[e])
		}
	}
	return strings.Join(order, ", ")
}

// writeSoakReport writes dir/soak.md (the table), dir/soak.csv (every
// sample) and dir/soak.png: RSS and heap, goroutines, and answers and
// errors per second over time, the faults shaded by vertical lines.
func writeSoakReport(dir string, samples []soakSample, faults []soakFault, table string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.md"), []byte(table), 0o644); err != nil {
		return err
	}
	if err := writeSoakCSV(filepath.Join(dir, "soak.csv"), samples); err != nil {
		return err
	}
	var rss, heap, gor, ans, errs plotter.XYs
	for _, smp := range samples {
		x := smp.at.Seconds()
		rss = append(rss, plotter.XY{X: x, Y: smp.rss / (1 << 20)})
		heap = append(heap, plotter.XY{X: x, Y: smp.heap / (1 << 20)})
		gor = append(gor, plotter.XY{X: x, Y: smp.goroutines})
		ans = append(ans, plotter.XY{X: x, Y: float64(smp.answers)})
		errs = append(errs, plotter.XY{X: x, Y: float64(smp.errors)})
	}
	grey := color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}
	panel := func(title, ylabel string, lines ...any) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, "seconds", ylabel
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = true, true
		top := 0.0
		for i := 0; i < len(lines); i += 3 {
			for _, xy := range lines[i+1].(plotter.XYs) {
				top = max(top, xy.Y)
			}
			if err := addLine(p, lines[i].(string), lines[i+1].(plotter.XYs), lines[i+2].(color.Color), nil); err != nil {
				return nil, err
			}
		}
		p.Y.Max = top * 1.35 // room for the legend
		for i, f := range faults {
			name := ""
			if i == 0 {
				name = "faults (Redis restart, latency spike)"
			}
			x := f.start.Seconds()
			l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: p.Y.Max}})
			if err != nil {
				return nil, err
			}
			l.Color, l.Dashes = grey, []vg.Length{vg.Points(2), vg.Points(2)}
			p.Add(l)
			if name != "" {
				p.Legend.Add(name, l)
			}
		}
		return p, nil
	}
	memory, err := panel("sidecar memory", "MiB", "RSS (/proc VmRSS)", rss, colKill, "Go heap in use", heap, colGlobal)
	if err != nil {
		return err
	}
	routines, err := panel("sidecar goroutines", "goroutines", "go_goroutines", gor, colInflight)
	if err != nil {
		return err
	}
	traffic, err := panel("traffic", "per second", "answers", ans, colGlobal, "errors", errs, colKill)
	if err != nil {
		return err
	}
	return writeStackedPNG(filepath.Join(dir, "soak.png"), [][]*plot.Plot{{memory}, {routines}, {traffic}})
}

func writeSoakCSV(path string, samples []soakSample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "seconds,rss_bytes,heap_bytes,goroutines,l1_keys,gc_count,gc_pause_sum_seconds,gc_pause_max_seconds,answers,errors,events")
	for _, s := range samples {
		fmt.Fprintf(w, "%.3f,%.0f,%.0f,%.0f,%.0f,%.0f,%.6f,%.6f,%d,%d,%s\n", s.at.Seconds(), s.rss, s.heap, s.goroutines, s.l1Keys,
			s.gcCount, s.gcPauseSum, s.gcPauseMax, s.answers, s.errors, strings.Join(s.events, " "))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
