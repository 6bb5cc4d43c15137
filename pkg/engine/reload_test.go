package engine_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

const leasedPolicy = `
domain: d
descriptors:
  - key: user
    mode: %MODE%
    rate_limit: {unit: hour, requests_per_unit: 10}
`

func leased(mode string) map[string]string {
	src := strings.ReplaceAll(leasedPolicy, "%MODE%", mode)
	if mode == "leased" {
		src = strings.Replace(src, "    rate_limit:", "    lease: {batch: 10}\n    rate_limit:", 1)
	}
	return map[string]string{"d.yaml": src}
}

func TestReloadReturnsCreditsOfChangedRules(t *testing.T) {
	s := memstore.New()
	e := newEngine(t, s, leased("leased"))
	if got := decide(t, e, req("d", "user=u"), t0); got.Code != engine.CodeOK {
		t.Fatal(codes(got))
	}
	// The node now holds the other 9 credits. Changing the rule's mode
	// retires its limiter, which must give them back.
	if err := e.Load(bg, load(t, leased("strict"))); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 9; i++ {
		if got := decide(t, e, req("d", "user=u"), t0); got.Code != engine.CodeOK {
			t.Fatalf("request %d after reload: %s — the retired rule's credits were not returned", i, codes(got))
		}
	}
	if got := decide(t, e, req("d", "user=u"), t0); got.Code != engine.CodeOverLimit {
		t.Fatalf("11th request: %s", codes(got))
	}
}

func TestReloadKeepsUnchangedLimiters(t *testing.T) {
	s := memstore.New()
	e := newEngine(t, s, leased("leased"))
	decide(t, e, req("d", "user=u"), t0)
	before := e.Snapshot()[0].Limiter
	if err := e.Load(bg, load(t, leased("leased"))); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 9; i++ {
		decide(t, e, req("d", "user=u"), t0)
	}
	after := e.Snapshot()[0].Limiter
	if after.LeasesGranted != before.LeasesGranted || after.LocalHits != before.LocalHits+9 {
		t.Fatalf("limiter not kept across an identical reload: before %+v after %+v", before, after)
	}
}

func TestBadPolicyKeepsThePreviousOne(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"edge.yaml": edge})
	bad := load(t, map[string]string{"bad.yaml": `
domain: bad
descriptors:
  - key: k
    rate_limit: {unit: year, requests_per_unit: 1, algorithm: gcra, burst: 50}
`})
	err := e.Load(bg, bad)
	var perrs policy.Errors
	if !errors.As(err, &perrs) || len(perrs) != 1 || perrs[0].Pos.Line == 0 || !strings.Contains(err.Error(), "refill") {
		t.Fatalf("err = %v", err)
	}
	if e.Check(bad) == nil {
		t.Fatal("Check accepted what Load refused")
	}
	if got := decide(t, e, req("edge", "remote_address=10.0.0.66"), t0); got.Statuses[0].Limit == nil {
		t.Fatal("the previous policy was dropped")
	}
}

// TestReloadDuringTraffic: requests keep being answered while the policy is
// swapped back and forth; none fails.
func TestReloadDuringTraffic(t *testing.T) {
	e := newEngine(t, memstore.New(), leased("leased"))
	sets := []*policy.Set{load(t, leased("strict")), load(t, leased("leased")), load(t, leased("cached_deny"))}
	var wg sync.WaitGroup
	var failures atomic.Int64
	stop := make(chan struct{})
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.Decide(bg, req("d", "user=u"+string(rune('a'+i%20))), t0.Add(time.Duration(i)*time.Millisecond)); err != nil {
					failures.Add(1)
				}
			}
		}()
	}
	for i := 0; i < 200; i++ {
		if err := e.Load(bg, sets[i%3]); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d requests failed during reloads", n)
	}
}

// TestBatchAutoLearnsFromDemand: a `batch: auto` rule leases what each key's
// learner chooses; a key that serves little per window is moved off the
// default batch (a tenth of the capacity) towards its EOQ optimum.
func TestBatchAutoLearnsFromDemand(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"d.yaml": `
domain: d
descriptors:
  - key: user
    mode: leased
    lease: {batch: auto}
    rate_limit: {unit: second, requests_per_unit: 10000}
`})
	now := t0
	for w := 0; w < 400; w++ {
		for i := 0; i < 4; i++ { // 4 requests per 1 s window
			decide(t, e, req("d", "user=u"), now.Add(time.Duration(i)*time.Millisecond))
		}
		now = now.Add(time.Second)
	}
	// EOQ with unit costs: b* = √(2·4) ≈ 3; the default batch would be 1000.
	if b := e.Snapshot()[0].Limiter.LastBatch; b > 20 {
		t.Fatalf("learned batch %d: still far from the EOQ optimum ≈ 3 (default 1000)", b)
	}
}
