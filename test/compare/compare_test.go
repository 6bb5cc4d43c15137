package compare

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/internal/sim"
)

// scenarioDir holds the scenarios sidecar simulate ships.
var scenarioDir = filepath.Join("..", "..", "config", "scenarios")

func loadScenario(t *testing.T, name string) *sim.Scenario {
	t.Helper()
	sc, err := sim.Load(filepath.Join(scenarioDir, name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// ourKinds are the controllers the bar holds, each on every scenario.
var ourKinds = []string{sim.KindGradient2, sim.KindAIMD, sim.KindP95, sim.KindVegas}

// The bar of issue #15: with defaults, none of our adaptive controllers
// fails more requests (Failures: errors + client timeouts in a closed
// loop, arrivals without a good answer in open loop) than the best peer
// controller, on any scenario.
func TestNoMoreFailuresThanBestPeer(t *testing.T) {
	scenarios, err := LoadDir(scenarioDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			c, err := Compare(sc)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range c.Entries {
				st := e.Result.Stats
				t.Logf("%-6s %-22s failures %7d (errors %6d timeouts %5d rejected %6d) | in flight max %4d mean %6.1f | latency/base %6.2f",
					e.Role, e.Result.Controller, Failures(sc, st), st.Errors, st.Timeouts, st.Rejected, st.MaxInflight, st.MeanInflight, st.LatencyRatio)
			}
			verdicts := c.Verdicts()
			var kinds []string
			for _, v := range verdicts {
				kinds = append(kinds, v.Controller)
				if !v.OK() {
					t.Errorf("%s: %d failures, %d more than the best peer, %s (%d)",
						v.Controller, v.Failures, v.Failures-v.BestPeerFailures, v.BestPeer, v.BestPeerFailures)
				}
			}
			for _, k := range ourKinds {
				if !slices.Contains(kinds, k) {
					t.Errorf("the scenario does not run our %s (it runs %s)", k, strings.Join(kinds, ", "))
				}
			}
		})
	}
}

// The same scenario gives the same results, peers included: peer-vegas and
// peer-gradient draw from math/rand's global source, which each peer run
// reseeds.
func TestCompareIsDeterministic(t *testing.T) {
	for _, name := range []string{"drop-cap", "capacity-drop-defaults"} {
		t.Run(name, func(t *testing.T) {
			sc := loadScenario(t, name)
			a, err := Compare(sc)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Compare(sc)
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Entries) != len(b.Entries) {
				t.Fatalf("%d entries, then %d", len(a.Entries), len(b.Entries))
			}
			for i := range a.Entries {
				if ra, rb := a.Entries[i].Result, b.Entries[i].Result; !reflect.DeepEqual(ra, rb) {
					t.Errorf("%s: the second run differs: stats %+v, then %+v", ra.Controller, ra.Stats, rb.Stats)
				}
			}
		})
	}
}

// capacity-drop.yaml's controllers at their defaults are
// capacity-drop-defaults.yaml's: kinds, bounds and p95's target kept,
// every other parameter dropped.
func TestOursAtDefaults(t *testing.T) {
	ours, tuned := OursAtDefaults(loadScenario(t, "capacity-drop"))
	want := loadScenario(t, "capacity-drop-defaults").Controllers[1:] // after the static limit
	if len(ours) != len(want) {
		t.Fatalf("%d controllers at defaults, want %d", len(ours), len(want))
	}
	for i, got := range ours {
		w := want[i]
		if got.Name != w.Name || got.Kind != w.Kind || got.MinLimit != w.MinLimit || got.MaxLimit != w.MaxLimit || got.InitialLimit != w.InitialLimit {
			t.Errorf("%s: %+v, want %+v", w.Name, got, w)
		}
		if len(got.Params) != len(w.Params) || got.Params["target"].Value != w.Params["target"].Value {
			t.Errorf("%s: params %v, want %v", w.Name, got.Params, w.Params)
		}
		if tuned[i].Kind != w.Kind || len(tuned[i].Params) == 0 {
			t.Errorf("tuned %d: %s with %d params, want the file's %s with its own", i, tuned[i].Name, len(tuned[i].Params), w.Kind)
		}
	}
	ours, tuned = OursAtDefaults(loadScenario(t, "defer-cap"))
	if len(ours) != 4 || len(tuned) != 0 {
		t.Errorf("defer-cap: %d at defaults and %d tuned, want its 4 as they are and none tuned", len(ours), len(tuned))
	}
}
