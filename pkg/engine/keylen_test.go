package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/federationtest"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// keyLengths is a MemoryCoordinator that records the longest key it is
// asked for.
type keyLengths struct {
	*federation.MemoryCoordinator
	longest atomic.Int64
}

func (k *keyLengths) Lease(ctx context.Context, key string, rule gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	if n := int64(len(key)); n > k.longest.Load() {
		k.longest.Store(n)
	}
	return k.MemoryCoordinator.Lease(ctx, key, rule, min, max, now)
}

// TestLongestKeyFitsTheSuites: the longest key the engine hands a
// coordinator — the longest domain, MaxEntries levels of the longest key,
// each with the longest value — is no longer than the long keys the
// federation conformance suites hand every coordinator and escrow
// (federationtest.LongKey), so a coordinator passing them takes every key
// the engine builds.
func TestLongestKeyFitsTheSuites(t *testing.T) {
	domain := strings.Repeat("d", engine.MaxDomainBytes)
	var yaml strings.Builder
	fmt.Fprintf(&yaml, "domain: %s\ndescriptors:\n", domain)
	var entries []string
	for level := range engine.MaxEntries {
		key := fmt.Sprintf("%02d", level) + strings.Repeat("k", engine.MaxKeyBytes-2)
		indent := strings.Repeat("    ", level)
		fmt.Fprintf(&yaml, "%s  - key: %s\n", indent, key)
		if level < engine.MaxEntries-1 {
			fmt.Fprintf(&yaml, "%s    descriptors:\n", indent)
		} else {
			fmt.Fprintf(&yaml, "%s    mode: federated\n%s    rate_limit: {unit: minute, requests_per_unit: 10}\n", indent, indent)
		}
		entries = append(entries, key+"="+strings.Repeat("v", engine.MaxValueBytes))
	}
	coord := &keyLengths{MemoryCoordinator: federation.NewMemoryCoordinator(nil)}
	e, err := engine.New(engine.Options{Store: memstore.New(), Federation: func(fr engine.FederatedRule) (engine.Federated, error) {
		r, err := federation.NewRegion(federation.RegionConfig{Name: "eu", Coordinator: coord})
		return engine.Federated{Store: r, Batch: 1, Timeout: time.Second}, err
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(bg) })
	if err := e.Load(bg, load(t, map[string]string{"long.yaml": yaml.String()})); err != nil {
		t.Fatal(err)
	}
	if got := decide(t, e, req(domain, strings.Join(entries, ",")), storetest.Timeline()); got.Code != engine.CodeOK {
		t.Fatalf("the longest request: %v, want OK", got.Code)
	}
	longest := coord.longest.Load()
	if longest == 0 {
		t.Fatal("the coordinator was never asked: the request matched no federated rule")
	}
	if longest > federationtest.LongKey {
		t.Fatalf("the engine handed the coordinator a %d-byte key; the federation suites test keys of %d bytes: raise federationtest.LongKey (and the Coordinator doc's bound)", longest, federationtest.LongKey)
	}
	t.Logf("the longest key: %d bytes; the suites' long keys: %d bytes", longest, federationtest.LongKey)
}
