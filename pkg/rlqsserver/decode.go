package rlqsserver

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/throttlekit/throttlekit/pkg/ratelimit"
	"github.com/throttlekit/throttlekit/pkg/rlqs"
)

// Bounds on a usage report, beyond ratelimit's bounds on a descriptor.
const (
	// MaxUsagesPerReport is the most bucket usages of one report message
	// served: the most buckets a stream subscribes, since Envoy reports
	// every bucket it caches at each tick. Usages past it are skipped
	// (reason "report"), the rest served: refusing the message once
	// failed an honest Envoy that had seen more than 4,096 buckets at
	// every tick, and all its buckets fell to their no-assignment
	// behaviour (issue 41).
	MaxUsagesPerReport = MaxBucketsPerStream
	// MaxElapsed is the longest time_elapsed a usage may report.
	MaxElapsed = 24 * time.Hour
)

// ErrBadReport is wrapped by the errors decodeReports returns for a message
// that cannot be served at all (the stream is ended with InvalidArgument).
var ErrBadReport = errors.New("rlqs: bad usage report")

// usage is one bucket's usage from a report, checked.
type usage struct {
	// key is the bucket's identity (bucketKey), in the decoder's buffer:
	// valid until the decoder's next message. Maps are indexed with
	// string(key), which does not allocate; a new bucket copies it.
	key     []byte
	id      map[string]string // the bucket id as sent
	allowed uint64
	denied  uint64
	elapsed time.Duration // whole: Envoy sends whole seconds; 0 on a subscription
}

// skipped is one bucket usage of a report that cannot be served, and why:
// the rest of the report is.
type skipped struct {
	reason string // a metric label: bucket_id, entries, elapsed, counts, report
	err    error
	n      int // the usages it stands for: 0 means one
}

// decoder decodes one stream's report messages into buffers it reuses
// from one message to the next. The zero value is ready; it is used by one
// goroutine at a time (the stream's receiving one).
type decoder struct {
	usages []usage
	skips  []skipped
	keys   []byte  // the usages' keys, back to back
	names  []entry // an id's entries, to sort
}

// decodeReports is decode with a decoder of its own.
func decodeReports(m *rlqspb.RateLimitQuotaUsageReports) (domain string, out []usage, skips []skipped, err error) {
	var d decoder
	return d.decode(m)
}

// decodeReports checks a report message: its domain and each bucket's
// usage. A message without a domain or with a domain too long is an error
// (wrapping ErrBadReport); usages past MaxUsagesPerReport are skipped as
// one (reason "report"); a
// bucket usage that cannot be served (no or empty bucket id, an id that
// cannot be a descriptor, an elapsed time or counts out of range) is
// skipped, with the reason, and the others are served.
//
// The usages and skips returned, and the usages' keys, live in d's buffers
// until d's next message: a stream decodes its messages one at a time with
// its own decoder, and allocates nothing for a report once the buffers
// have grown to its size.
func (d *decoder) decode(m *rlqspb.RateLimitQuotaUsageReports) (domain string, out []usage, skips []skipped, err error) {
	if m == nil {
		return "", nil, nil, fmt.Errorf("%w: empty message", ErrBadReport)
	}
	domain = m.GetDomain()
	switch {
	case domain == "":
		return "", nil, nil, fmt.Errorf("%w: no domain (the filter's domain field)", ErrBadReport)
	case len(domain) > ratelimit.MaxDomainBytes:
		return "", nil, nil, fmt.Errorf("%w: domain is %d bytes, at most %d", ErrBadReport, len(domain), ratelimit.MaxDomainBytes)
	}
	out, skips = d.usages[:0], d.skips[:0]
	clear(d.skips[:cap(d.skips)]) // drop the errors of the message before
	d.keys = d.keys[:0]
	defer func() { d.usages, d.skips = out[:0], skips[:0] }()
	all := m.GetBucketQuotaUsages()
	if len(all) > MaxUsagesPerReport {
		skips = append(skips, skipped{reason: "report", n: len(all) - MaxUsagesPerReport,
			err: fmt.Errorf("%d bucket usages in one report: those past the first %d are skipped", len(all), MaxUsagesPerReport)})
		all = all[:MaxUsagesPerReport]
	}
	for i, u := range all {
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
		a, dn := u.GetNumRequestsAllowed(), u.GetNumRequestsDenied()
		if a > rlqs.MaxReportCount || dn > rlqs.MaxReportCount-a {
			skip("counts", "%d allowed and %d denied: at most %d together", a, dn, int64(rlqs.MaxReportCount))
			continue
		}
		start := len(d.keys)
		d.keys, d.names = appendBucketKey(d.keys, d.names, domain, id)
		out = append(out, usage{key: d.keys[start:len(d.keys):len(d.keys)], id: id, allowed: a, denied: dn, elapsed: elapsed})
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
	b, _ := appendBucketKey(nil, nil, domain, id)
	return string(b)
}

// entry is one entry of a bucket id.
type entry struct{ key, value string }

// appendBucketKey appends bucketKey(domain, id) to dst, sorting id's
// entries in names (reused: its contents are the caller's scratch), and
// returns both grown.
func appendBucketKey(dst []byte, names []entry, domain string, id map[string]string) ([]byte, []entry) {
	names = names[:0]
	for k, v := range id {
		names = append(names, entry{k, v})
	}
	slices.SortFunc(names, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	dst = appendField(dst, domain)
	for _, e := range names {
		dst = appendField(appendField(dst, e.key), e.value)
	}
	clear(names) // keep no report's strings alive in the scratch
	return dst, names[:0]
}

// appendField appends s length-prefixed: its length in decimal, a colon,
// then s.
func appendField(dst []byte, s string) []byte {
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, ':')
	return append(dst, s...)
}
