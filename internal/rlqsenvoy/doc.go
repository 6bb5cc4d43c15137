// Package rlqsenvoy emulates one Envoy process's rate_limit_quota HTTP filter
// (the client side of the Rate Limit Quota Service, RLQS) for tests: what
// Envoy's source does, not what the proto comments promise.
//
// A Filter is one filter configuration: one domain, one server cluster (several
// endpoints), one stream at a time. Its core (Cache) is pure: it takes `now` and
// returns decisions and report messages; Filter wraps it with the gRPC stream,
// the report ticker and a mutex. Each behaviour and the Envoy source file it
// comes from is listed in docs/rlqs.md, section "What Envoy does".
//
// Behaviours, in short (source: source/extensions/filters/http/rate_limit_quota/
// filter.cc and global_client_impl.cc, source/common/common/token_bucket_impl.cc):
//   - the stream opens lazily on the first bucket; a bucket's first request is
//     decided by no_assignment_behavior (only a blanket DENY_ALL denies) and
//     reported at once with time_elapsed 0;
//   - every report interval (5 s) every cached bucket is reported with the
//     requests allowed and denied since its last report and whole-second
//     time_elapsed; if the stream is down the tick reopens it, and drops the
//     tick's reports if that fails;
//   - a TokenBucket action builds an AtomicTokenBucket (continuous refill at
//     tokens_per_fill / whole seconds of fill_interval); an "equal" one keeps
//     the live bucket; RequestsPerTimeUnit is skipped; abandon erases; the TTL
//     is whole seconds and restarts on every action; on expiry the fallback
//     applies for its timeout, then no_assignment_behavior.
package rlqsenvoy
