package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy is a toxiproxy proxy in this process (the library, no external
// binary) between a client and a real server: faults are toxics added to
// it and removed, mid-traffic.
type Proxy struct {
	// Addr is where clients connect instead of the server.
	Addr string

	tb    testing.TB
	proxy *toxiproxy.Proxy
}

// StartProxy starts a proxy on a free loopback port to upstream
// (host:port) and stops it on cleanup.
func StartProxy(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	// The toxics log through zerolog's global logger, at trace level on
	// every interrupted write: keep test output to what the test says.
	zerolog.SetGlobalLevel(zerolog.WarnLevel)
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "testenv", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		tb.Fatalf("testenv: starting a proxy to %s: %v", upstream, err)
	}
	tb.Cleanup(p.Stop)
	return &Proxy{Addr: p.Listen, tb: tb, proxy: p}
}

// Blackhole holds every byte flowing in stream ("upstream": client to
// server; "downstream": server to client) without closing the
// connection: a partition that hangs. With downstream, requests still
// reach the server but no reply comes back.
func (p *Proxy) Blackhole(stream string) {
	p.add("blackhole", "timeout", stream, `{"timeout": 0}`)
}

// Latency delays every byte flowing in stream by d.
func (p *Proxy) Latency(stream string, d time.Duration) {
	p.add("latency", "latency", stream, fmt.Sprintf(`{"latency": %d}`, d.Milliseconds()))
}

// Toxic adds a toxic of kind (toxiproxy's: latency, bandwidth, slow_close,
// timeout, reset_peer, slicer, limit_data) with its attributes (a JSON
// object) to stream, named kind-stream: one of each per stream.
func (p *Proxy) Toxic(kind, stream, attributes string) {
	p.tb.Helper()
	p.add(kind, kind, stream, attributes)
}

// Heal removes every toxic and drops the connections the faults held, so
// clients reconnect to a healthy path.
func (p *Proxy) Heal() {
	p.proxy.Toxics.ResetToxics(context.Background())
	for _, on := range []bool{false, true} {
		in := &toxiproxy.Proxy{Name: p.proxy.Name, Listen: p.Addr, Upstream: p.proxy.Upstream, Enabled: on}
		if err := p.proxy.Update(in); err != nil {
			p.tb.Fatalf("testenv: healing the proxy: %v", err)
		}
	}
}

func (p *Proxy) add(name, kind, stream, attributes string) {
	p.tb.Helper()
	js := fmt.Sprintf(`{"name": %q, "type": %q, "stream": %q, "toxicity": 1, "attributes": %s}`, name+"-"+stream, kind, stream, attributes)
	if _, err := p.proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		p.tb.Fatalf("testenv: adding toxic %s: %v", js, err)
	}
}

// Toxics names the toxics the proxy holds now, as name:type.
func (p *Proxy) Toxics() []string {
	var names []string
	for _, t := range p.proxy.Toxics.GetToxicArray() {
		if w, ok := t.(*toxics.ToxicWrapper); ok {
			names = append(names, w.Name+":"+w.Type)
		} else {
			names = append(names, fmt.Sprintf("%T", t))
		}
	}
	return names
}
