package main

import (
	"context"
	"fmt"
	"io"
	"maps"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// probeQuota plays an Envoy's rate_limit_quota filter subscribing one
// bucket (serve --rlqs), in Envoy's order: the stream opens on the
// bucket's first request, which the filter's no_assignment_behavior
// decides (DENY_ALL, as envoy/envoy-rlqs.yaml configures) and reports at
// once (time_elapsed 0); probe prints the first action the sidecar sends
// for the bucket. The sidecar treats the probe as any subscriber: what it
// assigns is charged to the window.
func probeQuota(ctx context.Context, c *probeConfig, client rlqspb.RateLimitQuotaServiceClient, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	stream, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		return unreachable(c, err, stderr)
	}
	bucket := map[string]string{}
	for _, e := range c.descriptors[0] {
		bucket[e.key] = e.value
	}
	if err := stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: c.domain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqspb.BucketId{Bucket: bucket}, NumRequestsDenied: 1, TimeElapsed: durationpb.New(0),
	}}}); err != nil {
		return unreachable(c, err, stderr)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				fmt.Fprintf(stderr, "throttlekit probe: no action for bucket %s within %v: is serve running with --rlqs, and does its store answer? (a subscription's assignment waits for a lease)\n", entriesString(c.descriptors[0]), c.timeout)
				return exitFailed
			}
			return unreachable(c, err, stderr)
		}
		for _, a := range resp.GetBucketAction() {
			if !maps.Equal(a.GetBucketId().GetBucket(), bucket) {
				continue
			}
			return printQuotaAction(a, entriesString(c.descriptors[0]), stdout)
		}
	}
}

// printQuotaAction says what action a means for bucket and returns the
// exit code: 0 when the bucket may admit, 3 when it denies.
func printQuotaAction(a *rlqspb.RateLimitQuotaResponse_BucketAction, bucket string, stdout io.Writer) int {
	if a.GetAbandonAction() != nil {
		fmt.Fprintf(stdout, "ABANDON: bucket %s: the sidecar drops it (Envoy forgets the bucket; its next request subscribes it again)\n", bucket)
		return exitOK
	}
	qa := a.GetQuotaAssignmentAction()
	ttl := qa.GetAssignmentTimeToLive().AsDuration()
	switch s := qa.GetRateLimitStrategy(); {
	case s.GetTokenBucket() != nil:
		tb := s.GetTokenBucket()
		fill := tb.GetFillInterval().AsDuration()
		fmt.Fprintf(stdout, "ASSIGNED: bucket %s: a token bucket of %d tokens (refilling %d per %v) for %v: Envoy admits up to %d requests of it until then, calling no one\n",
			bucket, tb.GetMaxTokens(), tb.GetTokensPerFill().GetValue(), fill, ttl, tb.GetMaxTokens())
		return exitOK
	case s.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL:
		fmt.Fprintf(stdout, "ALLOW_ALL: bucket %s for %v: no limit matches it (unknown domain or descriptor, an unlimited or shadow rule): Envoy admits every request\n", bucket, ttl)
		return exitOK
	case s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
		fmt.Fprintf(stdout, "DENY_ALL: bucket %s for %v: its limit is 0, the window's share is spent, its window ends in under a second or so (the next one's assignment follows), or its rule cannot be served over RLQS (`throttlekit validate --rlqs` names those; serve logs them)\n", bucket, ttl)
		return exitDenied
	}
	fmt.Fprintf(stdout, "bucket %s: an action probe does not know: %v\n", bucket, a)
	return exitFailed
}
