package envoyrls_test

import (
	"context"
	"os"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

const gatePolicy = `
concurrency:
  - name: checkout
    match: {path_prefix: /checkout}
    controller: aimd
    min_limit: 1
    max_limit: 1
`

func newGateEngine(t *testing.T) *engine.Engine {
	t.Helper()
	dir := t.TempDir()
	if err := writeFile(dir+"/gates.yaml", gatePolicy); err != nil {
		t.Fatal(err)
	}
	set, err := policy.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := engine.New(engine.Options{Store: memstore.New()})
	if err := e.Load(context.Background(), set); err != nil {
		t.Fatal(err)
	}
	return e
}

func serveExtProc(t *testing.T, e *engine.Engine) extprocv3.ExternalProcessorClient {
	t.Helper()
	return extprocv3.NewExternalProcessorClient(listen(t, func(gs *grpc.Server) {
		extprocv3.RegisterExternalProcessorServer(gs, envoyrls.NewProcessorServer(e, envoyrls.ProcessorOptions{}))
	}))
}

func headers(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

func requestHeaders(path string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headers(":method", "GET", ":authority", "shop", ":path", path)}}}
}

func responseHeaders(status string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: headers(":status", status)}}}
}

// open starts a stream and sends request headers, returning the answer.
func open(t *testing.T, ctx context.Context, c extprocv3.ExternalProcessorClient, path string) (extprocv3.ExternalProcessor_ProcessClient, *extprocv3.ProcessingResponse) {
	t.Helper()
	s, err := c.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(requestHeaders(path)); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return s, resp
}

func TestExtProcGate(t *testing.T) {
	e := newGateEngine(t)
	c := serveExtProc(t, e)
	ctx := context.Background()
	inflight := func() int { return e.GateSnapshots()[0].Inflight }

	// A request no gate matches continues untouched.
	_, resp := open(t, ctx, c, "/catalog")
	if resp.GetRequestHeaders() == nil {
		t.Fatalf("ungated request: %v", resp)
	}
	// The first checkout request takes the only slot.
	first, resp := open(t, ctx, c, "/checkout/pay")
	if resp.GetRequestHeaders() == nil || inflight() != 1 {
		t.Fatalf("first: %v, inflight %d", resp, inflight())
	}
	// The second is turned away: 503, retry-after, the gate's name and limit.
	_, resp = open(t, ctx, c, "/checkout/pay")
	ir := resp.GetImmediateResponse()
	if ir == nil || ir.GetStatus().GetCode() != 503 {
		t.Fatalf("second: %v", resp)
	}
	got := map[string]string{}
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		got[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	if got["retry-after"] != "1" || got[envoyrls.HeaderGate] != "checkout" || got[envoyrls.HeaderGateLimit] != "1" {
		t.Fatalf("rejection headers %v", got)
	}
	// Response headers release the slot, with the outcome from :status.
	if err := first.Send(responseHeaders("200")); err != nil {
		t.Fatal(err)
	}
	if resp, err := first.Recv(); err != nil || resp.GetResponseHeaders() == nil {
		t.Fatalf("response headers: %v %v", resp, err)
	}
	if inflight() != 0 {
		t.Fatalf("inflight %d after the response", inflight())
	}
	// A client that cancels mid-request frees its slot.
	cctx, cancel := context.WithCancel(ctx)
	_, resp = open(t, cctx, c, "/checkout/pay")
	if resp.GetRequestHeaders() == nil || inflight() != 1 {
		t.Fatalf("third: %v", resp)
	}
	cancel()
	deadline := time.After(5 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for inflight() != 0 {
		select {
		case <-deadline:
			t.Fatal("a cancelled stream kept its slot")
		case <-tick.C:
		}
	}
	if _, resp := open(t, ctx, c, "/checkout/pay"); resp.GetRequestHeaders() == nil {
		t.Fatalf("after the cancel: %v", resp)
	}
	if s := e.GateSnapshots()[0]; s.Rejected+s.RejectedQueueFull == 0 {
		t.Fatalf("rejection not counted: %+v", s)
	}
}

func writeFile(path, src string) error { return os.WriteFile(path, []byte(src), 0o644) }
