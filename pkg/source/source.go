// Package source says where policy sets come from: a watched directory, or
// an xDS subscription to envoyproxy/ratelimit's RateLimitConfig resources
// (the way Envoy Gateway configures its rate-limit service). Every source
// yields validated policy.Sets and hands each to an Apply function, which
// swaps it in (the engine's Load); a set the source cannot build, or that
// Apply refuses, leaves the policy in use untouched.
//
// A source knows nothing of the engine, gRPC servers or metrics: serve
// wires one to the engine and logs what it reports.
package source

import (
	"context"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// Apply swaps a validated set in. It returns an error when the set cannot
// be used (the engine refused to compile it); the set in use then stays.
// A source calls Apply from one goroutine at a time.
type Apply func(ctx context.Context, set *policy.Set) error

// Source delivers policy sets until its context ends.
//
// Run calls apply with every new set, in order, from one goroutine, and
// never with a set that failed validation. It returns nil when ctx ends,
// or an error when it cannot go on at all (a directory it cannot watch).
// Problems with one set (a bad file, a NACKed push) are reported through
// the source's own hooks and do not end Run. A Source is run once.
type Source interface {
	Run(ctx context.Context, apply Apply) error
}
