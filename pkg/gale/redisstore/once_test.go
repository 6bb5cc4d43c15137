package redisstore_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// TestReturnOnce walks one window: a return is applied once per marker,
// gives as Return does, and is expired from the window's end on; its marker
// lapses at the window's end.
func TestReturnOnce(t *testing.T) {
	s, srv := newStore(t, redisstore.Options{Prefix: "app:"})
	c := srv.Client()
	r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Minute}
	t0 := timeline()
	g, err := s.Lease(ctx, "k", r, 10, 10, t0)
	if err != nil || g.Granted != 10 {
		t.Fatalf("lease: %+v, %v", g, err)
	}
	once := func(credits int64, marker string, now time.Time) redisstore.ReturnOnceResult {
		t.Helper()
		res, err := s.ReturnOnce(ctx, "k", r, credits, g.WindowEnd, marker, now)
		if err != nil {
			t.Fatalf("ReturnOnce(%d, %q): %v", credits, marker, err)
		}
		return res
	}
	steps := []struct {
		name    string
		credits int64
		marker  string
		at      time.Duration
		want    redisstore.ReturnOnceResult
		lease   int64 // what a lease of 1..10 then grants; -1: no lease
	}{
		{"first return gives", 4, "eu", time.Second, redisstore.ReturnApplied, -1},
		{"retry is a duplicate", 4, "eu", 2 * time.Second, redisstore.ReturnDuplicate, 4},
		{"zero credits set the marker", 0, "us", 3 * time.Second, redisstore.ReturnApplied, 0},
		{"and its retry is a duplicate", 5, "us", 4 * time.Second, redisstore.ReturnDuplicate, 0},
		{"at the window end it is too late", 3, "ap", time.Minute, redisstore.ReturnExpired, -1},
		{"a live marker past the end is expired too", 4, "eu", time.Minute, redisstore.ReturnExpired, -1},
	}
	for _, st := range steps {
		if got := once(st.credits, st.marker, t0.Add(st.at)); got != st.want {
			t.Fatalf("%s: %v, want %v", st.name, got, st.want)
		}
		if st.lease >= 0 {
			if l, _ := s.Lease(ctx, "k", r, 1, 10, t0.Add(st.at)); l.Granted != st.lease {
				t.Fatalf("%s: then a lease grants %d, want %d", st.name, l.Granted, st.lease)
			}
		}
	}
	name := s.OnceKey("k", g.WindowEnd, "eu")
	if want := "app:{k}:once:" + strconv.FormatInt(g.WindowEnd.UnixMicro(), 10) + ":6575"; name != want {
		t.Fatalf("OnceKey = %q, want %q", name, want)
	}
	if n, _ := c.Exists(ctx, s.OnceKey("k", g.WindowEnd, "ap")).Result(); n != 0 {
		t.Fatal("an expired return set a marker")
	}
	exp, err := c.Do(ctx, "PEXPIRETIME", name).Int64()
	if err != nil || exp != g.WindowEnd.UnixMilli() {
		t.Fatalf("marker expires at %d ms (%v), want the window end %d", exp, err, g.WindowEnd.UnixMilli())
	}
}

func TestReturnOnceArguments(t *testing.T) {
	s, _ := newStore(t, redisstore.Options{})
	end := timeline().Add(time.Minute)
	gcra := gale.Rule{Algorithm: gale.GCRA, Limit: 10, Period: time.Second}
	if _, err := s.ReturnOnce(ctx, "k", gcra, 1, end, "m", timeline()); !errors.Is(err, gale.ErrInvalidRule) {
		t.Errorf("GCRA: %v, want ErrInvalidRule", err)
	}
	for _, m := range []string{"", string(make([]byte, redisstore.MaxMarker+1))} {
		if _, err := s.ReturnOnce(ctx, "k", minute, 1, end, m, timeline()); !errors.Is(err, redisstore.ErrMarker) {
			t.Errorf("marker of %d bytes: %v, want ErrMarker", len(m), err)
		}
	}
	if _, err := s.ReturnOnce(ctx, "k", minute, 1, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), "m", timeline()); !errors.Is(err, redisstore.ErrTimeRange) {
		t.Errorf("window end in 2300: %v, want ErrTimeRange", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
	_ = s.Close()
	if _, err := s.ReturnOnce(ctx, "k", minute, 1, end, "m", timeline()); !errors.Is(err, redisstore.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}
