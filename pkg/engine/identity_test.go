package engine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// fleetStores are the stores a fleet of engines shares: one memory store
// (engines of one process), or one redis-server with a client and a store
// per engine (one process each).
var fleetStores = []struct {
	name  string
	start func(t *testing.T, n int) []gale.Store
}{
	{"memory", func(t *testing.T, n int) []gale.Store {
		s := memstore.New()
		out := make([]gale.Store, n)
		for i := range out {
			out[i] = s
		}
		return out
	}},
	{"redis", func(t *testing.T, n int) []gale.Store {
		srv := testenv.StartRedis(t)
		out := make([]gale.Store, n)
		for i := range out {
			s, err := redisstore.New(srv.Client(), redisstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			out[i] = s
		}
		return out
	}},
}

// fleet is n engines, each on its own store of stores, loaded with src as
// id.yaml.
func fleet(t *testing.T, stores []gale.Store, src string) []*engine.Engine {
	t.Helper()
	var es []*engine.Engine
	for _, s := range stores {
		e, err := engine.New(engine.Options{Store: s, StoreTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close(bg) })
		es = append(es, e)
	}
	reloadFleet(t, es, src)
	return es
}

func reloadFleet(t *testing.T, es []*engine.Engine, src string) {
	t.Helper()
	for _, e := range es {
		if err := e.Load(bg, load(t, map[string]string{"id.yaml": src})); err != nil {
			t.Fatal(err)
		}
	}
}

// useUp sends requests for descriptor desc to the engines in turn at now
// until each has denied one in a row, and returns how many were admitted.
func useUp(t *testing.T, es []*engine.Engine, desc string, now time.Time) int {
	t.Helper()
	admitted, denied := 0, 0
	for i := 0; denied < len(es); i++ {
		if i > 100_000 {
			t.Fatalf("%s: still admitting after %d requests", desc, i)
		}
		if decide(t, es[i%len(es)], req("id", desc), now).Code == engine.CodeOK {
			admitted, denied = admitted+1, 0
		} else {
			denied++
		}
	}
	return admitted
}

// dailyPolicy is a user's 50 a day beside a looser hourly limit, in the
// order, with the names, the day's figure and the mode given.
func dailyPolicy(mode string, dayFirst bool, dayName string, perDay int) string {
	day := fmt.Sprintf("{unit: day, requests_per_unit: %d}", perDay)
	if dayName != "" {
		day = fmt.Sprintf("{name: %s, unit: day, requests_per_unit: %d}", dayName, perDay)
	}
	hour := "{unit: hour, requests_per_unit: 1000}"
	limits := []string{day, hour}
	if !dayFirst {
		limits = []string{hour, day}
	}
	src := "domain: id\ndescriptors:\n  - key: user\n    mode: " + mode + "\n"
	if mode == "leased" {
		src += "    lease: {batch: 7}\n"
	}
	return src + "    rate_limits:\n      - " + strings.Join(limits, "\n      - ") + "\n"
}

// TestReloadKeepsTheCountOfARenamedOrMovedLimit: a fleet of engines (one
// memory store, or one Redis with a store per engine) uses up a 50-a-day
// limit, then reloads policies that name it, unname it and swap it with
// the descriptor's other limit, and change its figure: the day admits 50
// in all until the figure goes to 60, then 10 more. Keyed by name and
// place, each of the first two reloads admitted 50 again.
func TestReloadKeepsTheCountOfARenamedOrMovedLimit(t *testing.T) {
	for _, st := range fleetStores {
		for _, mode := range []string{"strict", "leased"} {
			t.Run(st.name+"/"+mode, func(t *testing.T) {
				es := fleet(t, st.start(t, 3), dailyPolicy(mode, true, "", 50))
				now := t0.Add(9 * time.Hour)
				total := useUp(t, es, "user=u", now)
				if total != 50 {
					t.Fatalf("a fresh day admitted %d, want 50", total)
				}
				for _, step := range []struct {
					name   string
					policy string
					want   int // admitted by the step
				}{
					{"named daily", dailyPolicy(mode, true, "daily", 50), 0},
					{"unnamed and moved after the hourly limit", dailyPolicy(mode, false, "", 50), 0},
					{"named and moved back", dailyPolicy(mode, true, "daily", 50), 0},
					{"lowered to 40", dailyPolicy(mode, true, "daily", 40), 0},
					{"raised to 60", dailyPolicy(mode, false, "per-day", 60), 10},
				} {
					reloadFleet(t, es, step.policy)
					now = now.Add(time.Minute)
					got := useUp(t, es, "user=u", now)
					total += got
					if got != step.want {
						t.Errorf("%s: the reload admitted %d more (%d in the day), want %d", step.name, got, total, step.want)
					}
				}
			})
		}
	}
}

// TestReloadReturnsLeasedCreditsToTheSameCounter: leased engines each hold
// a lease of a 50-a-day limit when a reload names it, moves it and lowers
// it to 40: the retired limiters give their credits back to the counter the
// new ones count in, so the day admits 40 in all (not fewer: credits
// returned elsewhere are lost; not more: a new counter starts at 0).
func TestReloadReturnsLeasedCreditsToTheSameCounter(t *testing.T) {
	for _, st := range fleetStores {
		t.Run(st.name, func(t *testing.T) {
			es := fleet(t, st.start(t, 3), dailyPolicy("leased", true, "", 50))
			now := t0.Add(9 * time.Hour)
			for _, e := range es { // each leases 7 and holds 6
				if got := decide(t, e, req("id", "user=u"), now); got.Code != engine.CodeOK {
					t.Fatal(codes(got))
				}
			}
			reloadFleet(t, es, dailyPolicy("leased", false, "daily", 40))
			if got := len(es) + useUp(t, es, "user=u", now.Add(time.Minute)); got != 40 {
				t.Fatalf("the day admitted %d across the reload, want 40", got)
			}
		})
	}
}

// bucketPolicy is one bucket limit of algorithm algo: 50 a second, burst
// burst.
func bucketPolicy(algo string, burst int) string {
	return fmt.Sprintf("domain: id\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 50, algorithm: %s, burst: %d}\n", algo, burst)
}

// TestReloadDoesNotRefillAShrunkBucket: a fleet empties a bucket of 100 at
// 50 a second, then a reload lowers its burst to 99: in the 2 s after, the
// fleet admits at most the 100 the rate refills (the new burst + rate·t
// bound, from an empty bucket), not 99 more. Keyed by the figures, it
// admitted 199.
func TestReloadDoesNotRefillAShrunkBucket(t *testing.T) {
	for _, st := range fleetStores {
		for _, algo := range []string{"token_bucket", "gcra"} {
			t.Run(st.name+"/"+algo, func(t *testing.T) {
				es := fleet(t, st.start(t, 2), bucketPolicy(algo, 100))
				now := t0.Add(9 * time.Hour)
				if got := useUp(t, es, "user=u", now); got != 100 {
					t.Fatalf("a fresh bucket admitted %d, want 100", got)
				}
				reloadFleet(t, es, bucketPolicy(algo, 99))
				total, bound := 0, 0
				for step := 0; step <= 200; step++ {
					at := now.Add(time.Duration(step) * 10 * time.Millisecond)
					total += useUp(t, es, "user=u", at)
					// Empty at now, 50/s since: ⌊50·t⌋, never more.
					if bound = step / 2; total > bound {
						t.Fatalf("%v after the burst went from 100 to 99: %d admitted, want ≤ %d (50/s from empty)", at.Sub(now), total, bound)
					}
				}
				if total < bound-2 {
					t.Fatalf("2s after the reload: %d admitted, want about %d (50/s)", total, bound)
				}
			})
		}
	}
}

// TestLimitsOfOneCounterAreRefused: a set built in code (not read from
// YAML, whose reader refuses it first) with two limits of one descriptor
// counting per the same period with the same algorithm is refused by Load
// and Check, at the second limit's line, and the policy in use stays.
func TestLimitsOfOneCounterAreRefused(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"id.yaml": dailyPolicy("strict", true, "", 50)})
	set := load(t, map[string]string{"id.yaml": dailyPolicy("strict", true, "daily", 50)})
	second := set.Domains[0].Descriptors[0].Limits[1]
	second.Unit = policy.Day // 1000 a day beside 50 a day: one counter
	for _, err := range []error{e.Check(set), e.Load(bg, set)} {
		if err == nil || !strings.Contains(err.Error(), "counts the same requests as the limit at line 6") || !strings.Contains(err.Error(), "id.yaml:7") {
			t.Fatalf("err = %v, want the second limit refused at id.yaml:7", err)
		}
	}
	if got := useUp(t, []*engine.Engine{e}, "user=u", t0); got != 50 {
		t.Fatalf("the policy in use admitted %d, want its 50", got)
	}
}
