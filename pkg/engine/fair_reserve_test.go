package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
)

// fairBudgetFile is budgetFile's budget on a fair rule: limit units per
// period shared among tenants, with a cost limit reserving reserve units.
func fairBudgetFile(limit int, period string, reserve int) map[string]string {
	return map[string]string{"llm.yaml": fmt.Sprintf(`
domain: llm
descriptors:
  - key: tenant
    fairness: {tenant_key: tenant}
    rate_limit: {name: tokens, %s, requests_per_unit: %d}
costs:
  - name: chat
    match: {path_prefix: /v1/}
    descriptor: [{key: tenant, header: x-tenant}]
    reserve: %d
    cost: {response_header: x-tokens}
`, period, limit, reserve)}
}

// TestFairBudgetCountsTheExtra: on a fair rule the extra over a
// reservation is counted in full, as on every other rule, so the window
// refuses reservations once the spend has passed the budget. It used to be
// charged all or nothing and dropped when it did not fit (yet added to the
// extra and overrun counters), so small reservations kept being admitted:
// a budget of 10,000 an hour, each request reserving 100 and costing
// 4,000, admitted 22 requests and 88,000 tokens against the bound of
// 10,000 + (requests in flight) × (cost − reservation) = 13,900; five
// streams reserving 1,000 of 20,000 per 10 s and settling at 5,000 spent
// 28,000 against 20,000 + 5 × 4,000 = 40,000 only because two extras were
// dropped. Judged from what the clients were told (admitted, at what cost).
func TestFairBudgetCountsTheExtra(t *testing.T) {
	stores(t, func(t *testing.T, s gale.Store) {
		t.Run("one at a time", func(t *testing.T) {
			const limit, reserveUnits, cost = 10_000, 100, 4000
			e := newEngine(t, s, fairBudgetFile(limit, "unit: hour", reserveUnits))
			now := t0.Add(90 * time.Minute)
			admitted, spent := 0, int64(0)
			for range 100 {
				res := reserve(t, e, "alice", reserveUnits, now)
				if res == nil {
					break
				}
				admitted++
				st := settle(t, res, cost, now)
				spent += cost
				if st.Extra != cost-reserveUnits {
					t.Fatalf("request %d settled with %+v, want an extra of %d", admitted, st, cost-reserveUnits)
				}
			}
			// Without fairness the same file admits 3 (12,000): 0, 4,000
			// and 8,000 counted leave room for 100; 12,000 does not.
			t.Logf("%d admitted, %d spent of %d", admitted, spent, limit)
			if bound := int64(limit + cost - reserveUnits); spent > bound || admitted != 3 {
				t.Errorf("%d admitted, %d tokens spent: want 3 and 12,000, at most the bound %d", admitted, spent, bound)
			}
			if c := costStats(e); c.Extra != int64(admitted)*(cost-reserveUnits) || c.Overrun != cost-reserveUnits {
				t.Errorf("cost counters %+v: want extra %d, overrun %d (the last extra only)", c, int64(admitted)*(cost-reserveUnits), cost-reserveUnits)
			}
		})
		t.Run("five streams", func(t *testing.T) {
			const limit, reserveUnits, cost, streams = 20_000, 1000, 5000, 5
			e := newEngine(t, s, fairBudgetFile(limit, "unit: second, unit_multiplier: 10", reserveUnits))
			now := t0.Add(20 * time.Second)
			admitted, spent := 0, int64(0)
			for round := 0; round < 20; round++ {
				var open []*engine.Reservation
				for range streams {
					if res := reserve(t, e, "bob", reserveUnits, now); res != nil {
						open = append(open, res)
					}
				}
				if len(open) == 0 {
					break
				}
				for _, res := range open {
					settle(t, res, cost, now)
					admitted++
					spent += cost
				}
			}
			// At most streams requests are in flight at the window's last
			// admission: the bound is L + streams × (cost − reservation).
			bound := int64(limit + streams*(cost-reserveUnits))
			t.Logf("%d admitted, %d spent of %d (bound %d)", admitted, spent, limit, bound)
			if spent > bound {
				t.Errorf("%d admitted, %d tokens spent: past the bound %d", admitted, spent, bound)
			}
			// 5 reserved (5,000 counted), all settle at 5,000: 25,000
			// counted; nothing fits after.
			if admitted != streams {
				t.Errorf("%d admitted, want %d: the first round's extras put the window past its limit", admitted, streams)
			}
		})
	})
}
