package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttlekit/throttlekit/pkg/engine"
)

// The distributed gates' metrics, by gate: what the node admits up to and
// why, read from the engine's nodes at scrape time.
var (
	descFleetLocal   = prometheus.NewDesc("throttlekit_gate_fleet_local_limit", "A distributed gate's own inferred limit (L_local), as this sidecar reports it to the coordinator.", []string{"gate"}, nil)
	descFleetGlobal  = prometheus.NewDesc("throttlekit_gate_fleet_global_limit", "A distributed gate's fleet-wide ceiling (L_global: the min or median of the live sidecars' local limits) as of the latest grant; 0 before the first.", []string{"gate"}, nil)
	descFleetShare   = prometheus.NewDesc("throttlekit_gate_fleet_share", "This sidecar's share of the fleet ceiling, as of the latest grant.", []string{"gate"}, nil)
	descFleetCeiling = prometheus.NewDesc("throttlekit_gate_fleet_ceiling", "What this sidecar admits up to now: min(its share or outage share, its local limit); 0 while fenced.", []string{"gate"}, nil)
	descFleetLive    = prometheus.NewDesc("throttlekit_gate_fleet_sidecars", "Live sidecars of the gate's fleet, this one included, as of the latest grant.", []string{"gate"}, nil)
	descFleetFenced  = prometheus.NewDesc("throttlekit_gate_fleet_fenced", "1 while this sidecar has fenced itself (its lease is about to end unrenewed) and admits nothing.", []string{"gate"}, nil)
	descFleetDup     = prometheus.NewDesc("throttlekit_gate_fleet_duplicate", "1 while the coordinator refuses this sidecar's node as a duplicate: another live sidecar has this --node-id, and this one is left out of the fleet (not ready).", []string{"gate"}, nil)
	descFleetGenLag  = prometheus.NewDesc("throttlekit_gate_fleet_generation_lag", "Grant generations the coordinator issued to this sidecar that it has not yet seen applied: 1 in steady state, more while replies are lost or late.", []string{"gate"}, nil)
	descFleetTrips   = prometheus.NewDesc("throttlekit_gate_fleet_coordinator_round_trips_total", "Heartbeats this sidecar's node sent that returned, either way (counts restart when the gate is rebuilt).", []string{"gate"}, nil)
	descFleetErrors  = prometheus.NewDesc("throttlekit_gate_fleet_coordinator_errors_total", "Heartbeats that failed, by reason: duplicate (another live sidecar has this --node-id) or error.", []string{"gate", "reason"}, nil)
	descFleetFences  = prometheus.NewDesc("throttlekit_gate_fleet_fencings_total", "Times this sidecar fenced itself.", []string{"gate"}, nil)
)

// FleetCollector is the throttlekit_gate_fleet_* series, one set per
// distributed gate, read from Nodes at each scrape (nil Nodes: no series).
// Safe for concurrent scrapes when Nodes is.
type FleetCollector struct {
	// Nodes returns the node of every distributed gate in use, read now
	// (engine.Engine.NodeStats at the scrape's time).
	Nodes func() []engine.NodeStat
}

// Describe sends the descriptors of every series c collects.
func (FleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFleetLocal, descFleetGlobal, descFleetShare, descFleetCeiling, descFleetLive,
		descFleetFenced, descFleetDup, descFleetGenLag, descFleetTrips, descFleetErrors, descFleetFences} {
		ch <- d
	}
}

// Collect sends each distributed gate's series, read from c.Nodes now.
func (c FleetCollector) Collect(ch chan<- prometheus.Metric) {
	if c.Nodes == nil {
		return
	}
	for _, s := range c.Nodes() {
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{s.Gate}, labels...)...)
		}
		counter := func(d *prometheus.Desc, v int64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{s.Gate}, labels...)...)
		}
		fenced, dup := 0.0, 0.0
		if s.Fenced {
			fenced = 1
		}
		if s.Duplicate {
			dup = 1
		}
		gauge(descFleetLocal, float64(s.Local))
		gauge(descFleetGlobal, float64(s.Global))
		gauge(descFleetShare, float64(s.Share))
		gauge(descFleetCeiling, float64(s.Ceiling))
		gauge(descFleetLive, float64(s.Live))
		gauge(descFleetFenced, fenced)
		gauge(descFleetDup, dup)
		gauge(descFleetGenLag, float64(s.GenLag))
		counter(descFleetTrips, s.RoundTrips)
		counter(descFleetErrors, s.Duplicates, "duplicate")
		counter(descFleetErrors, s.Errors-s.Duplicates, "error")
		counter(descFleetFences, s.Fencings)
	}
}
