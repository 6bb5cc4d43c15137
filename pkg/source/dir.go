package source

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// Dir is a Source that reads a directory of policy files (policy.Load)
// whenever it changes. It watches the directory itself, so editors' atomic
// renames and Kubernetes ConfigMap updates (a new ..data symlink swapped
// in) are both seen; a burst of events is folded into one load after
// Debounce of quiet.
//
// A file still being written is not judged: a file that is empty and new
// or changed since the last load (truncated, its content not yet written:
// cp, a shell's >, an editor saving in place) holds the load until it has
// content, for at most EmptyFileWait; and a load during which a file's
// size or modification time moved is dropped and read again after
// Debounce. So such a write is one reload, not a failure and a success.
// Writing to a temporary name and renaming it into place is still the
// only way a reader never sees half a file.
//
// Run does not load the directory at start: the caller does, with Load,
// and decides what a bad first set means (serve refuses to start).
type Dir struct {
	// Path is the directory.
	Path string
	// Debounce is the quiet time after a change before loading.
	Debounce time.Duration
	// Logger receives each change, at debug level (nil: discard).
	Logger *slog.Logger
	// OnReject, when set, is called with the error of every set that fails
	// to load (an empty directory included: policy.ErrEmpty) or that Apply
	// refuses; the policy in use stays.
	OnReject func(err error)
	// Tree reads every file below Path, subdirectories included and
	// whatever the extension, as envoyproxy/ratelimit reads its runtime
	// directory (policy.LoadTree), and watches the subdirectories too;
	// false reads the *.yaml and *.yml files directly in Path (policy.Load).
	Tree bool
}

var _ Source = (*Dir)(nil)

// Load reads the directory once.
func (d *Dir) Load() (*policy.Set, error) {
	set, _, err := d.load()
	return set, err
}

// load reads the directory and returns the directories it read.
func (d *Dir) load() (*policy.Set, []string, error) {
	if d.Tree {
		return policy.LoadTree(d.Path)
	}
	set, err := policy.Load(d.Path)
	return set, nil, err
}

// Run watches the directory until ctx ends and applies what it holds after
// each burst of changes. It returns an error only when the directory
// cannot be watched at all.
func (d *Dir) Run(ctx context.Context, apply Apply) error {
	var dirs []string
	if d.Tree {
		_, dirs, _ = policy.LoadTree(d.Path) // the subdirectories to watch from the start
	}
	return watchDir(ctx, d.Path, d.Debounce, d.Logger, dirs, func() (func(), []string) {
		set, dirs, err := d.load()
		return func() {
			if err == nil {
				err = apply(ctx, set)
			}
			if err != nil && d.OnReject != nil {
				d.OnReject(err)
			}
		}, dirs
	})
}

// EmptyFileWait is how long a changed, empty file holds a load back, from
// the end of the debounce: long enough for a writer that truncated it to
// write it even on a loaded machine, short enough that a file really left
// empty is reported (as a failed load) within seconds.
const EmptyFileWait = 2 * time.Second

// fileState is what a load compares before and after reading: a write
// during the read moves the size or the modification time.
type fileState struct {
	size    int64
	modTime time.Time
}

// statTree returns the state of every file below dir, a symlink's target's
// (the loaders follow symlinks: a ConfigMap's files are links into its
// ..data directory, which is walked too).
func statTree(dir string) map[string]fileState {
	states := map[string]fileState{}
	_ = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil // a file gone meanwhile is seen by the next look
		}
		if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
			states[path] = fileState{size: fi.Size(), modTime: fi.ModTime()}
		}
		return nil
	})
	return states
}

// emptyChanged returns the files of now, not dot files (which the loaders
// skip), that are empty and new or changed since then.
func emptyChanged(then, now map[string]fileState) []string {
	var empty []string
	for path, st := range now {
		if old, ok := then[path]; st.size == 0 && (!ok || old != st) && !strings.HasPrefix(filepath.Base(path), ".") {
			empty = append(empty, path)
		}
	}
	sort.Strings(empty)
	return empty
}

// sameStates reports whether no file moved, came or went between two
// statTree.
func sameStates(a, b map[string]fileState) bool {
	if len(a) != len(b) {
		return false
	}
	for path, st := range a {
		if other, ok := b[path]; !ok || other != st {
			return false
		}
	}
	return true
}

// watchDir calls read after each burst of changes in dir or in the
// directories below it that sub and read name (debounce of quiet folds a
// burst into one call) until ctx ends, and then the judge read returns,
// unless a file moved during the read: then the read is dropped and made
// again after debounce. A file that is empty and changed since the last
// judged read holds the read back until it has content or EmptyFileWait
// has passed. watchDir watches the directories themselves: editors'
// atomic renames and Kubernetes ConfigMap updates are seen. It returns an
// error only when dir cannot be watched.
func watchDir(ctx context.Context, dir string, debounce time.Duration, log *slog.Logger, sub []string, read func() (judge func(), sub []string)) error {
	return watchDirReady(ctx, dir, debounce, log, sub, read, nil)
}

// watchDirReady is watchDir, calling ready (when not nil) once dir is
// watched: a change made after it is seen.
func watchDirReady(ctx context.Context, dir string, debounce time.Duration, log *slog.Logger, sub []string, read func() (judge func(), sub []string), ready func()) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		return err
	}
	if ready != nil {
		ready()
	}
	watched := map[string]bool{dir: true}
	watch := func(dirs []string) {
		for _, d := range dirs {
			if !watched[d] && w.Add(d) == nil { // a directory gone meanwhile is seen by its parent
				watched[d] = true
			}
		}
	}
	watch(sub)
	var timer *time.Timer
	var fire <-chan time.Time
	arm := func(d time.Duration) {
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		fire = timer.C
	}
	// judged is the state of the files at the last read judged (the files
	// a change is measured from); held is when the debounce first found a
	// changed file empty (zero: none was). Both are measured on the files,
	// not on the events: under load a debounce can end before the events
	// of a write are delivered.
	judged := statTree(dir)
	var held time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			log.Debug("policy directory changed", "dir", dir, "event", ev.String())
			if ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 && ev.Name != dir {
				delete(watched, ev.Name) // gone: watched again if it comes back
			}
			arm(debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.Warn("watching the policy directory", "dir", dir, "error", err)
		case <-fire:
			fire = nil
			before := statTree(dir)
			if empty := emptyChanged(judged, before); len(empty) > 0 {
				if held.IsZero() {
					held = time.Now()
				}
				if wait := EmptyFileWait - time.Since(held); wait > 0 {
					log.Debug("policy file empty: waiting for it to be written", "dir", dir, "files", empty, "wait", wait)
					arm(wait) // or until the next event, which a write makes
					continue
				}
				log.Warn("policy file still empty: reading it as it is", "dir", dir, "files", empty, "waited", time.Since(held))
			}
			judge, sub := read()
			watch(sub)
			if !sameStates(before, statTree(dir)) {
				log.Debug("policy file changed while being read: reading it again", "dir", dir)
				arm(debounce)
				continue
			}
			judged, held = before, time.Time{}
			judge()
		}
	}
}
