package fair

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestOverflowAccount: past MaxTenants a new tenant is decided on the one
// overflow account (Decision.Overflow), listed under Overflow, while the
// tenants tracked by name stay at MaxTenants; a tracked tenant named like
// the account is summed with it in Shares but decided apart.
func TestOverflowAccount(t *testing.T) {
	e := mustNew(t, Config{Limit: 1000, Window: time.Minute, MaxTenants: 3})
	for i := range 50 {
		name := fmt.Sprintf("t%02d", i)
		d := e.Decide(name, 1, t0)
		if !d.Allowed || d.Overflow != (i >= 3) {
			t.Fatalf("%s: %+v, want admitted, Overflow %v", name, d, i >= 3)
		}
	}
	if n := len(e.l.tenants); n != 3 {
		t.Fatalf("%d tenants tracked by name, want MaxTenants 3", n)
	}
	a := e.Admitted()
	if len(a) != 4 || a[Overflow] != 47 || a["t00"] != 1 {
		t.Fatalf("Admitted = %v, want t00..t02 1 each and %s 47", a, Overflow)
	}
	if s := e.Shares(); len(s) != 4 || s[Overflow] != 47 {
		t.Fatalf("Shares = %v, want %s 47 (its demand: the budget has room)", s, Overflow)
	}

	// A tenant called Overflow is a tenant like any other.
	e = mustNew(t, Config{Limit: 1000, Window: time.Minute, MaxTenants: 1})
	e.Decide(Overflow, 2, t0)
	if d := e.Decide("b", 5, t0); !d.Overflow || d.Admitted != 5 {
		t.Fatalf("b: %+v, want the overflow account's 5", d)
	}
	if d := e.Decide(Overflow, 1, t0); d.Overflow || d.Admitted != 3 {
		t.Fatalf("%s: %+v, want its own 3", Overflow, d)
	}
	if a := e.Admitted(); a[Overflow] != 8 {
		t.Fatalf("Admitted = %v, want %s 3+5", a, Overflow)
	}
}

// TestEscrowOverflowSteadyStateIsWaterFill is
// TestEscrowSteadyStateIsWaterFill with tenants past MaxTenants: under
// steady backlogged demand, from the second window on, the accounts — the
// tenants tracked by name and the overflow, whose demand is its tenants' —
// are admitted their WaterFill allocation; every window respects the cap
// and serves the demand up to it, less at most a unit an account.
func TestEscrowOverflowSteadyStateIsWaterFill(t *testing.T) {
	const w = time.Second
	r := rand.New(rand.NewPCG(3, 5))
	const runs = 500
	overflowed := 0
	for run := range runs {
		n := 2 + r.IntN(10)
		limit := int64(1 + r.IntN(500))
		cfg := Config{Limit: limit, Window: w, Weights: map[string]float64{}, DefaultWeight: 0.5 + 2*r.Float64(), MaxTenants: 1 + r.IntN(3)}
		tenants, demands := make([]string, n), make([]int64, n)
		// The accounts, in the order backlog first calls them: configured
		// tenants and the first MaxTenants unconfigured ones with demand by
		// name, the rest in the overflow (the last account).
		var accDemand, accWeight []float64
		account := make([]int, n)
		overflow, named := -1, 0
		for i := range n {
			tenants[i] = string(rune('a' + i))
			demands[i] = int64(r.IntN(201))
			configured := r.IntN(3) == 0
			if configured {
				cfg.Weights[tenants[i]] = 0.1 + 9.9*r.Float64()
			}
			switch {
			case configured || (demands[i] > 0 && named < cfg.MaxTenants):
				if !configured {
					named++
				}
				account[i] = len(accDemand)
				accDemand = append(accDemand, float64(demands[i]))
				accWeight = append(accWeight, cfg.Weights[tenants[i]])
				if !configured {
					accWeight[account[i]] = cfg.DefaultWeight
				}
			case demands[i] > 0:
				if overflow < 0 {
					overflow = len(accDemand)
					accDemand = append(accDemand, 0)
					accWeight = append(accWeight, cfg.DefaultWeight)
				}
				account[i] = overflow
				accDemand[overflow] += float64(demands[i])
			default:
				account[i] = -1 // never calls
			}
		}
		if overflow >= 0 {
			overflowed++
		}
		e := mustNew(t, cfg)
		want := WaterFill(float64(limit), accDemand, accWeight)
		var sumDemand int64
		for _, d := range demands {
			sumDemand += d
		}
		for k := range 3 {
			got := backlog(t, e, t0.Add(time.Duration(k)*w), 1, tenants, demands)
			acc := make([]float64, len(accDemand))
			var total int64
			for i, g := range got {
				total += g
				if account[i] >= 0 {
					acc[account[i]] += float64(g)
				}
			}
			if total > limit {
				t.Fatalf("run %d window %d: admits %d > Limit %d", run, k, total, limit)
			}
			if total < min(sumDemand, limit)-int64(len(acc)) {
				t.Fatalf("run %d window %d: admits %d, want at least min(Σ demand, Limit) − %d (demands %v, got %v)",
					run, k, total, len(acc), demands, got)
			}
			if k == 0 {
				continue
			}
			for j := range acc {
				if acc[j] > math.Ceil(want[j]-1e-9)+1e-6 || acc[j] < math.Floor(want[j]+1e-9)-1e-6 {
					t.Fatalf("run %d window %d (limit %d, accounts' weights %v, demands %v): got %v, want WaterFill %v",
						run, k, limit, accWeight, accDemand, acc, want)
				}
			}
		}
	}
	if overflowed < runs/2 {
		t.Fatalf("only %d of %d runs had tenants in the overflow", overflowed, runs)
	}
	t.Logf("%d random instances (%d with an overflow account), 3 windows each", runs, overflowed)
}

// TestTrackedTenantBytes measures the heap a tracked tenant costs (its
// account, its map entry, its place in the active list and the
// water-filling scratch, and an 8-byte name), which Config.MaxTenants's
// documentation quotes, and holds it under a band far above the figure.
func TestTrackedTenantBytes(t *testing.T) {
	const n = 20_000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("t%07d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e := mustNew(t, Config{Limit: 1 << 30, Window: time.Hour})
	prefix := strings.Repeat("k", 64) + ":"
	for _, name := range names {
		// A substring of a request's key, as the engine's tenant is: the
		// ledger keeps only the name, not the key.
		key := prefix + name
		e.Decide(key[len(prefix):], 1, t0)
	}
	e.Shares() // sizes the scratch
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	t.Logf("%.0f bytes per tracked tenant (%d tenants, 8-byte names)", per, n)
	if per > 400 {
		t.Fatalf("%.0f bytes per tracked tenant, want under 400", per)
	}
	runtime.KeepAlive(e)
}
