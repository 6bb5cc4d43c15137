package redisstore_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// TestAnnounce: the demand ledger, on a real Redis and on the memory store
// alike: each member's latest demand in the window is recorded and every
// one returned; in a window's first 500 ms (LedgerEarly), the window
// before's demands of members not heard yet come too, marked past, and
// none after it; a window after a gap
// starts empty; a caller still in an older window hears only itself and
// changes nothing; bad arguments are refused.
func TestAnnounce(t *testing.T) {
	s, srv := newStore(t, redisstore.Options{Prefix: "app:"})
	r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 100, Period: 10 * time.Second}
	t0 := timeline().Truncate(10 * time.Second)
	for name, l := range map[string]gale.DemandLedger{"redis": s, "memory": memstore.New()} {
		t.Run(name, func(t *testing.T) {
			for _, step := range []struct {
				member string
				demand int64
				at     time.Duration
				want   string
			}{
				{"a", 30, 0, "a=30"},
				{"b", 50, time.Second, "a=30 b=50"},
				{"a", 40, 2 * time.Second, "a=40 b=50"}, // the latest replaces
				{"c", 0, 9 * time.Second, "a=40 b=50 c=0"},
				{"b", 20, 10 * time.Second, "a'=40 b=20 c'=0"},        // early in the next: the others' from before
				{"a", 70, 9 * time.Second, "a=70"},                    // an older window: itself alone
				{"a", 10, 10400 * time.Millisecond, "a=10 b=20 c'=0"}, // and it changed nothing
				{"c", 5, 10500 * time.Millisecond, "a=10 b=20 c=5"},   // past 500 ms: this window's only
				{"b", 25, 12 * time.Second, "a=10 b=25 c=5"},
				{"a", 1, 40 * time.Second, "a=1"}, // after a gap: empty
			} {
				got, err := l.Announce(ctx, "k", r, step.member, step.demand, t0.Add(step.at))
				if err != nil {
					t.Fatalf("Announce(%s, %d, %v): %v", step.member, step.demand, step.at, err)
				}
				var words []string
				for _, d := range got {
					past := ""
					if d.Past {
						past = "'"
					}
					words = append(words, fmt.Sprintf("%s%s=%d", d.Member, past, d.Units))
				}
				slices.Sort(words)
				if s := fmt.Sprint(words); s != "["+step.want+"]" {
					t.Errorf("%s announces %d at %v: %s, want [%s]", step.member, step.demand, step.at, s, step.want)
				}
			}
			for _, bad := range []struct {
				member string
				demand int64
				rule   gale.Rule
			}{
				{"", 1, r}, {string(make([]byte, gale.MaxMember+1)), 1, r}, {"a", -1, r}, {"a", gale.MaxLimit + 1, r},
				{"a", 1, gale.Rule{Algorithm: gale.FixedWindow, Limit: 1, Period: time.Microsecond}},
			} {
				if _, err := l.Announce(ctx, "k", bad.rule, bad.member, bad.demand, t0); err == nil {
					t.Errorf("Announce(%q, %d, %v) accepted", bad.member, bad.demand, bad.rule.Period)
				}
			}
		})
	}
	if ttl := srv.Client().PTTL(ctx, s.LedgerKey("k")).Val(); ttl <= 0 || ttl > 20*time.Second {
		t.Errorf("the ledger's time to live %v, want two periods", ttl)
	}
}

// TestAnnounceOnACluster: on a 3-shard Redis Cluster the ledger lives in
// its counter's slot; members announce and lease side by side on many
// keys, each answered by its own slot's node.
func TestAnnounceOnACluster(t *testing.T) {
	cluster := testenv.StartCluster(t, 3)
	s, err := redisstore.New(cluster.Client(), redisstore.Options{Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 100, Period: 10 * time.Second}
	now := timeline()
	for k := range 32 {
		key := fmt.Sprint("k", k)
		for _, m := range []string{"a", "b"} {
			if _, err := s.Announce(ctx, key, r, m, int64(k), now); err != nil {
				t.Fatalf("%s announces on %s: %v", m, key, err)
			}
			if _, err := s.Lease(ctx, key, r, 1, 10, now); err != nil {
				t.Fatalf("%s leases %s: %v", m, key, err)
			}
		}
		got, err := s.Announce(ctx, key, r, "c", 1, now)
		if err != nil || len(got) != 3 {
			t.Fatalf("%s: %v, %v: want a, b and c", key, got, err)
		}
	}
}
