package envoyrls_test

import (
	"context"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttlekit/throttlekit/pkg/envoyrls"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// FuzzTranslate feeds arbitrary wire bytes through the whole request path —
// protobuf decoding, translation, the engine's decision and the response
// encoding — against a live engine: nothing may panic, and a request the
// engine accepts gets a status per descriptor.
func FuzzTranslate(f *testing.F) {
	seed := func(r *rlsv3.RateLimitRequest) {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(rlReq("edge", "remote_address", "10.0.0.1"))
	seed(rlReq("edge", "wide", "x", "nested", "y"))
	r := rlReq("edge", "remote_address", "1")
	r.HitsAddend = 4294967295
	r.Descriptors[0].HitsAddend = wrapperspb.UInt64(1 << 62)
	seed(r)
	neg := rlReq("edge", "plan", "p")
	neg.Descriptors[0].IsNegativeHits = true
	neg.Descriptors[0].Limit = &commonLimit
	seed(neg)
	f.Add([]byte{})
	e := newEngine(f, memstore.New())
	s := envoyrls.NewRateLimitServer(e, envoyrls.Options{Headers: true})
	f.Fuzz(func(t *testing.T, wire []byte) {
		var req rlsv3.RateLimitRequest
		if err := proto.Unmarshal(wire, &req); err != nil {
			return
		}
		resp, err := s.ShouldRateLimit(context.Background(), &req)
		if err != nil {
			return
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
		if _, err := proto.Marshal(resp); err != nil {
			t.Fatalf("response does not encode: %v", err)
		}
	})
}

var commonLimit = commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: 2}
