package source_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/source"
)

// limitPolicy is domain a at n requests a second.
func limitPolicy(n int) string {
	return "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + string(rune('0'+n)) + "}\n"
}

// watchedDir is a Dir on a directory holding a.yaml, run until the test
// ends, recording what it applies, rejects and logs.
type watchedDir struct {
	file string
	logs testenv.Buffer

	mu       sync.Mutex
	applied  []int64 // the limit of each set applied
	rejected []error
}

// startWatchedDir runs a Dir (debounce 1ms) on a directory holding a.yaml
// at limitPolicy(1) and returns once it has applied a whole edit to 2: the
// watcher is up.
func startWatchedDir(t *testing.T) *watchedDir {
	t.Helper()
	dir := t.TempDir()
	w := &watchedDir{file: filepath.Join(dir, "a.yaml")}
	writeFile(t, dir, "a.yaml", limitPolicy(1))
	d := &source.Dir{Path: dir, Debounce: time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&w.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnReject: func(err error) {
			w.mu.Lock()
			w.rejected = append(w.rejected, err)
			w.mu.Unlock()
		}}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		done <- d.Run(ctx, func(_ context.Context, set *policy.Set) error {
			w.mu.Lock()
			w.applied = append(w.applied, int64(set.Domains[0].Descriptors[0].Limits[0].RequestsPerUnit))
			w.mu.Unlock()
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	wait(t, "the watcher up (a whole edit applied)", func() bool {
		writeFile(t, dir, "a.yaml", limitPolicy(2))
		return w.count(2) > 0
	})
	return w
}

// count is how many sets at limit were applied.
func (w *watchedDir) count(limit int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.applied {
		if l == limit {
			n++
		}
	}
	return n
}

func (w *watchedDir) rejects() []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]error(nil), w.rejected...)
}

// TestDirWaitsForATruncatedFileToBeWritten (issue 39): a file truncated
// and written later (cp, a shell's >, os.WriteFile; on a loaded machine
// the gap outlasts any debounce) is one reload of its new content, not a
// failed reload of an empty file and then a success. The test holds the
// file empty until the watcher has seen the truncation and its debounce
// has passed, so it does not depend on timing: before, the watcher read
// the empty file then and counted a failure.
func TestDirWaitsForATruncatedFileToBeWritten(t *testing.T) {
	w := startWatchedDir(t)
	f, err := os.OpenFile(w.file, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const holding = "policy file empty: waiting for it to be written"
	wait(t, "the watcher to judge or hold the truncated file", func() bool {
		return strings.Contains(w.logs.String(), holding) || len(w.rejects()) > 0
	})
	if errs := w.rejects(); len(errs) > 0 {
		t.Fatalf("a file still being written (truncated, not yet written) was judged a failed reload: %v", errs)
	}
	if _, err := f.WriteString(limitPolicy(3)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	wait(t, "the written file applied", func() bool { return w.count(3) > 0 })
	if got, errs := w.count(3), w.rejects(); got != 1 || len(errs) != 0 {
		t.Errorf("the truncate-then-write applied %d times with %d failures (%v), want one reload and none", got, len(errs), errs)
	}
}

// TestDirReportsAFileLeftEmpty: the hold on an empty file is bounded: a
// file truncated and left empty is a failed reload (an empty file holds
// no policy), reported EmptyFileWait after the debounce, never earlier.
func TestDirReportsAFileLeftEmpty(t *testing.T) {
	w := startWatchedDir(t)
	truncated := time.Now()
	if err := os.Truncate(w.file, 0); err != nil {
		t.Fatal(err)
	}
	wait(t, "the empty file rejected", func() bool { return len(w.rejects()) > 0 })
	if waited := time.Since(truncated); waited < source.EmptyFileWait {
		t.Errorf("the empty file was rejected %v after the truncation, before EmptyFileWait (%v)", waited, source.EmptyFileWait)
	}
	if !strings.Contains(w.logs.String(), "policy file still empty: reading it as it is") {
		t.Errorf("the read of a file left empty was not logged:\n%s", w.logs.String())
	}
}
