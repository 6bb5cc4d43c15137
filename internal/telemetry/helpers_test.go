package telemetry

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gather is what c collects, by family name.
func gather(t *testing.T, c prometheus.Collector) map[string][]*dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*dto.Metric{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetMetric()
	}
	return out
}

// only is the value of the one series of name c collects.
func only(t *testing.T, c prometheus.Collector, name string) float64 {
	t.Helper()
	ms := gather(t, c)[name]
	if len(ms) != 1 {
		t.Fatalf("%s: %d series, want 1", name, len(ms))
	}
	if g := ms[0].GetGauge(); g != nil {
		return g.GetValue()
	}
	return ms[0].GetCounter().GetValue()
}

// label is m's value of the label name.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
