package engine

import (
	"fmt"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// validate refuses, wrapping ErrInvalidRequest, a request beyond the
// bounds (MaxDescriptors and the rest) or with no meaning.
func validate(req *Request) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	if err := validDomain(req.Domain); err != nil {
		return err
	}
	if len(req.Descriptors) == 0 {
		return bad("no descriptors")
	}
	if len(req.Descriptors) > MaxDescriptors {
		return bad("%d descriptors, at most %d", len(req.Descriptors), MaxDescriptors)
	}
	for i, d := range req.Descriptors {
		if len(d.Entries) == 0 {
			return bad("descriptor %d has no entries", i)
		}
		if len(d.Entries) > MaxEntries {
			return bad("descriptor %d has %d entries, at most %d", i, len(d.Entries), MaxEntries)
		}
		for j, e := range d.Entries {
			if e.Key == "" {
				return bad("descriptor %d entry %d has an empty key", i, j)
			}
			if len(e.Key) > MaxKeyBytes || len(e.Value) > MaxValueBytes {
				return bad("descriptor %d entry %d is too long (key ≤ %d bytes, value ≤ %d)", i, j, MaxKeyBytes, MaxValueBytes)
			}
		}
		if d.HitsAddend != nil && *d.HitsAddend > gale.MaxLimit {
			return bad("descriptor %d hits_addend %d above %d", i, *d.HitsAddend, int64(gale.MaxLimit))
		}
		if o := d.Override; o != nil && o.Unit.Duration() == 0 {
			return bad("descriptor %d limit override has no valid unit", i)
		}
	}
	return nil
}

// validDomain refuses, wrapping ErrInvalidRequest, an empty domain or one
// over MaxDomainBytes (RLS requests and RLQS buckets alike).
func validDomain(domain string) error {
	switch {
	case domain == "":
		return fmt.Errorf("%w: no domain", ErrInvalidRequest)
	case len(domain) > MaxDomainBytes:
		return fmt.Errorf("%w: domain is %d bytes, at most %d bytes", ErrInvalidRequest, len(domain), MaxDomainBytes)
	}
	return nil
}

// cost is what descriptor d adds to its limits (or, Negative, gives back),
// and whether it is a charge: a descriptor HitsAddend is taken as it is, 0
// included; the request's, 0 meaning 1.
func requestCost(req *Request, d *Descriptor) (cost int64, charge bool) {
	if d.HitsAddend != nil {
		return int64(*d.HitsAddend), !d.Negative
	}
	return max(int64(req.HitsAddend), 1), false
}
