package engine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

const federatedPolicy = `
domain: api
descriptors:
  - key: tenant
    mode: federated
    federation: {batch: 4}
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// TestFederatedRulesShareOneBudget: two engines, each its own region,
// share one federated budget through one coordinator; a strict rule beside
// it stays local.
func TestFederatedRulesShareOneBudget(t *testing.T) {
	coord := federation.NewMemoryCoordinator(nil)
	var asked []engine.FederatedRule
	regionEngine := func(name string) *engine.Engine {
		e, err := engine.New(engine.Options{Store: memstore.New(), Federation: func(fr engine.FederatedRule) (engine.Federated, error) {
			asked = append(asked, fr)
			r, err := federation.NewRegion(federation.RegionConfig{Name: name, Coordinator: coord})
			return engine.Federated{Store: r, Batch: int64(fr.Federation.Batch), Timeout: time.Second}, err
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Load(bg, load(t, map[string]string{"api.yaml": federatedPolicy})); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close(bg) })
		return e
	}
	eu, us := regionEngine("eu"), regionEngine("us")
	if len(asked) != 2 || asked[0].Rule.Limit != 10 || asked[0].Federation.Batch != 4 || asked[0].Ref.Domain != "api" {
		t.Fatalf("federated rules asked for: %+v", asked)
	}
	now := storetest.Timeline()
	var got []string
	for i := range 14 {
		e := eu
		if i%2 == 1 {
			e = us
		}
		got = append(got, decide(t, e, req("api", "tenant=a"), now).Code.String())
	}
	ok := strings.Count(strings.Join(got, " "), "OK")
	if ok != 10 {
		t.Fatalf("two regions admitted %d of 14 in one window, want the shared limit 10: %v", ok, got)
	}
}

func TestFederatedRuleNeedsAFederation(t *testing.T) {
	e, err := engine.New(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(bg)
	err = e.Load(bg, load(t, map[string]string{"api.yaml": federatedPolicy}))
	if err == nil || !strings.Contains(err.Error(), "mode: federated needs this process to join a federation: start it with --region and --federation-url") {
		t.Fatalf("load without a federation: %v", err)
	}
	// A region that cannot be made says why, at load.
	e2, _ := engine.New(engine.Options{Store: memstore.New(), Federation: func(engine.FederatedRule) (engine.Federated, error) {
		return engine.Federated{}, fmt.Errorf("outage regional_only needs an L2")
	}})
	defer e2.Close(bg)
	if err := e2.Load(bg, load(t, map[string]string{"api.yaml": federatedPolicy})); err == nil || !strings.Contains(err.Error(), "regional_only needs an L2") {
		t.Fatalf("load with a failing region: %v", err)
	}
}
