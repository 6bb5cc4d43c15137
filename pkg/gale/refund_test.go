package gale_test

import (
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

func TestRefundGivesBackTheAdmission(t *testing.T) {
	for _, mode := range []gale.Mode{gale.Strict, gale.CachedDeny, gale.Leased} {
		for _, r := range []gale.Rule{perMinute(3), {Algorithm: gale.GCRA, Limit: 3, Period: time.Minute}, {Algorithm: gale.SlidingWindow, Limit: 3, Period: time.Minute}} {
			t.Run(mode.String()+"/"+r.Algorithm.String(), func(t *testing.T) {
				l := newLimiter(t, memstore.New(), gale.Config{Rule: r, Mode: mode, Lease: gale.LeaseConfig{Batch: 2}})
				now := start.Add(10 * time.Second)
				d := mustCheck(t, l, "k", 2, now)
				if !d.Allowed {
					t.Fatal("denied")
				}
				if err := l.Refund(bg, "k", 2, d, now); err != nil {
					t.Fatal(err)
				}
				if !mustCheck(t, l, "k", 3, now).Allowed {
					t.Fatal("refunded units not available again")
				}
				if mustCheck(t, l, "k", 1, now).Allowed {
					t.Fatal("refund minted units")
				}
			})
		}
	}
}

func TestRefundAfterTheWindowIsDropped(t *testing.T) {
	s := memstore.New()
	l := newLimiter(t, s, gale.Config{Rule: perMinute(3)})
	d := mustCheck(t, l, "k", 3, start)
	next := start.Add(time.Minute)
	if err := l.Refund(bg, "k", 3, d, next); err != nil {
		t.Fatal(err)
	}
	if !mustCheck(t, l, "k", 3, next).Allowed || mustCheck(t, l, "k", 1, next).Allowed {
		t.Fatal("a refund into an ended window changed the new one")
	}
}
