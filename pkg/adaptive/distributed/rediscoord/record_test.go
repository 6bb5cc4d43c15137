package rediscoord

import (
	"errors"
	"strconv"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// appendRecord appends r's value as the script encodes it (encode in
// scripts/heartbeat.lua).
func appendRecord(b []byte, r distributed.Record) []byte {
	for _, x := range []uint64{r.Seq, uint64(r.Local), uint64(r.Inflight), uint64(r.Demand), r.AppliedGen,
		uint64(r.ExpiresAt), uint64(r.Share), r.Gen, uint64(r.High)} {
		b = strconv.AppendUint(b, x, 10)
		b = append(b, ' ')
	}
	return append(b, r.Instance...)
}

func TestDecodeRecord(t *testing.T) {
	full := distributed.Record{Node: "n", Instance: "i 1\x00\n", Seq: 1<<64 - 1, Local: 7, Inflight: 2, Demand: 30,
		AppliedGen: 4, ExpiresAt: 1_700_000_002_000_000, Share: 5, Gen: 5, High: 6}
	for _, tc := range []struct {
		name, value string
		want        distributed.Record
		err         bool
	}{
		{"Full", string(appendRecord(nil, full)), full, false},
		{"EmptyInstance", "1 1 0 0 0 1 0 1 0 ", distributed.Record{Node: "n", Seq: 1, Local: 1, ExpiresAt: 1, Gen: 1}, false},
		{"LargestExact", "1 9007199254740991 0 0 0 0 0 0 0 x",
			distributed.Record{Node: "n", Instance: "x", Seq: 1, Local: 1<<53 - 1}, false},
		{"NoInstanceSeparator", "1 1 0 0 0 1 0 1 0", distributed.Record{}, true},
		{"TooFewNumbers", "1 1 0 0 0 1 0 1 ", distributed.Record{}, true},
		{"LeadingZero", "01 1 0 0 0 1 0 1 0 ", distributed.Record{}, true},
		{"Sign", "+1 1 0 0 0 1 0 1 0 ", distributed.Record{}, true},
		{"Negative", "1 -1 0 0 0 1 0 1 0 ", distributed.Record{}, true},
		{"SeqAbove2To64", "18446744073709551616 1 0 0 0 1 0 1 0 ", distributed.Record{}, true},
		{"CountAt2To53", "1 9007199254740992 0 0 0 1 0 1 0 ", distributed.Record{}, true},
		{"DoubleSpace", "1  1 0 0 0 1 0 1 0 ", distributed.Record{}, true},
		{"Empty", "", distributed.Record{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeRecord("n", tc.value)
			if tc.err {
				if !errors.Is(err, ErrMalformedRecord) {
					t.Fatalf("%q: %+v, %v; want ErrMalformedRecord", tc.value, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("%q: %+v, %v; want %+v", tc.value, got, err, tc.want)
			}
		})
	}
}

// FuzzDecodeRecord: the decoder never panics, and accepts only the one
// encoding of each record: what it decodes encodes back to its input.
func FuzzDecodeRecord(f *testing.F) {
	f.Add("n", "1 1 0 0 0 1 0 1 0 ")
	f.Add("n", "18446744073709551615 67108863 3 9 2 1700000002000000 5 3 8 i-1")
	f.Add("\x00", "1 1 0 0 0 1 0 1 0 \x00 \n}")
	f.Add("n", "01 1 0 0 0 1 0 1 0 ")
	f.Add("n", "1 9007199254740992 0 0 0 1 0 1 0 ")
	f.Fuzz(func(t *testing.T, node, value string) {
		r, err := decodeRecord(node, value)
		if err != nil {
			if !errors.Is(err, ErrMalformedRecord) {
				t.Fatalf("%q: %v, not ErrMalformedRecord", value, err)
			}
			return
		}
		if r.Node != node {
			t.Fatalf("%q: node %q, want %q", value, r.Node, node)
		}
		if got := string(appendRecord(nil, r)); got != value {
			t.Fatalf("%q decodes to %+v, which encodes to %q", value, r, got)
		}
	})
}
