package envoyrls_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// costStamp is the clock of the cost tests: ten minutes into an hour, so
// a refused reservation fits again in 50 minutes.
var costStamp = time.Date(2027, 3, 1, 10, 10, 0, 0, time.UTC)

// costPolicy is a tenant budget of 10,000 units an hour; requests under
// /v1/ reserve a fixed figure and report their cost as source says.
func costPolicy(reserve int, source string) string {
	return fmt.Sprintf(`
domain: llm
descriptors:
  - key: tenant
    rate_limit: {name: tokens, unit: hour, requests_per_unit: 10000}
costs:
  - name: chat
    match: {path_prefix: /v1/}
    descriptor: [{key: tenant, header: x-tenant}]
    reserve: %d
    cost: %s
concurrency:
  - name: slow
    match: {path_prefix: /v1/slow}
    controller: aimd
    min_limit: 1
    max_limit: 1
`, reserve, source)
}

// costServer serves ext_proc over an engine loaded with src, on the fixed
// clock; every settlement is sent on the returned channel.
func costServer(t *testing.T, src string) (*engine.Engine, extprocv3.ExternalProcessorClient, chan engine.Settlement) {
	t.Helper()
	d, err := policy.Parse("llm.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	e, _ := engine.New(engine.Options{Store: memstore.New()})
	if err := e.Load(context.Background(), &policy.Set{Domains: []*policy.Domain{d}, Gates: d.Gates}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	settled := make(chan engine.Settlement, 16)
	c := extprocv3.NewExternalProcessorClient(listen(t, func(gs *grpc.Server) {
		extprocv3.RegisterExternalProcessorServer(gs, envoyrls.NewProcessorServer(e, envoyrls.ProcessorOptions{
			Now: func() time.Time { return costStamp }, Costs: e,
			Settled: func(name string, st engine.Settlement) {
				if name != "chat" {
					t.Errorf("settled cost limit %q", name)
				}
				settled <- st
			},
		}))
	}))
	return e, c, settled
}

// request opens a stream and sends a request's headers for tenant.
func request(t *testing.T, ctx context.Context, c extprocv3.ExternalProcessorClient, path, tenant string) (extprocv3.ExternalProcessor_ProcessClient, *extprocv3.ProcessingResponse) {
	t.Helper()
	s, err := c.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kv := []string{":method", "POST", ":authority", "api", ":path", path}
	if tenant != "" {
		kv = append(kv, "x-tenant", tenant)
	}
	if err := s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headers(kv...)}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return s, resp
}

// exchange sends m on s and waits for the answer.
func exchange(t *testing.T, s extprocv3.ExternalProcessor_ProcessClient, m *extprocv3.ProcessingRequest) {
	t.Helper()
	if err := s.Send(m); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
}

func waitSettled(t *testing.T, ch chan engine.Settlement) engine.Settlement {
	t.Helper()
	select {
	case st := <-ch:
		return st
	case <-time.After(5 * time.Second):
		t.Fatal("no settlement within 5s")
		return engine.Settlement{}
	}
}

func noSettlement(t *testing.T, ch chan engine.Settlement) {
	t.Helper()
	select {
	case st := <-ch:
		t.Fatalf("settled early: %+v", st)
	default:
	}
}

// room reports whether units more fit in tenant's hour, without taking them.
func room(t *testing.T, e *engine.Engine, tenant string, units uint32) bool {
	t.Helper()
	res, _, err := e.Reserve(context.Background(), &engine.Request{Domain: "llm", Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "tenant", Value: tenant}}}}, HitsAddend: units}, costStamp)
	if err != nil {
		t.Fatal(err)
	}
	if res != nil {
		if _, err := res.Settle(context.Background(), 0, costStamp); err != nil {
			t.Fatal(err)
		}
	}
	return res != nil
}

func respHeaders(kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: headers(kv...)}}}
}

func immediateHeaders(ir *extprocv3.ImmediateResponse) map[string]string {
	got := map[string]string{}
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		got[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return got
}

// TestExtProcCostReservesAndSettles: request headers reserve; a request
// that does not fit gets 429 with when it would; the response header's
// cost settles (the rest goes back); a cost that is not a whole number, or
// a stream that ends without one, settles at the reservation; a request
// without the descriptor's header is not budgeted.
func TestExtProcCostReservesAndSettles(t *testing.T) {
	e, c, settled := costServer(t, costPolicy(4000, "{response_header: x-tokens}"))
	ctx := context.Background()
	a, resp := request(t, ctx, c, "/v1/chat", "t1")
	if resp.GetRequestHeaders() == nil {
		t.Fatalf("first: %v", resp)
	}
	b, _ := request(t, ctx, c, "/v1/chat", "t1")
	_, resp = request(t, ctx, c, "/v1/chat", "t1")
	ir := resp.GetImmediateResponse()
	h := immediateHeaders(ir)
	if ir.GetStatus().GetCode() != 429 || h["retry-after"] != "3000" || h[envoyrls.HeaderCostLimit] != "chat" {
		t.Fatalf("third 4000 of 10000: %v", resp)
	}
	if _, resp := request(t, ctx, c, "/v1/chat", ""); resp.GetRequestHeaders() == nil {
		t.Fatalf("a request without x-tenant is not budgeted: %v", resp)
	}
	noSettlement(t, settled)

	exchange(t, a, respHeaders(":status", "200", "x-tokens", "1000"))
	if st := waitSettled(t, settled); st != (engine.Settlement{Refunded: 3000}) {
		t.Fatalf("settled at 1000: %+v", st)
	}
	d, resp := request(t, ctx, c, "/v1/chat", "t1") // 1000 + 4000 + 4000
	if resp.GetRequestHeaders() == nil {
		t.Fatalf("after the refund: %v", resp)
	}
	exchange(t, b, respHeaders(":status", "200", "x-tokens", "-7"))
	if st := waitSettled(t, settled); st != (engine.Settlement{}) {
		t.Fatalf("a negative cost header: %+v, want the reservation kept", st)
	}
	if err := d.CloseSend(); err != nil { // Envoy ends the stream: no cost came
		t.Fatal(err)
	}
	if st := waitSettled(t, settled); st != (engine.Settlement{}) {
		t.Fatalf("a stream ended without a cost: %+v", st)
	}
	if !room(t, e, "t1", 1000) || room(t, e, "t1", 1001) {
		t.Fatal("want 9000 of 10000 spent: 1000 settled, 4000 and 4000 kept")
	}
}

// TestExtProcCostSources: a trailer source settles at the trailers; a
// metadata source settles at the response's end with the last value the
// forwarded metadata carried (a number, or a decimal string); garbage in
// the metadata is not a cost; a reset stream settles at what it read.
func TestExtProcCostSources(t *testing.T) {
	md := func(v *structpb.Value) *corev3.Metadata {
		return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"io.envoy.ai_gateway": {Fields: map[string]*structpb.Value{"llm_total_token": v}}}}
	}
	body := func(eos bool, m *corev3.Metadata) *extprocv3.ProcessingRequest {
		return &extprocv3.ProcessingRequest{MetadataContext: m, Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte("data: {}\n\n"), EndOfStream: eos}}}
	}
	trailers := func(kv ...string) *extprocv3.ProcessingRequest {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{Trailers: headers(kv...)}}}
	}
	for _, tc := range []struct {
		name, source string
		msgs         []*extprocv3.ProcessingRequest // after the request headers; the last one settles
		reset        bool                           // end by cancelling instead
		want         engine.Settlement
	}{
		{"trailer", "{response_trailer: x-tokens}", []*extprocv3.ProcessingRequest{respHeaders(":status", "200", "x-tokens", "1"), body(false, nil), trailers("x-tokens", "250")}, false, engine.Settlement{Refunded: 3750}},
		{"trailer absent", "{response_trailer: x-tokens}", []*extprocv3.ProcessingRequest{respHeaders(":status", "200"), body(true, nil)}, false, engine.Settlement{}},
		{"metadata number", "{metadata: {namespace: io.envoy.ai_gateway, key: llm_total_token}}",
			[]*extprocv3.ProcessingRequest{respHeaders(":status", "200"), body(false, md(structpb.NewNumberValue(5))), body(true, md(structpb.NewNumberValue(1234)))}, false, engine.Settlement{Refunded: 2766}},
		{"metadata string", "{metadata: {namespace: io.envoy.ai_gateway, key: llm_total_token}}",
			[]*extprocv3.ProcessingRequest{respHeaders(":status", "200"), body(true, md(structpb.NewStringValue("77")))}, false, engine.Settlement{Refunded: 3923}},
		{"metadata garbage", "{metadata: {namespace: io.envoy.ai_gateway, key: llm_total_token}}",
			[]*extprocv3.ProcessingRequest{respHeaders(":status", "200"), body(true, md(structpb.NewNumberValue(-3)))}, false, engine.Settlement{}},
		{"metadata then reset", "{metadata: {namespace: io.envoy.ai_gateway, key: llm_total_token}}",
			[]*extprocv3.ProcessingRequest{respHeaders(":status", "200"), body(false, md(structpb.NewNumberValue(100)))}, true, engine.Settlement{Refunded: 3900}},
		{"headers only, reset", "{response_trailer: x-tokens}", []*extprocv3.ProcessingRequest{respHeaders(":status", "200")}, true, engine.Settlement{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c, settled := costServer(t, costPolicy(4000, tc.source))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, resp := request(t, ctx, c, "/v1/chat", "t1")
			if resp.GetRequestHeaders() == nil {
				t.Fatalf("request: %v", resp)
			}
			for i, m := range tc.msgs {
				exchange(t, s, m)
				if i < len(tc.msgs)-1 || tc.reset {
					noSettlement(t, settled)
				}
			}
			if tc.reset {
				cancel()
			}
			if st := waitSettled(t, settled); st != tc.want {
				t.Fatalf("settled %+v, want %+v", st, tc.want)
			}
		})
	}
}

// TestExtProcCostGateRefusal: a request its gate turns away never runs:
// its reservation goes back whole.
func TestExtProcCostGateRefusal(t *testing.T) {
	e, c, settled := costServer(t, costPolicy(4000, "{response_header: x-tokens}"))
	ctx := context.Background()
	if _, resp := request(t, ctx, c, "/v1/slow", "t1"); resp.GetRequestHeaders() == nil { // takes the gate's one slot
		t.Fatalf("first: %v", resp)
	}
	_, resp := request(t, ctx, c, "/v1/slow", "t1")
	if resp.GetImmediateResponse().GetStatus().GetCode() != 503 {
		t.Fatalf("second: %v", resp)
	}
	if st := waitSettled(t, settled); st != (engine.Settlement{Refunded: 4000}) {
		t.Fatalf("the gate's refusal settled %+v, want the 4000 back", st)
	}
	if !room(t, e, "t1", 6000) || room(t, e, "t1", 6001) {
		t.Fatal("want 4000 of 10000 held, by the first request only")
	}
}

// TestExtProcCostExtraPastTheLimit: a real cost above the reservation is
// charged in full, past the limit, and later requests see it. (Waits on
// the engine's charge semantics for a non-nil HitsAddend.)
func TestExtProcCostExtraPastTheLimit(t *testing.T) {
	_, c, settled := costServer(t, costPolicy(5000, "{response_header: x-tokens}"))
	ctx := context.Background()
	a, _ := request(t, ctx, c, "/v1/chat", "t1")
	b, _ := request(t, ctx, c, "/v1/chat", "t1")
	exchange(t, a, respHeaders(":status", "200", "x-tokens", "9000"))
	if st := waitSettled(t, settled); st.Extra != 4000 || !st.Over {
		t.Errorf("settled 5000 at 9000 on a full hour: %+v, want 4000 extra, over", st)
	}
	exchange(t, b, respHeaders(":status", "200", "x-tokens", "0"))
	waitSettled(t, settled)
	if _, resp := request(t, ctx, c, "/v1/chat", "t1"); resp.GetImmediateResponse().GetStatus().GetCode() != 429 {
		t.Errorf("9000 of 10000 spent, yet 5000 more were reserved: %v", resp)
	}
}

// fakeStream is one ext_proc stream in process: Recv hands out msgs in
// order, then EOF.
type fakeStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs []*extprocv3.ProcessingRequest
}

func (f *fakeStream) Context() context.Context { return f.ctx }
func (f *fakeStream) Send(*extprocv3.ProcessingResponse) error {
	return nil
}
func (f *fakeStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if len(f.msgs) == 0 {
		return nil, io.EOF
	}
	m := f.msgs[0]
	f.msgs = f.msgs[1:]
	return m, nil
}

// FuzzExtProcCost feeds arbitrary message sequences (each a wire-encoded
// ProcessingRequest) through Process with every cost source: nothing
// panics, and every reservation is settled exactly once, however the
// messages come (repeated request headers, costs before headers, garbage
// numbers).
func FuzzExtProcCost(f *testing.F) {
	seed := func(ms ...*extprocv3.ProcessingRequest) {
		var buf []byte
		for _, m := range ms {
			b, err := proto.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			buf = binary.AppendUvarint(buf, uint64(len(b)))
			buf = append(buf, b...)
		}
		f.Add(buf, uint8(0))
	}
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headers(":path", "/v1/chat", "x-tenant", "t")}}}
	seed(req, respHeaders(":status", "200", "x-tokens", "12"))
	seed(req, req, respHeaders("x-tokens", "99999999999999999999"))
	seed(req, &extprocv3.ProcessingRequest{MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"ns": {Fields: map[string]*structpb.Value{"k": structpb.NewNumberValue(1e300)}}}},
		Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{EndOfStream: true}}})
	sources := []string{"{response_header: x-tokens}", "{response_trailer: x-tokens}", "{metadata: {namespace: ns, key: k}}"}
	type server struct {
		s       *envoyrls.ProcessorServer
		e       *engine.Engine
		settled *int
	}
	var servers []server
	for _, src := range sources {
		d, err := policy.Parse("llm.yaml", []byte(costPolicy(3, src)))
		if err != nil {
			f.Fatal(err)
		}
		e, _ := engine.New(engine.Options{Store: memstore.New()})
		if err := e.Load(context.Background(), &policy.Set{Domains: []*policy.Domain{d}, Gates: d.Gates}); err != nil {
			f.Fatal(err)
		}
		n := new(int)
		servers = append(servers, server{
			s: envoyrls.NewProcessorServer(e, envoyrls.ProcessorOptions{Costs: e, Settled: func(string, engine.Settlement) { *n++ }}),
			e: e, settled: n,
		})
	}
	f.Fuzz(func(t *testing.T, wire []byte, which uint8) {
		var msgs []*extprocv3.ProcessingRequest
		for len(wire) > 0 && len(msgs) < 16 {
			n, k := binary.Uvarint(wire)
			if k <= 0 || n > uint64(len(wire)-k) {
				break
			}
			var m extprocv3.ProcessingRequest
			if proto.Unmarshal(wire[k:k+int(n)], &m) == nil {
				msgs = append(msgs, &m)
			}
			wire = wire[k+int(n):]
		}
		sv := servers[int(which)%len(servers)]
		before := *sv.settled
		reserved := func() int64 {
			var n int64
			for _, s := range sv.e.CostSnapshot() {
				n += s.Reserved
			}
			return n
		}
		r0 := reserved()
		_ = sv.s.Process(&fakeStream{ctx: context.Background(), msgs: msgs})
		if got, want := int64(*sv.settled-before)*3, reserved()-r0; got != want {
			t.Fatalf("%d units reserved, %d settled (3 a request)", want, got)
		}
	})
}

// TestExtProcCostStoreDown: a reservation the store cannot answer ends the
// stream UNAVAILABLE when its rule's on_store_error is error (Envoy's
// failure_mode_allow decides), and lets the request through holding
// nothing when it is allow.
func TestExtProcCostStoreDown(t *testing.T) {
	for _, tc := range []struct{ policy, want string }{{"error", "Unavailable"}, {"allow", "continue"}} {
		t.Run(tc.policy, func(t *testing.T) {
			d, err := policy.Parse("llm.yaml", []byte(strings.Replace(costPolicy(4000, "{response_header: x-tokens}"),
				"  - key: tenant\n", "  - key: tenant\n    on_store_error: "+tc.policy+"\n", 1)))
			if err != nil {
				t.Fatal(err)
			}
			e, _ := engine.New(engine.Options{Store: downStore{}})
			if err := e.Load(context.Background(), &policy.Set{Domains: []*policy.Domain{d}}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close(context.Background()) })
			c := extprocv3.NewExternalProcessorClient(listen(t, func(gs *grpc.Server) {
				extprocv3.RegisterExternalProcessorServer(gs, envoyrls.NewProcessorServer(e, envoyrls.ProcessorOptions{Costs: e}))
			}))
			s, err := c.Process(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
				Headers: headers(":path", "/v1/chat", "x-tenant", "t")}}}); err != nil {
				t.Fatal(err)
			}
			resp, err := s.Recv()
			got := status.Code(err).String()
			if err == nil && resp.GetRequestHeaders() != nil {
				got = "continue"
			}
			if got != tc.want {
				t.Fatalf("got %v (%v), want %s", resp, err, tc.want)
			}
		})
	}
}
