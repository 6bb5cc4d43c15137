package engine_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// budgetFile is one tenant budget of limit units per hour, in mode, with
// a cost limit reserving reserve units (a fixed figure).
func budgetFile(mode string, limit, reserve int) map[string]string {
	if mode == "leased" {
		mode += "\n    lease: {batch: 500}"
	}
	return map[string]string{"llm.yaml": fmt.Sprintf(`
domain: llm
descriptors:
  - key: tenant
    mode: %s
    rate_limit: {name: tokens, unit: hour, requests_per_unit: %d}
costs:
  - name: chat
    match: {path_prefix: /v1/}
    descriptor: [{key: tenant, header: x-tenant}]
    reserve: %d
    cost: {response_header: x-tokens}
`, mode, limit, reserve)}
}

// stores runs f on the memory store and on a real Redis.
func stores(t *testing.T, f func(t *testing.T, s gale.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, memstore.New()) })
	t.Run("redis", func(t *testing.T) {
		srv := testenv.StartRedis(t)
		s, err := redisstore.New(srv.Client(), redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		f(t, s)
	})
}

// reserve takes units for tenant at now; nil when refused.
func reserve(t *testing.T, e *engine.Engine, tenant string, units uint32, now time.Time) *engine.Reservation {
	t.Helper()
	r := req("llm", "tenant="+tenant)
	r.HitsAddend = units
	res, resp, err := e.Reserve(bg, r, now)
	if err != nil {
		t.Fatalf("Reserve(%d): %v", units, err)
	}
	if (res == nil) != (resp.Code == engine.CodeOverLimit) {
		t.Fatalf("Reserve(%d): reservation %v with code %v", units, res, resp.Code)
	}
	return res
}

func settle(t *testing.T, res *engine.Reservation, actual int64, now time.Time) engine.Settlement {
	t.Helper()
	st, err := res.Settle(bg, actual, now)
	if err != nil {
		t.Fatalf("Settle(%d): %v", actual, err)
	}
	return st
}

func costStats(e *engine.Engine) engine.CostStats {
	for _, s := range e.CostSnapshot() {
		if s.Ref.Name == "tokens" {
			return s
		}
	}
	return engine.CostStats{}
}

// TestReserveTakesTheUnitsOrNothing: a reservation that does not fit is
// refused whole with when it would fit, and takes nothing; one that fits
// holds its units until settled.
func TestReserveTakesTheUnitsOrNothing(t *testing.T) {
	stores(t, func(t *testing.T, s gale.Store) {
		for _, mode := range []string{"strict", "leased"} {
			t.Run(mode, func(t *testing.T) {
				e := newEngine(t, s, budgetFile(mode, 10_000, 4000))
				tenant := "refuse-" + mode
				now := t0.Add(10 * time.Minute)
				a, b := reserve(t, e, tenant, 4000, now), reserve(t, e, tenant, 4000, now)
				r := req("llm", "tenant="+tenant)
				r.HitsAddend = 4000
				res, resp, err := e.Reserve(bg, r, now)
				if err != nil || res != nil || resp.Code != engine.CodeOverLimit || resp.Statuses[0].UntilReset != 50*time.Minute {
					t.Fatalf("third 4000 of 10000: reservation %v, %+v, %v; want refused until the hour ends (50m)", res, resp, err)
				}
				if reserve(t, e, tenant, 2000, now) == nil {
					t.Fatal("the refused reservation took units: 2000 more no longer fit")
				}
				if reserve(t, e, tenant, 1, now) != nil {
					t.Fatal("10000 reserved, yet one more unit fits")
				}
				settle(t, a, 4000, now)
				settle(t, b, 4000, now)
				if st := costStats(e); st.Reserved != 10_000 || st.Refunded != 0 || st.Extra != 0 {
					t.Fatalf("cost counters %+v", st)
				}
			})
		}
	})
}

// TestSettleRefundsIntoTheWindowThatReserved: an unused part goes back to
// the window that counted the reservation, and to no other: a request that
// outlives its window gives nothing to the next one, which would then admit
// more than its limit.
func TestSettleRefundsIntoTheWindowThatReserved(t *testing.T) {
	stores(t, func(t *testing.T, s gale.Store) {
		for _, mode := range []string{"strict", "leased"} {
			t.Run(mode, func(t *testing.T) {
				e := newEngine(t, s, budgetFile(mode, 10_000, 4000))
				tenant := "window-" + mode
				w0 := t0.Add(30 * time.Minute)
				a := reserve(t, e, tenant, 4000, w0)
				if st := settle(t, a, 1000, w0.Add(time.Minute)); st != (engine.Settlement{Refunded: 3000}) {
					t.Fatalf("settled 4000 at 1000: %+v", st)
				}
				if reserve(t, e, tenant, 9000, w0.Add(2*time.Minute)) == nil {
					t.Fatal("the 3000 refunded did not come back: 9000 do not fit beside the 1000 used")
				}
				late := reserve(t, e, tenant, 0, w0.Add(3*time.Minute)) // 1 unit: the window is full now
				if late != nil {
					t.Fatal("a full window admitted one more unit")
				}
				// A reservation at the end of the hour, settled at nothing
				// in the next hour, while the next hour is full.
				w1 := t0.Add(time.Hour)
				b := reserve(t, e, tenant+"-b", 4000, w1.Add(-time.Second))
				full := reserve(t, e, tenant+"-b", 10_000, w1)
				if b == nil || full == nil {
					t.Fatal("fresh reservations refused")
				}
				settle(t, b, 0, w1.Add(time.Second))
				if reserve(t, e, tenant+"-b", 4000, w1.Add(2*time.Second)) != nil {
					t.Fatal("a refund from the hour before went into this hour: 14000 admitted against 10000")
				}
				st := costStats(e)
				if st.Refunded != 3000 {
					t.Fatalf("refunded %d units, want 3000 (the late refund is dropped, not counted)", st.Refunded)
				}
			})
		}
	})
}

// TestSettleChargesTheExtraPastTheLimit: a real cost above the reservation
// is counted in full, even past the limit, so it holds back later requests
// of the window. (Waits on the engine's charge semantics for a non-nil
// HitsAddend: before them the extra charge is refused when it does not fit
// and counts nothing.)
func TestSettleChargesTheExtraPastTheLimit(t *testing.T) {
	stores(t, func(t *testing.T, s gale.Store) {
		e := newEngine(t, s, budgetFile("strict", 10_000, 5000))
		now := t0.Add(5 * time.Minute)
		a, b := reserve(t, e, "extra", 5000, now), reserve(t, e, "extra", 5000, now)
		st := settle(t, a, 9000, now)
		if st.Extra != 4000 || !st.Over {
			t.Errorf("settled 5000 at 9000 on a full window: %+v, want 4000 extra, over the limit", st)
		}
		settle(t, b, 0, now)
		// Counted: 5000 + 4000 + 5000 − 5000 = 9000; without the extra, 5000.
		if reserve(t, e, "extra", 5000, now) != nil {
			t.Error("the extra 4000 was not counted: 5000 more fit in a window that has used 9000 of 10000")
		}
		if c := costStats(e); c.Extra != 4000 || c.Overrun != 4000 || c.Refunded != 5000 || c.Reserved != 10_000 {
			t.Errorf("cost counters %+v", c)
		}
	})
}

// TestSettleOnceAndBadCosts: a second Settle does nothing; a negative cost
// is refused and leaves the reservation as the cost.
func TestSettleOnceAndBadCosts(t *testing.T) {
	e := newEngine(t, memstore.New(), budgetFile("strict", 10, 4))
	a := reserve(t, e, "once", 4, t0)
	settle(t, a, 0, t0)
	if st := settle(t, a, 0, t0); st != (engine.Settlement{}) {
		t.Fatalf("second settle %+v", st)
	}
	b := reserve(t, e, "once", 4, t0)
	if _, err := b.Settle(bg, -1, t0); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Fatalf("Settle(-1): %v", err)
	}
	if reserve(t, e, "once", 7, t0) != nil { // 4 held by b: 7 do not fit in 10
		t.Fatal("a refused settlement gave the reservation back")
	}
	var nilRes *engine.Reservation
	if st, err := nilRes.Settle(bg, 3, t0); err != nil || st != (engine.Settlement{}) {
		t.Fatalf("nil reservation: %+v %v", st, err)
	}
	r := req("llm", "tenant=x")
	one := uint64(1)
	r.Descriptors[0].HitsAddend = &one
	if _, _, err := e.Reserve(bg, r, t0); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Fatalf("a reservation with a descriptor hits_addend: %v", err)
	}
}

// TestReservationOutlivesAReload: a reload that replaces the reserving
// rule's limiter does not close it under the reservation: the settlement's
// refund reaches the counter, which the new limiter reads.
func TestReservationOutlivesAReload(t *testing.T) {
	s := memstore.New()
	e := newEngine(t, s, budgetFile("strict", 10_000, 4000))
	a := reserve(t, e, "reload", 4000, t0)
	if err := e.Load(bg, load(t, budgetFile("strict", 10_001, 4000))); err != nil {
		t.Fatal(err)
	}
	settle(t, a, 0, t0)
	if reserve(t, e, "reload", 10_001, t0) == nil {
		t.Fatal("the refund through the replaced limiter was lost")
	}
}

// TestChooseCost: the first matching cost limit, its descriptor from the
// request's headers, its reservation clamped to 1..max; a missing
// descriptor header leaves the request unbudgeted; a reservation header
// that is not a whole number reserves the cap.
func TestChooseCost(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"llm.yaml": `
domain: llm
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 100}
costs:
  - name: chat
    match: {path_prefix: /v1/chat, authority: "api.*"}
    descriptor: [{key: tenant, header: x-tenant}, {key: route, value: chat}]
    reserve: {header: x-max-tokens, max: 4000}
    cost: {metadata: {namespace: io.envoy.ai_gateway, key: llm_total_token}}
  - name: rest
    match: {path_prefix: /v1/}
    descriptor: [{key: tenant, header: x-tenant}]
    reserve: 7
    cost: {response_trailer: x-tokens}
`})
	for _, tc := range []struct {
		authority, path string
		headers         map[string]string
		want            string // name:units:entries, or "" when unbudgeted
	}{
		{"api.example", "/v1/chat", map[string]string{"x-tenant": "t1", "x-max-tokens": "250"}, "chat:250:[{tenant t1} {route chat}]"},
		{"api.example", "/v1/chat", map[string]string{"x-tenant": "t1", "x-max-tokens": "99999"}, "chat:4000:[{tenant t1} {route chat}]"},
		{"api.example", "/v1/chat", map[string]string{"x-tenant": "t1", "x-max-tokens": "0"}, "chat:1:[{tenant t1} {route chat}]"},
		{"api.example", "/v1/chat", map[string]string{"x-tenant": "t1", "x-max-tokens": "-5"}, "chat:4000:[{tenant t1} {route chat}]"},
		{"api.example", "/v1/chat", map[string]string{"x-tenant": "t1", "x-max-tokens": "1e3"}, "chat:4000:[{tenant t1} {route chat}]"},
		{"api.example", "/v1/chat", map[string]string{"x-tenant": "t1"}, "chat:4000:[{tenant t1} {route chat}]"},
		{"api.example", "/v1/chat", map[string]string{}, ""},
		{"other", "/v1/chat", map[string]string{"x-tenant": "t2"}, "rest:7:[{tenant t2}]"},
		{"api.example", "/health", map[string]string{"x-tenant": "t2"}, ""},
	} {
		c, ok := e.ChooseCost(tc.authority, tc.path, func(n string) (string, bool) { v, ok := tc.headers[n]; return v, ok })
		got := ""
		if ok {
			got = fmt.Sprintf("%s:%d:%v", c.Name, c.Request.HitsAddend, c.Request.Descriptors[0].Entries)
			if c.Cap != map[string]int64{"chat": 4000, "rest": 7}[c.Name] || c.Request.Domain != "llm" {
				t.Errorf("%+v", c)
			}
		}
		if got != tc.want {
			t.Errorf("%s %s %v: %q, want %q", tc.authority, tc.path, tc.headers, got, tc.want)
		}
	}
	c, _ := e.ChooseCost("api.x", "/v1/chat", func(n string) (string, bool) { return "1", true })
	if c.Source != (engine.CostSource{Kind: engine.CostFromMetadata, Namespace: "io.envoy.ai_gateway", Key: "llm_total_token"}) {
		t.Errorf("source %+v", c.Source)
	}
}

// TestParseCost: a cost in a header is decimal digits and nothing else, at
// most gale.MaxLimit; garbage, signs, fractions and overflow are refused.
func TestParseCost(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64 // -1: refused
	}{
		{"0", 0}, {"42", 42}, {" 42\t", 42}, {"007", 7}, {"1099511627776", 1 << 40},
		{"1099511627777", -1}, {"99999999999999999999999", -1}, {"", -1}, {"  ", -1}, {"-1", -1}, {"+1", -1},
		{"1.5", -1}, {"1e3", -1}, {"0x10", -1}, {"12abc", -1}, {"1 2", -1}, {"١٢", -1},
	} {
		n, err := engine.ParseCost(tc.in)
		switch {
		case tc.want < 0 && (err == nil || !errors.Is(err, engine.ErrBadCost)):
			t.Errorf("ParseCost(%q) = %d, %v; want refused", tc.in, n, err)
		case tc.want >= 0 && (err != nil || n != tc.want):
			t.Errorf("ParseCost(%q) = %d, %v; want %d", tc.in, n, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in   float64
		want int64
	}{{0, 0}, {1234, 1234}, {1 << 40, 1 << 40}, {-1, -1}, {0.5, -1}, {1<<40 + 1, -1}} {
		n, err := engine.CostFromNumber(tc.in)
		if (tc.want < 0) != (err != nil) || (err == nil && n != tc.want) {
			t.Errorf("CostFromNumber(%v) = %d, %v", tc.in, n, err)
		}
	}
}

// TestReserveSettleMatchesANaiveCounter drives reservations and
// settlements on a random schedule over several hours against a naive
// model — one counter per window: a reservation is admitted iff it fits,
// a refund goes to the reserving window while it lasts, an extra is
// counted in full in the window in place — and requires the engine's
// every answer to be the model's. The model's windows then hold the bound:
// past the limit by no more than the extra charged after their last
// admission. "refunds" keeps every real cost at or below its reservation;
// "extras" draws costs up to 4× it (waits on the engine's charge
// semantics for a non-nil HitsAddend).
func TestReserveSettleMatchesANaiveCounter(t *testing.T) {
	for _, extras := range []bool{false, true} {
		name := map[bool]string{false: "refunds", true: "extras"}[extras]
		t.Run(name, func(t *testing.T) {
			stores(t, func(t *testing.T, s gale.Store) {
				const limit, reserveUnits = 10_000, 1000
				e := newEngine(t, s, budgetFile("strict", limit, reserveUnits))
				rng := rand.New(rand.NewPCG(7, uint64(len(name))))
				count := map[int64]int64{}     // the model: units counted per hour
				lateExtra := map[int64]int64{} // extra charged in an hour after its last admission
				window := func(at time.Time) int64 { return at.Unix() / 3600 }
				type open struct {
					res *engine.Reservation
					w   int64
				}
				var inflight []open
				now := t0
				for step := 0; step < 600; step++ {
					now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
					w := window(now)
					if len(inflight) == 0 || rng.IntN(2) == 0 {
						res := reserve(t, e, "model", reserveUnits, now)
						fits := count[w]+reserveUnits <= limit
						if (res != nil) != fits {
							t.Fatalf("step %d: reserve %d with %d counted of %d: engine admitted=%v", step, reserveUnits, count[w], limit, res != nil)
						}
						if fits {
							count[w] += reserveUnits
							lateExtra[w] = 0
							inflight = append(inflight, open{res, w})
						}
						continue
					}
					i := rng.IntN(len(inflight))
					o := inflight[i]
					inflight = append(inflight[:i], inflight[i+1:]...)
					actual := rng.Int64N(reserveUnits + 1)
					if extras {
						actual = rng.Int64N(4*reserveUnits + 1)
					}
					settle(t, o.res, actual, now)
					switch {
					case actual < reserveUnits && o.w == w:
						count[w] -= reserveUnits - actual
					case actual > reserveUnits:
						count[w] += actual - reserveUnits
						lateExtra[w] += actual - reserveUnits
					}
				}
				for w, n := range count {
					if n > limit+lateExtra[w] {
						t.Fatalf("hour %d counted %d: past %d by more than the %d charged after its last admission", w, n, limit, lateExtra[w])
					}
				}
			})
		})
	}
}
