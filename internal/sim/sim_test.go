package sim

import (
	"bytes"
	"math"
	"testing"
	"time"
)

// shortScenario is a 40 s capacity drop with every controller, small enough
// to run several times per test.
const shortScenario = `
name: short
seed: 42
duration: 40s
settle: 5s
backend:
  base_latency: 20ms
  knee: 30
  jitter: 0.1
  capacity: [{at: 0s, factor: 1}, {at: 15s, factor: 0.5}, {at: 30s, factor: 1}]
load: [{at: 0s, rate: 400}, {at: 20s, rate: 600}]
queue: {max: 20, timeout: 20ms}
controllers:
  - {kind: static, limit: 20}
  - {kind: gradient2, params: {rtt_window: 2000, recalibration_interval: 5s, recalibration_jitter: 1s}}
  - {kind: aimd, params: {timeout: 35ms}}
  - {kind: p95, params: {target: 35ms, window: 2s}}
  - {kind: vegas, params: {recalibration_interval: 5s, recalibration_jitter: 1s}}
`

func mustParse(t *testing.T, yaml string) *Scenario {
	t.Helper()
	sc, err := Parse("short.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func csvs(t *testing.T, sc *Scenario) map[string][]byte {
	t.Helper()
	results, err := RunAll(sc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, r := range results {
		var b bytes.Buffer
		if err := WriteCSV(&b, r); err != nil {
			t.Fatal(err)
		}
		out[r.Controller] = b.Bytes()
	}
	return out
}

// The same seed gives the same bytes; another seed gives others.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	first := csvs(t, mustParse(t, shortScenario))
	again := csvs(t, mustParse(t, shortScenario))
	for name, b := range first {
		if !bytes.Equal(b, again[name]) {
			t.Errorf("%s: two runs with seed 42 wrote different CSVs", name)
		}
		if n := bytes.Count(b, []byte("\n")); n != 41 {
			t.Errorf("%s: %d CSV lines, want a header and 40 rows", name, n)
		}
	}
	sc := mustParse(t, shortScenario)
	sc.Seed = 43
	other := csvs(t, sc)
	for name, b := range first {
		if bytes.Equal(b, other[name]) {
			t.Errorf("%s: seeds 42 and 43 wrote the same CSV", name)
		}
	}
}

// Every controller sees the same arrivals, second by second.
func TestSameArrivalsForEveryController(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, shortScenario)
	results, err := RunAll(sc)
	if err != nil {
		t.Fatal(err)
	}
	ref := results[0]
	for _, r := range results[1:] {
		for i, row := range r.Rows {
			if row.Arrived != ref.Rows[i].Arrived {
				t.Fatalf("%s: %d arrivals in second %v, %s had %d", r.Controller, row.Arrived, row.T, ref.Controller, ref.Rows[i].Arrived)
			}
		}
	}
}

// Arrivals are Poisson at the stepped rate: each step's count is within 4
// standard deviations of rate × length, and every request is accounted for.
func TestArrivalsFollowTheRate(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, shortScenario)
	res, err := Run(sc, sc.Controllers[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from, to int // seconds
		rate     float64
	}{{0, 20, 400}, {20, 40, 600}} {
		n, arrived := 0, 0
		for _, r := range res.Rows[tc.from:tc.to] {
			arrived += r.Arrived
			n++
		}
		want := tc.rate * float64(n)
		if math.Abs(float64(arrived)-want) > 4*math.Sqrt(want) {
			t.Errorf("%ds–%ds: %d arrivals, want about %.0f", tc.from, tc.to, arrived, want)
		}
	}
	var arrived, admitted, dropped int
	for _, r := range res.Rows {
		arrived += r.Arrived
		admitted += r.Admitted
		dropped += r.Rejected + r.TimedOut
	}
	last := res.Rows[len(res.Rows)-1]
	if arrived != admitted+dropped+last.Queued {
		t.Errorf("%d arrived ≠ %d admitted + %d dropped + %d still queued", arrived, admitted, dropped, last.Queued)
	}
}

// The queue holds at most Queue.Max, nobody waits longer than
// Queue.Timeout, and the gate's cap holds: in flight never exceeds the limit
// by more than a decrease can leave draining.
func TestQueueBounds(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, shortScenario)
	results, err := RunAll(sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		for _, row := range r.Rows {
			if row.Queued > sc.Queue.Max {
				t.Errorf("%s at %v: %d queued, max %d", r.Controller, row.T, row.Queued, sc.Queue.Max)
			}
			if r.Kind == KindStatic && row.Inflight > row.Limit {
				t.Errorf("static at %v: %d in flight above the limit %d", row.T, row.Inflight, row.Limit)
			}
		}
		for _, p := range r.Phases {
			// Each end-to-end latency is its service latency plus a wait ≤
			// Timeout, so the percentiles differ by at most Timeout.
			if p.P99EndToEnd-p.P99 > sc.Queue.Timeout {
				t.Errorf("%s: end-to-end p99 %v exceeds service p99 %v by more than the queue timeout", r.Controller, p.P99EndToEnd, p.P99)
			}
		}
	}
}

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"none", nil, 0.99, 0},
		{"one", ms(7), 0.5, 7 * time.Millisecond},
		{"median of four is the second", ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{"p95 of twenty is the nineteenth", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20), 0.95, 19 * time.Millisecond},
		{"p99 of ten is the largest", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.sorted, tc.q); got != tc.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tc.sorted, tc.q, got, tc.want)
			}
		})
	}
}

func TestBackendLatency(t *testing.T) {
	b := Backend{Base: 50 * time.Millisecond, Knee: 60}
	for _, tc := range []struct {
		n    int
		c, j float64
		want time.Duration
	}{
		{1, 1, 1, 50*time.Millisecond + 13888},      // 50ms·(1 + 1/3600)
		{60, 1, 1, 100 * time.Millisecond},          // the knee: 2× base
		{20, 1.0 / 3, 1, 100 * time.Millisecond},    // the knee at a third of capacity
		{45, 1.0 / 3, 1, 303125 * time.Microsecond}, // the static limit after the drop
		{60, 1, 1.1, 110 * time.Millisecond},        // jitter multiplies
	} {
		got := b.latency(tc.n, tc.c, tc.j)
		if d := got - tc.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("latency(n=%d, c=%.3f, j=%.2f) = %v, want %v", tc.n, tc.c, tc.j, got, tc.want)
		}
	}
}

func TestChartsAndRows(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, shortScenario)
	results, err := RunAll(sc)
	if err != nil {
		t.Fatal(err)
	}
	var svg, png, rows, sum bytes.Buffer
	if err := WriteSVG(&svg, sc, results); err != nil {
		t.Fatal(err)
	}
	if err := WritePNG(&png, sc, results); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(svg.Bytes(), []byte("<svg")) || !bytes.HasPrefix(png.Bytes(), []byte("\x89PNG")) {
		t.Error("chart output is not SVG and PNG")
	}
	if err := WriteRows(&rows, results[1]); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(rows.Bytes(), []byte("\n")); n != 41 {
		t.Errorf("WriteRows wrote %d lines, want a header and 40", n)
	}
	if err := WriteSummary(&sum, sc, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"phase 0s–15s", "phase 30s–40s", "gradient2", "vegas"} {
		if !bytes.Contains(sum.Bytes(), []byte(want)) {
			t.Errorf("summary lacks %q:\n%s", want, sum.String())
		}
	}
}
