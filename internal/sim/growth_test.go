// The targets of issue 34, item 1: with their defaults the adaptive
// controllers use a healthy backend fully (see docs/adaptive-concurrency.md,
// Growth on a healthy backend).
package sim

import (
	"testing"
)

// On clean-ramp (room for 300 in flight, 300 clients, nothing in the way)
// every controller delivers at least 85% of a static 300's throughput.
func TestGrowthCleanRamp(t *testing.T) {
	_, res := runField(t, "clean-ramp")
	static := res[KindStatic].Stats.Throughput
	for _, k := range adaptiveKinds {
		st := res[k].Stats
		t.Logf("%-9s throughput %7.1f/s = %5.1f%% of static 300's %7.1f/s", k, st.Throughput, 100*st.Throughput/static, static)
		if st.Throughput < 0.85*static {
			t.Errorf("%s: %.1f requests a second, %.0f%% of a static 300's %.1f; want ≥ 85%%", k, st.Throughput, 100*st.Throughput/static, static)
		}
	}
}

// On burst (latency flat to 200 in flight, 20,000 requests from 400
// clients) every controller delivers the burst within 1.5× the time a
// static limit of 200 takes.
func TestGrowthBurst(t *testing.T) {
	_, res := runField(t, "burst")
	static := res[KindStatic].Stats
	if !static.Finished {
		t.Fatalf("static 200 did not finish the burst by %v", static.End)
	}
	for _, k := range adaptiveKinds {
		st := res[k].Stats
		t.Logf("%-9s finished %v in %v = %.2f× static 200's %v", k, st.Finished, st.End, st.End.Seconds()/static.End.Seconds(), static.End)
		if !st.Finished || st.End.Seconds() > 1.5*static.End.Seconds() {
			t.Errorf("%s: %d of the burst delivered in %v (finished %v), more than 1.5× static 200's %v", k, st.Delivered, st.End, st.Finished, static.End)
		}
	}
}

// On step-knee (make bench-gate's backend: latency doubles one request
// past 40 in flight, so an overshoot halves what it completes; 80 clients,
// a refused one retries after 25 ms) every controller delivers at least
// 80% of the ideal, a static 40's throughput. Before the cut to the knee
// (see adaptive's knee) each overshoot left gradient2 at 30 in flight
// (74%) and p95 at 34 (77%): a loss halved the limit, or took gradient2's
// floor, and CUBIC's regrowth took seconds.
func TestGrowthStepKnee(t *testing.T) {
	_, res := runField(t, "step-knee")
	ideal := res[KindStatic].Stats.Throughput
	for _, k := range adaptiveKinds {
		st := res[k].Stats
		t.Logf("%-9s throughput %6.1f/s = %5.1f%% of static 40's %6.1f/s, in flight %.1f", k, st.Throughput, 100*st.Throughput/ideal, ideal, st.MeanInflight)
		if st.Throughput < 0.80*ideal {
			t.Errorf("%s: %.1f requests a second, %.0f%% of a static 40's %.1f; want ≥ 80%%", k, st.Throughput, 100*st.Throughput/ideal, ideal)
		}
	}
}
