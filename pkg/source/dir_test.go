package source_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/source"
)

// TestDirAppliesChangesAndRejectsBadSets: after a change the directory's
// set is applied; a bad file and an emptied directory go to OnReject, not
// to Apply.
func TestDirAppliesChangesAndRejectsBadSets(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	var mu sync.Mutex
	var applied []*policy.Set
	var rejected []error
	d := &source.Dir{Path: dir, Debounce: time.Millisecond, OnReject: func(err error) {
		mu.Lock()
		rejected = append(rejected, err)
		mu.Unlock()
	}}
	first, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		done <- d.Run(ctx, func(_ context.Context, set *policy.Set) error {
			mu.Lock()
			applied = append(applied, set)
			mu.Unlock()
			return nil
		})
	}()
	counts := func() (int, int) { mu.Lock(); defer mu.Unlock(); return len(applied), len(rejected) }
	lastRejected := func() error { mu.Lock(); defer mu.Unlock(); return rejected[len(rejected)-1] }

	// The watcher is up once a write is seen.
	wait(t, "a change applied", func() bool {
		writeFile(t, dir, "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n")
		n, _ := counts()
		return n > 0
	})
	mu.Lock()
	last := applied[len(applied)-1]
	mu.Unlock()
	if last.Hash == first.Hash || last.Domains[0].Descriptors[0].Limits[0].RequestsPerUnit != 2 {
		t.Fatalf("applied %+v, want the changed file", last.Domains[0].Descriptors[0].Limits[0])
	}

	writeFile(t, dir, "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n")
	wait(t, "a bad file rejected", func() bool { _, r := counts(); return r > 0 })
	// Counted only now: a write of the loop above may still have been
	// applied after it ended, but no read after the one that found the bad
	// file can find a good one.
	nApplied, _ := counts()
	var perrs policy.Errors
	if err := lastRejected(); !errors.As(err, &perrs) {
		t.Fatalf("rejected %v, want policy.Errors", err)
	}
	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	wait(t, "the emptied directory rejected", func() bool { return errors.Is(lastRejected(), policy.ErrEmpty) })
	if n, _ := counts(); n != nApplied {
		t.Fatalf("%d sets applied after the bad ones, want %d", n, nApplied)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestDirThatCannotBeWatched(t *testing.T) {
	d := &source.Dir{Path: filepath.Join(t.TempDir(), "missing")}
	if err := d.Run(bg, func(context.Context, *policy.Set) error { return nil }); err == nil {
		t.Fatal("Run on a missing directory returned nil")
	}
}

// TestDirTreeWatchesSubdirectories (issue 32, item 4): with Tree, every
// file below the directory is policy (envoyproxy/ratelimit's runtime
// layout), and a change in a subdirectory — one there from the start, or
// one made while watching — is applied.
func TestDirTreeWatchesSubdirectories(t *testing.T) {
	dir := t.TempDir()
	limit := func(domain string, n int) string {
		return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + string(rune('0'+n)) + "}\n"
	}
	if err := os.MkdirAll(filepath.Join(dir, "team-a"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "team-a"), "api.conf", limit("a", 1))
	var mu sync.Mutex
	var last *policy.Set
	d := &source.Dir{Path: dir, Debounce: time.Millisecond, Tree: true}
	if set, err := d.Load(); err != nil || len(set.Domains) != 1 {
		t.Fatalf("Load: %v, %v", set, err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	go d.Run(ctx, func(_ context.Context, set *policy.Set) error { //nolint:errcheck // ends with ctx
		mu.Lock()
		last = set
		mu.Unlock()
		return nil
	})
	limitOf := func(domain string) int64 {
		mu.Lock()
		defer mu.Unlock()
		if last == nil {
			return 0
		}
		for _, dm := range last.Domains {
			if dm.Name == domain {
				return int64(dm.Descriptors[0].Limits[0].RequestsPerUnit)
			}
		}
		return 0
	}
	wait(t, "a change in a subdirectory applied", func() bool {
		writeFile(t, filepath.Join(dir, "team-a"), "api.conf", limit("a", 2))
		return limitOf("a") == 2
	})
	wait(t, "a new subdirectory's file applied", func() bool {
		if err := os.MkdirAll(filepath.Join(dir, "team-b"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "team-b"), "api.yaml", limit("b", 3))
		return limitOf("b") == 3
	})
	// The load that found team-b watched it before applying (Run watches
	// what a load read before judging it): one write is seen.
	writeFile(t, filepath.Join(dir, "team-b"), "api.yaml", limit("b", 4))
	wait(t, "a change in the new subdirectory applied", func() bool { return limitOf("b") == 4 })
}
