package rediscoord

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// recordFields is the number of integers that start a record's value.
const recordFields = 9

// decodeRecord decodes the value the script stores for node: nine canonical
// decimals (no sign, no leading zero), each followed by a space —
//
//	Seq Local Inflight Demand AppliedGen ExpiresAt Share Gen High
//
// — then the Instance, every byte to the end. Seq is any uint64; the others
// are below 2^53, as the script computes them.
func decodeRecord(node, v string) (distributed.Record, error) {
	var n [recordFields]uint64
	rest := v
	for i := range n {
		digits, tail, ok := strings.Cut(rest, " ")
		if !ok {
			return distributed.Record{}, fmt.Errorf("%w: node %q: %d of %d numbers in %q", ErrMalformedRecord, node, i, recordFields, v)
		}
		x, err := parseCanonical(digits)
		if err != nil || (i > 0 && x >= exact) {
			return distributed.Record{}, fmt.Errorf("%w: node %q: number %d, %q, in %q", ErrMalformedRecord, node, i+1, digits, v)
		}
		n[i], rest = x, tail
	}
	return distributed.Record{
		Node: node, Instance: rest,
		Seq: n[0], Local: int(n[1]), Inflight: int(n[2]), Demand: int(n[3]), AppliedGen: n[4],
		ExpiresAt: int64(n[5]), Share: int(n[6]), Gen: n[7], High: int(n[8]),
	}, nil
}

// parseCanonical parses s, a decimal without sign or leading zero ("0"
// itself excepted), up to the largest uint64.
func parseCanonical(s string) (uint64, error) {
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseUint(s, 10, 64)
}
