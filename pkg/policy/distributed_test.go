package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

func TestDistributedGate(t *testing.T) {
	d := parse(t, `
concurrency:
  - name: checkout
    match: {path_prefix: /checkout}
    distributed:
      coordinator: postgres
      heartbeat: 500ms
      lease_ttl: 2s
      aggregate: median
      split: demand
      acknowledged_handoff: true
      eager: true
      self_fence: {margin: 300ms}
      on_coordinator_outage: static_share
      static_share: 4
  - name: search
    match: {path_prefix: /search}
    distributed: {coordinator: redis}
`)
	want := policy.Distributed{Coordinator: "postgres", Heartbeat: 500 * time.Millisecond, LeaseTTL: 2 * time.Second,
		Aggregate: "median", Split: "demand", AcknowledgedHandoff: true, Eager: true, FenceMargin: 300 * time.Millisecond,
		OnOutage: policy.StaticShare, StaticShare: 4}
	if got := d.Gates[0].Distributed; got == nil || *got != want {
		t.Fatalf("distributed %+v, want %+v", got, want)
	}
	def := policy.Distributed{Coordinator: "redis", Heartbeat: time.Second, LeaseTTL: 2 * time.Second,
		Aggregate: "mean", Split: "equal", OnOutage: policy.KeepLastShare}
	if got := d.Gates[1].Distributed; got == nil || *got != def {
		t.Fatalf("defaults %+v, want %+v", got, def)
	}
	out, err := policy.Format(d, policy.Notes{})
	if err != nil {
		t.Fatal(err)
	}
	again := parse(t, string(out))
	if *again.Gates[0].Distributed != want || *again.Gates[1].Distributed != def {
		t.Fatalf("round trip lost the distributed block:\n%s", out)
	}
}

func TestDistributedRejections(t *testing.T) {
	gate := "concurrency:\n  - name: a\n    match: {path_prefix: /}\n    distributed: "
	for _, tc := range []struct{ body, want string }{
		{"{heartbeat: 1s}", "g.yaml:4: concurrency[0].distributed.coordinator: distributed needs a coordinator"},
		{"{coordinator: etcd}", `unknown coordinator "etcd" (want redis or postgres)`},
		{"{coordinator: redis, heartbeat: 2s, lease_ttl: 2s}", "g.yaml:4: concurrency[0].distributed.lease_ttl: lease_ttl 2s must be longer than heartbeat 2s"},
		{"{coordinator: redis, self_fence: {margin: 1s}}", "concurrency[0].distributed.self_fence.margin: self_fence margin 1s must be shorter than lease_ttl − heartbeat (2s − 1s)"},
		{"{coordinator: redis, on_coordinator_outage: static_share}", "on_coordinator_outage: static_share needs static_share"},
		{"{coordinator: redis, static_share: 3}", "static_share applies only with on_coordinator_outage: static_share"},
		{"{coordinator: redis, on_coordinator_outage: static_share, static_share: 0}", "static_share must be at least 1"},
		{"{coordinator: redis, aggregate: sum}", `unknown aggregate "sum" (want min, median or mean)`},
		{"{coordinator: redis, split: random}", `unknown split "random"`},
		{"{coordinator: redis, heartbeat: 1}", "heartbeat 1 has no unit"},
		{"{coordinator: redis, self_fence: {margn: 1s}}", `unknown key "margn"`},
		{"{coordinator: redis, leasettl: 1s}", `unknown key "leasettl"`},
		{"redis", "distributed must be a mapping"},
		{"{coordinator: redis}\n    queue: {max: 3, timeout: 50ms}", `gate "a" is distributed and cannot queue`},
	} {
		_, err := policy.Parse("g.yaml", []byte(gate+tc.body+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.body, err, tc.want)
		}
	}
}
