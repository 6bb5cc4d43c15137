package redisfed_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/federationtest"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// backend is a coordinator and an escrow on one Redis, and their five
// keyed operations.
type backend struct {
	c *redisfed.Coordinator
	e *redisfed.Escrow
}

func (b backend) ops(key string, now time.Time) map[string]func() error {
	w := federation.Window{End: now.Add(time.Minute), TTL: time.Minute}
	return map[string]func() error{
		"Lease": func() error { _, err := b.c.Lease(ctx, key, perMinute, 1, 1, now); return err },
		"Reconcile": func() error {
			_, err := b.c.Reconcile(ctx, key, perMinute, federation.Reconcile{Leftover: 1, WindowEnd: w.End, Token: "eu", Now: now})
			return err
		},
		"Take":    func() error { _, err := b.e.Take(ctx, key, 1, 1, now); return err },
		"Refill":  func() error { _, err := b.e.Refill(ctx, key, 1, w, now); return err },
		"Release": func() error { _, err := b.e.Release(ctx, key, w.End, now); return err },
	}
}

// TestRefusals: Redis refusing a request for its key's stored value — a
// name holding another type, a malformed state — fails that request with
// an error wrapping federation.ErrRefused and Redis's reply, and every
// other key still works; Redis refusing every request (READONLY on a
// replica, OOM, BUSY) or not answering does not wrap it.
func TestRefusals(t *testing.T) {
	srv := testenv.StartRedis(t)
	rc := srv.Client()
	s, err := redisstore.New(rc, redisstore.Options{Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e, err := redisfed.NewEscrow(rc, redisfed.EscrowOptions{Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	b, now := backend{redisfed.CoordinatorOn(s), e}, storetest.Timeline()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(rc.Set(ctx, s.Key("wrongtype"), "x", 0).Err())
	must(rc.Set(ctx, e.Key("wrongtype"), "x", 0).Err())
	must(rc.HSet(ctx, s.Key("malformed"), "w", "not a number").Err())
	must(rc.HSet(ctx, e.Key("malformed"), "we", "not a number", "dl", 1, "n", 1).Err())
	for _, key := range []string{"wrongtype", "malformed"} {
		for name, op := range b.ops(key, now) {
			err := op()
			if !errors.Is(err, federation.ErrRefused) {
				t.Errorf("%s of the %s key: %v, want an error wrapping ErrRefused", name, key, err)
			} else if !strings.Contains(err.Error(), map[string]string{"wrongtype": "WRONGTYPE", "malformed": "malformed"}[key]) &&
				!strings.Contains(err.Error(), "not a number") {
				t.Errorf("%s of the %s key: %q lacks Redis's reply", name, key, err)
			} else {
				t.Logf("%s of the %s key: %v", name, key, err)
			}
		}
	}
	for name, op := range b.ops("fine", now) {
		if err := op(); err != nil {
			t.Errorf("%s of another key after the refusals: %v", name, err)
		}
	}

	// Operations that write on a fresh key (a take or a release of no
	// balance writes nothing, and a read-only or full Redis serves it).
	writes := []string{"Lease", "Reconcile", "Refill"}
	notRefused := func(t *testing.T, b backend, what string, names []string) {
		t.Helper()
		ops := b.ops(t.Name(), now)
		for _, name := range names {
			if err := ops[name](); err == nil || errors.Is(err, federation.ErrRefused) {
				t.Errorf("%s %s: %v, want an error that is not ErrRefused", name, what, err)
			} else {
				t.Logf("%s %s: %v", name, what, err)
			}
		}
	}
	t.Run("OOM", func(t *testing.T) {
		must(rc.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
		must(rc.ConfigSet(ctx, "maxmemory", "1").Err())
		notRefused(t, b, "with Redis out of memory", writes)
		must(rc.ConfigSet(ctx, "maxmemory", "0").Err())
	})
	t.Run("BUSY", func(t *testing.T) {
		must(rc.ConfigSet(ctx, "busy-reply-threshold", "10").Err()) // ms
		busy := make(chan error, 1)
		go func() { busy <- srv.Client().Eval(ctx, "while true do end", nil).Err() }()
		if !testenv.Eventually(func() bool { return redis.HasErrorPrefix(rc.Ping(ctx).Err(), "BUSY") }) {
			t.Fatal("Redis never answered BUSY")
		}
		notRefused(t, b, "while a script keeps Redis busy", []string{"Lease", "Reconcile", "Take", "Refill", "Release"})
		must(srv.Client().ScriptKill(ctx).Err())
		<-busy
	})
	t.Run("READONLY", func(t *testing.T) {
		replica := testenv.StartRedis(t)
		host, port, _ := net.SplitHostPort(srv.Addr)
		must(replica.Client().SlaveOf(ctx, host, port).Err())
		rs, err := redisstore.New(replica.Client(), redisstore.Options{Timeout: testenv.StoreDeadline})
		must(err)
		defer rs.Close()
		re, err := redisfed.NewEscrow(replica.Client(), redisfed.EscrowOptions{Timeout: testenv.StoreDeadline})
		must(err)
		notRefused(t, backend{redisfed.CoordinatorOn(rs), re}, "on a read-only replica", writes)
	})
	t.Run("Killed", func(t *testing.T) {
		srv.Kill()
		notRefused(t, b, "on a killed server", []string{"Lease", "Reconcile", "Take", "Refill", "Release"})
	})
}

// TestClusterLongKeysAndCrossSlot: on Redis Cluster, the engine's longest
// keys lease, reconcile and hold escrow balances (each name in one slot);
// a key whose hash tag is empty puts its reconcile marker in another slot,
// and Cluster's CROSSSLOT refusal wraps ErrRefused.
func TestClusterLongKeysAndCrossSlot(t *testing.T) {
	cluster := testenv.StartCluster(t, 1)
	c, err := redisfed.NewCoordinator(cluster.PatientClient(), redisstore.Options{Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e, err := redisfed.NewEscrow(cluster.PatientClient(), redisfed.EscrowOptions{Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	now := storetest.Timeline()
	for i, key := range federationtest.LongKeys(t.Name()) {
		for name, op := range (backend{c, e}).ops(key, now.Add(time.Duration(i)*time.Second)) {
			if err := op(); err != nil {
				t.Errorf("%s of long key %d (%d bytes): %v", name, i, len(key), err)
			}
		}
	}
	_, err = c.Reconcile(context.Background(), "}x", gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Minute},
		federation.Reconcile{Leftover: 1, WindowEnd: now.Add(time.Minute), Token: "eu", Now: now})
	if !errors.Is(err, federation.ErrRefused) || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("reconcile of a key with an empty hash tag: %v, want CROSSSLOT wrapping ErrRefused", err)
	}
}
