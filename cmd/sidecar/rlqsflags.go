package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/rlqs"
	"github.com/throttlekit/throttlekit/pkg/rlqsserver"
)

// rlqsConfig is the Rate Limit Quota Service on the gRPC listener
// (pkg/rlqsserver): off unless --rlqs.
type rlqsConfig struct {
	enabled bool
	// guard is how long before its window's end an assignment expires at
	// the Envoy: it must exceed one-way delivery latency for the bound.
	guard time.Duration
	// abandonIdle abandons subscriptions idle this long; 0: never.
	abandonIdle time.Duration
	// maxStreamsPerConn and maxBuckets bound one client connection's
	// streams and the buckets tracked; 0: no bound.
	maxStreamsPerConn, maxBuckets int
	// storeTimeout bounds a lease or a give-back: RLQS store calls are on
	// no request's path (--store-timeout bounds those).
	storeTimeout time.Duration
}

func (r *rlqsConfig) define(fs *flag.FlagSet) {
	fs.BoolVar(&r.enabled, "rlqs", false, "serve Envoy's Rate Limit Quota Service (envoy.service.rate_limit_quota.v3, filter envoy.filters.http.rate_limit_quota) on the gRPC listener: buckets match the same policy as RLS, and each window this sidecar leases units from the store and assigns them to its Envoys as token buckets that expire before the window ends")
	fs.DurationVar(&r.guard, "rlqs-guard", rlqs.DefaultGuard, "with --rlqs, how long before its window's end an assignment expires: longer than one-way delivery to Envoy, or an assignment may outlive its window (at most 1s)")
	fs.IntVar(&r.maxStreamsPerConn, "rlqs-max-streams-per-conn", rlqsserver.DefaultMaxStreamsPerConn, "with --rlqs, the most streams one client connection may hold open (an Envoy opens one per domain; more are refused with RESOURCE_EXHAUSTED, so one client cannot count as many Envoys in a window's split); 0: no bound")
	fs.IntVar(&r.maxBuckets, "rlqs-max-buckets", rlqsserver.DefaultMaxBuckets, "with --rlqs, the most buckets this sidecar tracks (each costs a timer and its streams' records); a new bucket's usages past it are skipped, counted in throttlekit_rlqs_skipped_usages_total{reason=\"buckets\"}; 0: no bound")
	fs.DurationVar(&r.storeTimeout, "rlqs-store-timeout", rlqsserver.DefaultStoreTimeout, "with --rlqs, how long a lease or a give-back may take before it is abandoned. RLQS store calls are on no request's path (Envoy decides each request from the assignment it holds), so a slow store only delays a window's assignments; a lease abandoned still runs in the store, and its units stay counted in their window. With Redis they go through a connection pool of their own, whose dial and read timeouts follow this one (--store-timeout bounds the requests' calls)")
	fs.DurationVar(&r.abandonIdle, "rlqs-abandon-idle", rlqsserver.DefaultAbandonIdle, "with --rlqs, tell an Envoy to drop a bucket it has reported no request for this long (it subscribes again on its next request, which its no_assignment_behavior decides); 0: never")
}

func (r *rlqsConfig) validate() error {
	var errs []error
	if r.guard <= 0 || r.guard > time.Second {
		errs = append(errs, fmt.Errorf("--rlqs-guard %v: want more than 0 and at most 1s (assignments live in whole seconds, windows at least 2s)", r.guard))
	}
	if r.storeTimeout < 10*time.Millisecond || r.storeTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("--rlqs-store-timeout %v: want 10ms to 1m (a lease longer than the window assigns nothing)", r.storeTimeout))
	}
	if r.maxStreamsPerConn < 0 || r.maxBuckets < 0 {
		errs = append(errs, fmt.Errorf("--rlqs-max-streams-per-conn %d, --rlqs-max-buckets %d: must be ≥ 0 (0: no bound)", r.maxStreamsPerConn, r.maxBuckets))
	}
	if r.abandonIdle < 0 {
		errs = append(errs, fmt.Errorf("--rlqs-abandon-idle %v: must be ≥ 0 (0: never)", r.abandonIdle))
	} else if r.abandonIdle > 0 && r.abandonIdle < time.Minute {
		errs = append(errs, fmt.Errorf("--rlqs-abandon-idle %v: at least 1m (Envoy reports every 5s; abandoning makes its next request resubscribe), or 0 for never", r.abandonIdle))
	}
	return errors.Join(errs...)
}

// rlqsMember is this sidecar's name in the store's demand ledger, where
// the sidecars leasing one counter share its window: its node id and its
// gRPC address, so that two sidecars on one host (one node id) are two
// members and a restarted sidecar is the one it was. Past gale.MaxMember
// bytes it is a digest of them.
func rlqsMember(nodeID, grpcAddr string) string {
	m := nodeID + "@" + grpcAddr
	if len(m) <= gale.MaxMember {
		return m
	}
	sum := sha256.Sum256([]byte(m))
	return "rlqs-" + hex.EncodeToString(sum[:16])
}

// options are the server's options (the resolver is the caller's).
func (r *rlqsConfig) options() rlqsserver.Options {
	o := rlqsserver.Options{Guard: r.guard, StoreTimeout: r.storeTimeout, AbandonIdle: r.abandonIdle,
		MaxStreamsPerConn: r.maxStreamsPerConn, MaxBuckets: r.maxBuckets}
	if r.abandonIdle == 0 {
		o.AbandonIdle = -1 // never
	}
	if r.maxStreamsPerConn == 0 {
		o.MaxStreamsPerConn = -1 // no bound
	}
	if r.maxBuckets == 0 {
		o.MaxBuckets = -1 // no bound
	}
	return o
}
