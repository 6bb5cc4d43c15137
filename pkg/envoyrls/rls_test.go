package envoyrls_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

const testPolicy = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {name: per_ip, unit: minute, requests_per_unit: 2}
  - key: wide
    rate_limit: {unit: second, requests_per_unit: 10, unit_multiplier: 30}
  - key: down
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plan
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

var t0 = time.Date(2027, 3, 1, 0, 0, 20, 0, time.UTC)

func newEngine(t testing.TB, store gale.Store) *engine.Engine {
	t.Helper()
	d, err := policy.Parse("edge.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(context.Background(), &policy.Set{Domains: []*policy.Domain{d}, Hash: "h"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// listen serves on a loopback socket whatever register puts on a fresh gRPC
// server, and returns a client connection to it; both close on cleanup.
func listen(t testing.TB, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	register(gs)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// serveGRPC serves s and returns a RateLimitService client.
func serveGRPC(t *testing.T, s *envoyrls.RateLimitServer) rlsv3.RateLimitServiceClient {
	t.Helper()
	return rlsv3.NewRateLimitServiceClient(listen(t, func(gs *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(gs, s) }))
}

func rlReq(domain string, entries ...string) *rlsv3.RateLimitRequest {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(entries); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: entries[i], Value: entries[i+1]})
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{d}}
}

func TestShouldRateLimitOverGRPC(t *testing.T) {
	c := serveGRPC(t, envoyrls.NewRateLimitServer(newEngine(t, memstore.New()), envoyrls.Options{Headers: true, Now: func() time.Time { return t0 }}))
	ctx := context.Background()
	resp, err := c.ShouldRateLimit(ctx, rlReq("edge", "remote_address", "10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Statuses[0]
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 1 ||
		st.CurrentLimit.GetName() != "per_ip" || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE ||
		st.CurrentLimit.GetRequestsPerUnit() != 2 || st.DurationUntilReset.AsDuration() != 40*time.Second {
		t.Fatalf("response %v", resp)
	}
	headers := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		headers[h.Key] = h.Value
	}
	if headers["RateLimit-Limit"] != "2, 2;w=60" || headers["RateLimit-Remaining"] != "1" || headers["RateLimit-Reset"] != "40" {
		t.Fatalf("headers %v", headers)
	}
	c.ShouldRateLimit(ctx, rlReq("edge", "remote_address", "10.0.0.1"))
	if resp, _ := c.ShouldRateLimit(ctx, rlReq("edge", "remote_address", "10.0.0.1")); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("third: %v", resp)
	}
	// unit_multiplier travels in current_limit.
	if resp, _ := c.ShouldRateLimit(ctx, rlReq("edge", "wide", "x")); resp.Statuses[0].CurrentLimit.GetUnitMultiplier().GetValue() != 30 {
		t.Fatalf("multiplier: %v", resp)
	}
	// Descriptor-level hits_addend.
	r := rlReq("edge", "remote_address", "10.0.0.2")
	r.Descriptors[0].HitsAddend = wrapperspb.UInt64(2)
	if resp, _ := c.ShouldRateLimit(ctx, r); resp.Statuses[0].LimitRemaining != 0 || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("hits 2: %v", resp)
	}
	// Quota mode reports violations in metadata.
	c.ShouldRateLimit(ctx, rlReq("edge", "plan", "p"))
	resp, _ = c.ShouldRateLimit(ctx, rlReq("edge", "plan", "p"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || !resp.GetDynamicMetadata().GetFields()["quotaModeEnabled"].GetBoolValue() {
		t.Fatalf("quota: %v", resp)
	}
}

func TestErrorsMapToGRPCCodes(t *testing.T) {
	c := serveGRPC(t, envoyrls.NewRateLimitServer(newEngine(t, downStore{}), envoyrls.Options{}))
	ctx := context.Background()
	many := &rlsv3.RateLimitRequest{Domain: "edge"}
	for i := 0; i < 5000; i++ {
		many.Descriptors = append(many.Descriptors, rlReq("edge", "k", "v").Descriptors[0])
	}
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want codes.Code
	}{
		{"no domain", rlReq("", "k", "v"), codes.InvalidArgument},
		{"1 MiB domain", rlReq(strings.Repeat("d", 1<<20), "k", "v"), codes.InvalidArgument},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "edge"}, codes.InvalidArgument},
		{"empty key", rlReq("edge", "", "v"), codes.InvalidArgument},
		{"5000 descriptors", many, codes.InvalidArgument},
		{"store down, policy error", rlReq("edge", "down", "x"), codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.ShouldRateLimit(ctx, tc.req)
			if status.Code(err) != tc.want {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.want)
			}
		})
	}
}

// downStore is a store that is down: every call fails.
type downStore struct{}

var errDown = errors.New("connection refused")

func (downStore) Check(context.Context, string, gale.Rule, int64, time.Time) (gale.Decision, error) {
	return gale.Decision{}, errDown
}
func (downStore) Lease(context.Context, string, gale.Rule, int64, int64, time.Time) (gale.Grant, error) {
	return gale.Grant{}, errDown
}
func (downStore) Return(context.Context, string, gale.Rule, int64, time.Time, time.Time) error {
	return errDown
}
func (downStore) Charge(context.Context, string, gale.Rule, int64, time.Time) (gale.Decision, error) {
	return gale.Decision{}, errDown
}

func TestJSONEndpoint(t *testing.T) {
	h := envoyrls.JSONHandler(envoyrls.NewRateLimitServer(newEngine(t, memstore.New()), envoyrls.Options{Now: func() time.Time { return t0 }}))
	post := func(body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body)))
		return w
	}
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}]}`
	for i, want := range []int{200, 200, 429} {
		if w := post(body); w.Code != want {
			t.Fatalf("request %d: %d %s", i, w.Code, w.Body)
		}
	}
	if w := post(`{"domain":`); w.Code != 400 {
		t.Fatalf("bad JSON: %d", w.Code)
	}
	if w := post(`{"domain":"edge"}`); w.Code != 400 || !bytes.Contains(w.Body.Bytes(), []byte("no descriptors")) {
		t.Fatalf("no descriptors: %d %s", w.Code, w.Body)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/json", nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", w.Code)
	}
}

// TestStoreTimeoutIsUnavailable: a store that timed out is UNAVAILABLE (Envoy's
// failure_mode_deny decides), not the caller's DEADLINE_EXCEEDED.
func TestStoreTimeoutIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("%w: %w", ratelimit.ErrStore, context.DeadlineExceeded), codes.Unavailable},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{fmt.Errorf("%w: bad", engine.ErrInvalidRequest), codes.InvalidArgument},
		{errors.New("boom"), codes.Internal},
	} {
		if got := status.Code(envoyrls.GRPCError(tc.err)); got != tc.want {
			t.Errorf("%v → %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestUnlimitedOnlyRequestHasNoHeaders: an unlimited rule answers OK with no
// current limit and adds no RateLimit-* headers (it used to panic).
func TestUnlimitedOnlyRequestHasNoHeaders(t *testing.T) {
	d, err := policy.Parse("u.yaml", []byte("domain: u\ndescriptors:\n  - key: health\n    rate_limit: {unlimited: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e, _ := engine.New(engine.Options{Store: memstore.New()})
	if err := e.Load(context.Background(), &policy.Set{Domains: []*policy.Domain{d}, Hash: "u"}); err != nil {
		t.Fatal(err)
	}
	c := serveGRPC(t, envoyrls.NewRateLimitServer(e, envoyrls.Options{Headers: true}))
	resp, err := c.ShouldRateLimit(context.Background(), rlReq("u", "health", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.Statuses[0]; st.CurrentLimit != nil || st.LimitRemaining != 4294967295 || len(resp.ResponseHeadersToAdd) != 0 {
		t.Fatalf("unlimited: %v", resp)
	}
}
