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
// directory changes. A set that fails to load is logged error by error,
// counted, and leaves the policy in use untouched.
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
	set, err := policy.Load(r.dir)
	if err == nil {
		if set.Hash == r.engine.Policy().Hash && len(set.Domains) > 0 {
			return nil // unchanged: keep every limiter as it is
		}
		err = r.engine.Load(ctx, set)
	}
	if err != nil {
		r.metrics.reloads.WithLabelValues("failure").Inc()
		var perrs policy.Errors
		if errors.As(err, &perrs) {
			for _, pe := range perrs {
				r.log.Error("policy error: keeping the previous policy", "at", pe.Pos.String(), "field", pe.Field, "error", pe.Msg)
			}
		} else {
			r.log.Error("policy not loaded: keeping the previous policy", "dir", r.dir, "error", err)
		}
		return err
	}
	r.metrics.policyLoaded(set.Hash)
	r.log.Info("policy loaded", "dir", r.dir, "domains", len(set.Domains), "hash", set.Hash)
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
