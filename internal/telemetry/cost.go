package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttlekit/throttlekit/pkg/engine"
)

// The cost limits' metrics (reserve, then settle, on ext_proc), by rule:
// read from the engine's counters at scrape time. One series each for
// every counted rule of a domain that has cost limits, so the labels are
// bounded by the policy.
var (
	descCostReserved = prometheus.NewDesc("throttlekit_cost_reserved_units_total", "Units cost-limit reservations took from the rule when requests started (ext_proc).", []string{"domain", "rule"}, nil)
	descCostRefunded = prometheus.NewDesc("throttlekit_cost_refunded_units_total", "Units settlements gave back to the window that reserved them: the reservation less the real cost (a refund whose window had ended is dropped, not counted).", []string{"domain", "rule"}, nil)
	descCostExtra    = prometheus.NewDesc("throttlekit_cost_extra_units_total", "Units settlements charged beyond their reservation: the real cost less the reservation, counted even past the limit.", []string{"domain", "rule"}, nil)
	descCostOverrun  = prometheus.NewDesc("throttlekit_cost_overrun_units_total", "Extra units of settlements the rule answered over the limit: charges that took a window past its limit (at least as much as the window went past it).", []string{"domain", "rule"}, nil)
)

// CostCollector is the cost limits' series, read from Costs at each
// scrape (engine.Engine.CostSnapshot; nil Costs: no series). Safe for
// concurrent scrapes when Costs is.
type CostCollector struct {
	Costs func() []engine.CostStats
}

// Describe sends the descriptors of every series c collects.
func (CostCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCostReserved, descCostRefunded, descCostExtra, descCostOverrun} {
		ch <- d
	}
}

// Collect sends each counted rule's cost series, read now.
func (c CostCollector) Collect(ch chan<- prometheus.Metric) {
	if c.Costs == nil {
		return
	}
	for _, s := range c.Costs() {
		for _, v := range []struct {
			d *prometheus.Desc
			n int64
		}{{descCostReserved, s.Reserved}, {descCostRefunded, s.Refunded}, {descCostExtra, s.Extra}, {descCostOverrun, s.Overrun}} {
			ch <- prometheus.MustNewConstMetric(v.d, prometheus.CounterValue, float64(v.n), s.Ref.Domain, s.Ref.Name)
		}
	}
}
