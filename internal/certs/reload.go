package certs

import (
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// files holds what a set of PEM files makes (M), and loads them again
// when they change, for Source (a listener's) and DialSource (a
// client's): at most once an interval a handshake stats the files and,
// when one changed (a rewrite, or the symlink swap of a Kubernetes secret
// update), loads them again; a set that does not load is logged and the
// one in use stays, and is not tried again until the files change once
// more. Safe for concurrent handshakes.
type files[M any] struct {
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger
	stat     func() ([]os.FileInfo, error) // the files, without reading them
	load     func() (*M, error)            // the files, read; it stats them first
	statOf   func(*M) []os.FileInfo        // the files as m was loaded from them
	reloaded func(old, cur *M)             // says a reload in the log

	cur     atomic.Pointer[M]
	checked atomic.Int64  // when the files were last looked at, Unix ns
	mu      sync.Mutex    // one reload at a time
	failed  []os.FileInfo // the files as they last failed to load; guarded by mu
}

// start loads the files for the first time.
func (f *files[M]) start() error {
	m, err := f.load()
	if err != nil {
		return err
	}
	f.cur.Store(m)
	f.checked.Store(f.now().UnixNano())
	return nil
}

// refresh loads the files again when the interval has passed and one of
// them changed.
func (f *files[M]) refresh() {
	now := f.now().UnixNano()
	last := f.checked.Load()
	if now-last < int64(f.interval) || !f.checked.CompareAndSwap(last, now) {
		return // looked at recently, or another handshake is looking
	}
	st, err := f.stat()
	if err != nil || sameFiles(st, f.statOf(f.cur.Load())) {
		return // gone for a moment (a swap), or unchanged
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if sameFiles(st, f.failed) || sameFiles(st, f.statOf(f.cur.Load())) {
		return // known not to load, or loaded meanwhile
	}
	m, err := f.load()
	if err != nil {
		f.failed = st
		f.log.Error("TLS files changed but do not load: keeping the ones in use", "error", err)
		return
	}
	f.reloaded(f.cur.Swap(m), m)
}

// sameFiles reports whether a and b are the same files, unchanged.
func sameFiles(a, b []os.FileInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !os.SameFile(a[i], b[i]) || !a[i].ModTime().Equal(b[i].ModTime()) || a[i].Size() != b[i].Size() {
			return false
		}
	}
	return true
}
