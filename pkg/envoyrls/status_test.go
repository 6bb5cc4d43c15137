package envoyrls_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

// fairDomain adds a fair rule, whose store errors take their own path
// through the engine.
const fairDomain = `
domain: fair
descriptors:
  - key: tenant
    fairness: {tenant_key: tenant}
    rate_limit: {unit: second, requests_per_unit: 10}
`

// newDownEngine is the test policy plus fairDomain over a store that is down.
func newDownEngine(t *testing.T) *engine.Engine {
	t.Helper()
	var set policy.Set
	for name, src := range map[string]string{"edge.yaml": testPolicy, "fair.yaml": fairDomain} {
		d, err := policy.Parse(name, []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		set.Domains = append(set.Domains, d)
	}
	set.Hash = "down"
	e, err := engine.New(engine.Options{Store: downStore{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(context.Background(), &set); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// checkOneLine fails unless msg is one line that names every cause.
func checkOneLine(t *testing.T, what, msg string, causes ...string) {
	t.Helper()
	if strings.ContainsAny(msg, "\r\n") {
		t.Errorf("%s: message spans several lines: %q", what, msg)
	}
	for _, c := range causes {
		if !strings.Contains(msg, c) {
			t.Errorf("%s: message %q does not name the cause %q", what, msg, c)
		}
	}
}

// TestStatusMessagesAreOneLine: every status an error path of the
// RateLimitService answers carries a one-line message that still names the
// cause, over gRPC and over /json (errors.Join, used for store failures
// outside a limiter and for malformed requests, puts a newline between its
// parts).
func TestStatusMessagesAreOneLine(t *testing.T) {
	srv := envoyrls.NewRateLimitServer(newDownEngine(t), envoyrls.Options{})
	c := serveGRPC(t, srv)
	override := rlReq("edge", "unruled", "x")
	override.Descriptors[0].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}
	for _, tc := range []struct {
		name   string
		req    *rlsv3.RateLimitRequest
		code   codes.Code
		causes []string
	}{
		{"rule, store down", rlReq("edge", "down", "x"), codes.Unavailable, []string{"store failed", errDown.Error()}},
		{"override, store down", override, codes.Unavailable, []string{"store failed", errDown.Error()}},
		{"fair rule, store down", rlReq("fair", "tenant", "a"), codes.Unavailable, []string{"store failed", errDown.Error()}},
		{"empty key", rlReq("edge", "", "v"), codes.InvalidArgument, []string{"invalid rate-limit request"}},
		{"no domain", rlReq("", "k", "v"), codes.InvalidArgument, []string{"invalid rate-limit request"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.ShouldRateLimit(context.Background(), tc.req)
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			checkOneLine(t, "gRPC", status.Convert(err).Message(), tc.causes...)

			body, err := protojson.Marshal(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			w := httptest.NewRecorder()
			envoyrls.JSONHandler(srv).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(string(body))))
			if w.Code == http.StatusOK {
				t.Fatalf("/json answered 200: %s", w.Body)
			}
			checkOneLine(t, "/json", strings.TrimSuffix(w.Body.String(), "\n"), tc.causes...)
		})
	}

	// A null descriptor cannot cross the wire (it arrives empty), but a
	// caller in the process can send one.
	_, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{nil}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("null descriptor: %v", err)
	}
	checkOneLine(t, "null descriptor", status.Convert(err).Message(), "invalid rate-limit request", "descriptor 0 is null")

	// Whatever error GRPCError is given.
	for _, err := range []error{
		errors.Join(ratelimit.ErrStore, errors.New("dial tcp: i/o timeout")),
		errors.Join(engine.ErrInvalidRequest, errors.Join(errors.New("first\r\nsecond"), errors.New("third\n"))),
		fmt.Errorf("%w: %w", context.DeadlineExceeded, errors.Join(errors.New("a"), errors.New("b"))),
	} {
		checkOneLine(t, "GRPCError", status.Convert(envoyrls.GRPCError(err)).Message(), strings.Fields(err.Error())...)
	}
}
