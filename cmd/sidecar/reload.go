package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// reloader loads the policy directory into the engine, now and whenever the
// directory changes. A set that fails to load (an empty one included: the
// only file deleted, say) is logged error by error, counted, and leaves the
// policy in use untouched.
type reloader struct {
	dir      string
	engine   *engine.Engine
	metrics  *metrics
	log      *slog.Logger
	debounce time.Duration
	loaded   chan string // receives the hash of every policy swapped in (tests, readiness)
}

// load reads and swaps in the directory's policy.
func (r *reloader) load(ctx context.Context) error {
	set, err := policy.Load(r.dir) // an empty set is an error: policy.ErrEmpty
	if err == nil {
		if set.Hash == r.engine.Policy().Hash {
			return nil // unchanged: keep every limiter and gate as it is
		}
		err = r.engine.Load(ctx, set)
	}
	if err != nil {
		r.metrics.reloads.WithLabelValues("failure").Inc()
		kept := ": keeping the previous policy"
		if r.engine.Policy().Hash == "" {
			kept = "" // the first load: there is no previous policy
		}
		var perrs policy.Errors
		if errors.As(err, &perrs) {
			for _, pe := range perrs {
				attrs := []any{"at", pe.Pos.String()}
				if pe.Field != "" {
					attrs = append(attrs, "field", pe.Field)
				}
				attrs = append(attrs, "error", pe.Msg)
				if pe.Snippet != "" {
					attrs = append(attrs, "source", pe.Snippet)
				}
				r.log.Error("policy error"+kept, attrs...)
			}
		} else {
			r.log.Error("policy not loaded"+kept, "dir", r.dir, "error", err)
		}
		return err
	}
	r.metrics.policyLoaded(set.Hash)
	r.log.Info("policy loaded", "dir", r.dir, "domains", len(set.Domains), "gates", len(set.Gates), "hash", set.Hash)
	select {
	case r.loaded <- set.Hash:
	default:
	}
	return nil
}

// watch reloads on every change under the directory until ctx ends. It
// watches the directory itself, so editors' atomic renames and Kubernetes
// ConfigMap updates (a new ..data symlink swapped in) are both seen; bursts
// of events are folded into one load after the debounce.
func (r *reloader) watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(r.dir); err != nil {
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
			r.log.Debug("policy directory changed", "event", ev.String())
			if timer == nil {
				timer = time.NewTimer(r.debounce)
			} else {
				timer.Reset(r.debounce)
			}
			fire = timer.C
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			r.log.Warn("watching the policy directory", "error", err)
		case <-fire:
			fire = nil
			_ = r.load(ctx)
		}
	}
}
