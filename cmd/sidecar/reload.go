package main

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/source"
)

// reloader swaps policy sets into the engine, from whichever source serve
// wires (the policy directory, or an xDS server), counting and logging
// each: a set that fails to load or that the engine refuses (an empty one
// included: the only file deleted, say) is logged error by error, counted,
// and leaves the policy in use untouched.
type reloader struct {
	dir      string // the policy directory, for the directory source and logs
	tree     bool   // every file below dir (source.Dir.Tree)
	engine   *engine.Engine
	metrics  *metrics
	log      *slog.Logger
	debounce time.Duration
	loaded   chan string // receives the hash of every policy swapped in (tests, readiness)
	failing  atomic.Bool // the source's newest set failed to load
}

// load reads and swaps in the directory's policy.
func (r *reloader) load(ctx context.Context) error {
	set, err := r.dirSource().Load() // an empty set is an error: policy.ErrEmpty
	if err == nil {
		err = r.apply(ctx, set)
	}
	if err != nil {
		r.reject(err)
	}
	return err
}

// apply swaps set in (a source.Apply); the caller reports an error.
func (r *reloader) apply(ctx context.Context, set *policy.Set) error {
	if set.Hash == r.engine.Policy().Hash {
		// Unchanged: keep every limiter and gate as it is. After a
		// failure this is the good set restored: say so, and count it.
		if r.failing.Swap(false) {
			r.metrics.PolicyRestored()
			r.log.Info("policy restored: the source holds the policy in use again", "hash", set.Hash)
		}
		return nil
	}
	if err := r.engine.Load(ctx, set); err != nil {
		return err
	}
	r.metrics.policyLoaded(set.Hash)
	r.failing.Store(false)
	from := []any{"dir", r.dir}
	if set.Dir == "" && len(set.Files) > 0 {
		from = []any{"from", set.Files[0].File} // pushed (xDS): files are named after their resources
	}
	r.log.Info("policy loaded", append(from, "domains", len(set.Domains), "gates", len(set.Gates), "hash", set.Hash)...)
	select {
	case r.loaded <- set.Hash:
	default:
	}
	return nil
}

// reject counts and logs a set that was not swapped in (source.Dir's and
// source.XDS's OnReject).
func (r *reloader) reject(err error) {
	r.metrics.PolicyFailed()
	r.failing.Store(true)
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
		return
	}
	r.log.Error("policy not loaded"+kept, "dir", r.dir, "error", err)
}

// dirSource is the policy directory as a source.
func (r *reloader) dirSource() *source.Dir {
	return &source.Dir{Path: r.dir, Tree: r.tree, Debounce: r.debounce, Logger: r.log, OnReject: r.reject}
}

// watch reloads on every change under the directory until ctx ends
// (source.Dir).
func (r *reloader) watch(ctx context.Context) error {
	return r.dirSource().Run(ctx, r.apply)
}
