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
}

var _ Source = (*Dir)(nil)

// Load reads the directory once.
func (d *Dir) Load() (*policy.Set, error) { return policy.Load(d.Path) }

// Run watches the directory until ctx ends and applies what it holds after
// each burst of changes. It returns an error only when the directory
// cannot be watched at all.
func (d *Dir) Run(ctx context.Context, apply Apply) error {
	return watchDir(ctx, d.Path, d.Debounce, d.Logger, func() {
		set, err := d.Load()
		if err == nil {
			err = apply(ctx, set)
		}
		if err != nil && d.OnReject != nil {
			d.OnReject(err)
		}
	})
}

// watchDir calls changed after each burst of changes in dir (debounce of
// quiet folds a burst into one call) until ctx ends. It watches the
// directory itself: editors' atomic renames and Kubernetes ConfigMap
// updates are seen. It returns an error only when dir cannot be watched.
func watchDir(ctx context.Context, dir string, debounce time.Duration, log *slog.Logger, changed func()) error {
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
			changed()
		}
	}
}
