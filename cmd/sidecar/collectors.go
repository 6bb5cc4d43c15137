package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttlekit/throttlekit/internal/telemetry"
	"github.com/throttlekit/throttlekit/pkg/engine"
)

// federationCollector and fleetCollector are the call sites newMetrics
// (metrics.go) registers: each hands its state to the collector in
// internal/telemetry, read at scrape time. They go when metrics.go moves
// there too.

// federationCollector reads the federated rules of m.fed, which serve sets
// after newMetrics (nil: not federated, no series).
type federationCollector struct{ m *metrics }

func (federationCollector) Describe(ch chan<- *prometheus.Desc) {
	telemetry.FederationCollector{}.Describe(ch)
}

func (c federationCollector) Collect(ch chan<- prometheus.Metric) {
	if fed := c.m.fed; fed != nil {
		telemetry.FederationCollector{Rules: fed.snapshot}.Collect(ch)
	}
}

// fleetCollector reads the engine's distributed gates at now().
type fleetCollector struct {
	e   *engine.Engine
	now func() time.Time
}

func (fleetCollector) Describe(ch chan<- *prometheus.Desc) { telemetry.FleetCollector{}.Describe(ch) }

func (c fleetCollector) Collect(ch chan<- prometheus.Metric) {
	telemetry.FleetCollector{Nodes: func() []engine.NodeStat { return c.e.NodeStats(c.now()) }}.Collect(ch)
}
