package source

import (
	"context"
	"log/slog"
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
	return watchDir(ctx, d.Path, d.Debounce, d.Logger, dirs, func() []string {
		set, dirs, err := d.load()
		if err == nil {
			err = apply(ctx, set)
		}
		if err != nil && d.OnReject != nil {
			d.OnReject(err)
		}
		return dirs
	})
}

// watchDir calls changed after each burst of changes in dir or in the
// directories below it that sub and changed name (debounce of quiet folds
// a burst into one call) until ctx ends. It watches the directories
// themselves: editors' atomic renames and Kubernetes ConfigMap updates are
// seen. It returns an error only when dir cannot be watched.
func watchDir(ctx context.Context, dir string, debounce time.Duration, log *slog.Logger, sub []string, changed func() []string) error {
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
			if timer == nil {
				timer = time.NewTimer(debounce)
			} else {
				timer.Reset(debounce)
			}
			fire = timer.C
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.Warn("watching the policy directory", "dir", dir, "error", err)
		case <-fire:
			fire = nil
			watch(changed())
		}
	}
}
