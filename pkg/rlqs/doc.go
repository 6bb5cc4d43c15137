// Package rlqs is the assignment machine of the Rate Limit Quota Service
// (Envoy's envoy.service.rate_limit_quota.v3) as a throttlekit sidecar serves
// it: for one bucket (one counter key of a windowed limit) on one serving
// sidecar, what the Envoys connected to it report, what the sidecar leased
// from the shared store (L2) for the window in place, and what it assigned
// to whom.
//
// The Machine is pure — no clock, no goroutines, no locks, no I/O —, as
// gale.Machine is: every instant is an argument, and what the driver must
// do (a lease to ask the store, units to give back to the store's window,
// assignments to send to Envoys, when to tick next) is returned as an
// Actions value. The gRPC service (pkg/rlqsserver) is one driver;
// pkg/gale/model's RLQS model is another, which enumerates the
// interleavings of these events for a few Envoys and sidecars against an
// abstract store and real Envoy-like token buckets.
//
// # The protocol it serves
//
// Each window, once the window has begun, the sidecar leases from the store
// what its connected Envoys' reported demand predicts over the life of the
// assignment it will send them (demand rate = (allowed+denied)/time_elapsed,
// smoothed, times the TTL below, not the window: an Envoy cannot spend a
// share after it expires, and units it could not spend are better left in
// the store for other sidecars), at most the limit, and splits what it was
// granted among them max-min fairly by demand. (How much of the limit one
// sidecar asks, among several, is the driver's: pkg/rlqsserver caps each
// lease by the sidecar's max-min share (MaxMin) of the demands announced in
// the store's demand ledger. The machine's bound holds for any grant.)
// An Envoy whose demand is unknown (it has only subscribed) is predicted at the
// bucket's mean per-Envoy rate, or, when no rate is known, at
// L/PriorShares per window: a sidecar whose Envoys subscribe first does not
// lease the whole window for them; their next report makes their rates
// known for the next window. Each Envoy gets one TokenBucket per window:
//
//	max_tokens = its share, tokens_per_fill = 1,
//	fill_interval = whole seconds ≥ 2 × window (refill within the TTL < 1 token),
//	assignment_time_to_live = floor((windowEnd − now − Guard) / 1 s) whole seconds,
//
// and nothing when that TTL is under one second. Every assignment therefore
// expires at the Envoy before its window ends, provided one-way delivery
// takes less than Guard, and the next window's assignment finds no live
// bucket: Envoy builds a new, full one.
//
// Accounting is conservative. An assignment sent costs its full max_tokens
// against what the sidecar leased for its window. Nothing sent is ever
// given back or reassigned within its window: an Envoy that leaves keeps
// enforcing its cached assignment until its TTL, so its share comes back
// only when the window ends. A new stream of the same client connection
// whose first report is a periodic one is that Envoy after a stream reset:
// it takes the left stream's record over (Bucket.Left). An Envoy that
// subscribes mid-window (the first report of the bucket on its stream; a
// reconnect on a new connection is a new subscriber) gets only what is
// not assigned: the sidecar leases for it
// (demand unknown: as above, over the TTL its assignment would have) and
// assigns what it got. An Envoy that holds an assignment in the window
// is topped up only once it has spent it (Stream.Hungry: a report of
// requests denied over an interval that began after the assignment was
// sent), with its predicted demand over the rest of the window, charged
// in full, as a fresh bucket sent behind a blanket DENY_ALL
// (Assignment.Fresh): Envoy drops the spent bucket and builds the new
// one full on every version. (Sent alone, a different bucket starts full
// on older Envoys, which a top-up charged only its increase would
// overspend, and at the old bucket's depleted ratio on newer ones.)
// Units leased and not assigned go back to the store's window as soon as
// they are known unneeded.
//
// A stream whose Envoy admits without an assignment (any but one that
// subscribed with Envoy's immediate report of a denied first request:
// Stream.FailsClosed) is told a blanket DENY_ALL wherever it holds no
// assignment it may spend: without a share of the window, and from two
// Guards before its assignment expires (see denyStarved).
//
// Bound: Σ admitted per window ≤ Σ max_tokens sent for it ≤ leased ≤ L
// (an Envoy admits at most a bucket's max_tokens from each it is sent),
// when one-way delivery latency is under Guard (under Envoy's default
// no_assignment_behavior, ALLOW_ALL, plus each Envoy's first request of
// the bucket, while its stream stays up). RequestsPerTimeUnit (which
// Envoy does not enforce) is never sent; blanket ALLOW_ALL for buckets
// without a limit is the driver's.
package rlqs
