package rlqsserver

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/throttlekit/throttlekit/pkg/ratelimit"
	"github.com/throttlekit/throttlekit/pkg/rlqs"
)

// Bounds on a usage report, beyond ratelimit's bounds on a descriptor.
const (
	// MaxUsagesPerReport is the most buckets one report message may carry;
	// a message with more is refused with InvalidArgument.
	MaxUsagesPerReport = 4096
	// MaxElapsed is the longest time_elapsed a usage may report.
	MaxElapsed = 24 * time.Hour
)

// ErrBadReport is wrapped by the errors decodeReports returns for a message
// that cannot be served at all (the stream is ended with InvalidArgument).
var ErrBadReport = errors.New("rlqs: bad usage report")

// usage is one bucket's usage from a report, checked.
type usage struct {
	key     string            // the bucket's identity: domain and sorted entries, length-prefixed
	id      map[string]string // the bucket id as sent
	allowed uint64
	denied  uint64
	elapsed time.Duration // whole: Envoy sends whole seconds; 0 on a subscription
}

// skipped is one bucket usage of a report that cannot be served, and why:
// the rest of the report is.
type skipped struct {
	reason string // a metric label: bucket_id, entries, elapsed, counts
	err    error
}

// decodeReports checks a report message: its domain and each bucket's
// usage. A message without a domain, with a domain too long or with more
// than MaxUsagesPerReport buckets is an error (wrapping ErrBadReport); a
// bucket usage that cannot be served (no or empty bucket id, an id that
// cannot be a descriptor, an elapsed time or counts out of range) is
// skipped, with the reason, and the others are served.
func decodeReports(m *rlqspb.RateLimitQuotaUsageReports) (domain string, out []usage, skips []skipped, err error) {
	if m == nil {
		return "", nil, nil, fmt.Errorf("%w: empty message", ErrBadReport)
	}
	domain = m.GetDomain()
	switch {
	case domain == "":
		return "", nil, nil, fmt.Errorf("%w: no domain (the filter's domain field)", ErrBadReport)
	case len(domain) > ratelimit.MaxDomainBytes:
		return "", nil, nil, fmt.Errorf("%w: domain is %d bytes, at most %d", ErrBadReport, len(domain), ratelimit.MaxDomainBytes)
	case len(m.GetBucketQuotaUsages()) > MaxUsagesPerReport:
		return "", nil, nil, fmt.Errorf("%w: %d bucket usages in one report, at most %d", ErrBadReport, len(m.GetBucketQuotaUsages()), MaxUsagesPerReport)
	}
	for i, u := range m.GetBucketQuotaUsages() {
		skip := func(reason, format string, args ...any) {
			skips = append(skips, skipped{reason: reason, err: fmt.Errorf("bucket usage %d: %s", i, fmt.Sprintf(format, args...))})
		}
		id := u.GetBucketId().GetBucket()
		if len(id) == 0 {
			skip("bucket_id", "no bucket id, or an empty one")
			continue
		}
		if err := checkEntries(id); err != nil {
			skip("entries", "%v", err)
			continue
		}
		var elapsed time.Duration
		if te := u.GetTimeElapsed(); te != nil {
			if err := te.CheckValid(); err != nil || te.GetSeconds() < 0 || te.GetNanos() < 0 || te.AsDuration() > MaxElapsed {
				skip("elapsed", "time_elapsed %ds %dns out of range (0 to %v)", te.GetSeconds(), te.GetNanos(), MaxElapsed)
				continue
			}
			elapsed = te.AsDuration()
		}
		a, d := u.GetNumRequestsAllowed(), u.GetNumRequestsDenied()
		if a > rlqs.MaxReportCount || d > rlqs.MaxReportCount-a {
			skip("counts", "%d allowed and %d denied: at most %d together", a, d, int64(rlqs.MaxReportCount))
			continue
		}
		out = append(out, usage{key: bucketKey(domain, id), id: id, allowed: a, denied: d, elapsed: elapsed})
	}
	return domain, out, skips, nil
}

// checkEntries holds a bucket id to the bounds of a descriptor.
func checkEntries(id map[string]string) error {
	if len(id) > ratelimit.MaxEntries {
		return fmt.Errorf("%d entries, at most %d", len(id), ratelimit.MaxEntries)
	}
	for k, v := range id {
		if k == "" {
			return errors.New("an empty key")
		}
		if len(k) > ratelimit.MaxKeyBytes || len(v) > ratelimit.MaxValueBytes {
			return fmt.Errorf("entry %.32q too long (key ≤ %d bytes, value ≤ %d)", k, ratelimit.MaxKeyBytes, ratelimit.MaxValueBytes)
		}
	}
	return nil
}

// bucketKey is a bucket's identity: the domain and the entries sorted by
// key, each length-prefixed, so no two (domain, id) share one.
func bucketKey(domain string, id map[string]string) string {
	keys := make([]string, 0, len(id))
	n := len(domain) + 4
	for k, v := range id {
		keys = append(keys, k)
		n += len(k) + len(v) + 8
	}
	slices.Sort(keys)
	b := make([]byte, 0, n)
	field := func(s string) {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
	}
	field(domain)
	for _, k := range keys {
		field(k)
		field(id[k])
	}
	return string(b)
}
