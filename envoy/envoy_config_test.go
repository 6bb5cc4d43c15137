// Package envoy_test checks envoy.yaml, the Envoy bootstrap that wires the
// rate limit filter to throttlekit: it must parse as a v3 Bootstrap, pass
// Envoy's own proto validation (every typed_config included), and keep the
// wiring the sidecar relies on.
package envoy_test

import (
	"encoding/json"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	// Registered so the typed_config Any values in envoy.yaml resolve.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
)

const (
	configFile      = "envoy.yaml"
	rlsCluster      = "throttlekit"
	rlsPort         = 8081
	backendCluster  = "backend"
	backendPort     = 8000
	httpOptionsName = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// loadBootstrap reads envoy.yaml the way Envoy does (YAML → JSON → proto3
// JSON mapping, unknown fields rejected) and returns it with the raw YAML
// tree, which still tells a field set to its zero value from an absent one.
func loadBootstrap(t *testing.T) (*bootstrapv3.Bootstrap, map[string]any) {
	t.Helper()
	return loadBootstrapFrom(t, configFile)
}

// loadBootstrapFrom is loadBootstrap for another file of this directory.
func loadBootstrapFrom(t *testing.T, configFile string) (*bootstrapv3.Bootstrap, map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	var tree map[string]any
	if err := yaml.Unmarshal(raw, &tree); err != nil {
		t.Fatalf("%s: %v", configFile, err)
	}
	js, err := json.Marshal(tree)
	if err != nil {
		t.Fatalf("%s: to JSON: %v", configFile, err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("%s: not a v3 Bootstrap: %v", configFile, err)
	}
	return &b, tree
}

// TestValid runs Envoy's proto validation on the bootstrap and on every Any
// it holds, recursively: ValidateAll alone does not look inside an Any.
func TestValid(t *testing.T) {
	b, _ := loadBootstrap(t)
	validateTree(t, "bootstrap", b)
}

func validateTree(t *testing.T, where string, m proto.Message) {
	t.Helper()
	v, ok := m.(interface{ ValidateAll() error })
	if !ok {
		t.Fatalf("%s: %T has no ValidateAll", where, m)
	}
	if err := v.ValidateAll(); err != nil {
		t.Errorf("%s: %v", where, err)
	}
	for _, inner := range anys(m.ProtoReflect()) {
		msg, err := anypb.UnmarshalNew(inner, proto.UnmarshalOptions{})
		if err != nil {
			t.Errorf("%s: typed_config %s: %v", where, inner.GetTypeUrl(), err)
			continue
		}
		validateTree(t, inner.GetTypeUrl(), msg)
	}
}

// anys returns every google.protobuf.Any reachable from m without passing
// through another Any.
func anys(m protoreflect.Message) []*anypb.Any {
	if a, ok := m.Interface().(*anypb.Any); ok {
		return []*anypb.Any{a}
	}
	var out []*anypb.Any
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil:
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				out = append(out, anys(v.List().Get(i).Message())...)
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					out = append(out, anys(mv.Message())...)
					return true
				})
			}
		default:
			out = append(out, anys(v.Message())...)
		}
		return true
	})
	return out
}

// connectionManager returns the listener's HTTP connection manager.
func connectionManager(t *testing.T, b *bootstrapv3.Bootstrap) *hcmv3.HttpConnectionManager {
	t.Helper()
	listeners := b.GetStaticResources().GetListeners()
	if len(listeners) != 1 {
		t.Fatalf("want 1 listener, got %d", len(listeners))
	}
	l := listeners[0]
	if got := l.GetAddress().GetSocketAddress().GetPortValue(); got != 10000 {
		t.Errorf("listener port: got %d, want 10000", got)
	}
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			var hcm hcmv3.HttpConnectionManager
			if f.GetTypedConfig().MessageIs(&hcm) {
				if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
					t.Fatal(err)
				}
				return &hcm
			}
		}
	}
	t.Fatal("no http_connection_manager on the listener")
	return nil
}

func TestRateLimitFilterPointsAtThrottlekit(t *testing.T) {
	b, tree := loadBootstrap(t)
	hcm := connectionManager(t, b)

	var rl *ratelimitv3.RateLimit
	var names []string
	for _, f := range hcm.GetHttpFilters() {
		names = append(names, f.GetName())
		if f.GetName() != "envoy.filters.http.ratelimit" {
			continue
		}
		rl = new(ratelimitv3.RateLimit)
		if err := f.GetTypedConfig().UnmarshalTo(rl); err != nil {
			t.Fatalf("ratelimit typed_config: %v", err)
		}
	}
	if rl == nil {
		t.Fatalf("no envoy.filters.http.ratelimit among %v", names)
	}
	if last := names[len(names)-1]; last != "envoy.filters.http.router" {
		t.Errorf("last HTTP filter is %s, want the router", last)
	}
	if rl.GetDomain() != "edge" {
		t.Errorf("domain: got %q, want edge", rl.GetDomain())
	}
	svc := rl.GetRateLimitService()
	if got := svc.GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != rlsCluster {
		t.Errorf("rate_limit_service cluster: got %q, want %q", got, rlsCluster)
	}
	if svc.GetTransportApiVersion() != corev3.ApiVersion_V3 {
		t.Errorf("transport_api_version: got %v, want V3", svc.GetTransportApiVersion())
	}
	// proto3 cannot tell false from unset: the choice must be written down.
	if _, ok := ratelimitYAML(t, tree)["failure_mode_deny"]; !ok {
		t.Error("failure_mode_deny is not set explicitly")
	}
}

// ratelimitYAML returns the ratelimit filter's typed_config as written in
// envoy.yaml.
func ratelimitYAML(t *testing.T, tree map[string]any) map[string]any {
	t.Helper()
	const typeURL = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"
	var find func(v any) map[string]any
	find = func(v any) map[string]any {
		switch v := v.(type) {
		case map[string]any:
			if v["@type"] == typeURL {
				return v
			}
			for _, e := range v {
				if m := find(e); m != nil {
					return m
				}
			}
		case []any:
			for _, e := range v {
				if m := find(e); m != nil {
					return m
				}
			}
		}
		return nil
	}
	m := find(tree)
	if m == nil {
		t.Fatal("ratelimit typed_config not found in the YAML")
	}
	return m
}

func TestThrottlekitClusterIsHTTP2(t *testing.T) {
	b, _ := loadBootstrap(t)
	c := cluster(t, b, rlsCluster)
	if c.GetType() != clusterv3.Cluster_STRICT_DNS {
		t.Errorf("type: got %v, want STRICT_DNS", c.GetType())
	}
	checkEndpoint(t, c, rlsCluster, rlsPort)
	opts, ok := c.GetTypedExtensionProtocolOptions()[httpOptionsName]
	if !ok {
		t.Fatalf("no typed_extension_protocol_options[%s]: gRPC needs HTTP/2", httpOptionsName)
	}
	var hpo upstreamhttpv3.HttpProtocolOptions
	if err := opts.UnmarshalTo(&hpo); err != nil {
		t.Fatal(err)
	}
	if hpo.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Error("throttlekit cluster is not explicitly HTTP/2")
	}
}

func TestRouteSendsDescriptors(t *testing.T) {
	b, _ := loadBootstrap(t)
	checkEndpoint(t, cluster(t, b, backendCluster), backendCluster, backendPort)

	hcm := connectionManager(t, b)
	vhosts := hcm.GetRouteConfig().GetVirtualHosts()
	if len(vhosts) != 1 || len(vhosts[0].GetRoutes()) != 2 {
		t.Fatal("want one virtual host with two routes: the token budgets' and the rest")
	}
	if p := vhosts[0].GetRoutes()[1].GetMatch().GetPrefix(); p != "/" {
		t.Fatalf("the last route matches %q, want every request (/)", p)
	}
	route := vhosts[0].GetRoutes()[1].GetRoute()
	if route.GetCluster() != backendCluster {
		t.Errorf("route cluster: got %q, want %q", route.GetCluster(), backendCluster)
	}
	// The descriptor keys each rate_limits entry produces, in order.
	var got []string
	for _, rl := range route.GetRateLimits() {
		var keys []string
		for _, a := range rl.GetActions() {
			keys = append(keys, actionKey(t, a))
		}
		got = append(got, strings.Join(keys, ","))
	}
	want := []string{"remote_address", "path", "header_match"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("descriptors: got %q, want %q", got, want)
	}
	for _, rl := range route.GetRateLimits() {
		for _, a := range rl.GetActions() {
			if h := a.GetRequestHeaders(); h != nil {
				wantHeader := map[string]string{"path": ":path"}[h.GetDescriptorKey()]
				if h.GetHeaderName() != wantHeader {
					t.Errorf("%s: header %q, want %q", h.GetDescriptorKey(), h.GetHeaderName(), wantHeader)
				}
			}
		}
	}
}

// actionKey is the descriptor entry key an action produces.
func actionKey(t *testing.T, a *routev3.RateLimit_Action) string {
	t.Helper()
	switch {
	case a.GetRemoteAddress() != nil:
		return "remote_address"
	case a.GetRequestHeaders() != nil:
		return a.GetRequestHeaders().GetDescriptorKey()
	case a.GetGenericKey() != nil:
		if k := a.GetGenericKey().GetDescriptorKey(); k != "" {
			return k
		}
		return "generic_key"
	case a.GetHeaderValueMatch() != nil:
		if k := a.GetHeaderValueMatch().GetDescriptorKey(); k != "" {
			return k
		}
		return "header_match"
	}
	t.Fatalf("unexpected action %v", a)
	return ""
}

func cluster(t *testing.T, b *bootstrapv3.Bootstrap, name string) *clusterv3.Cluster {
	t.Helper()
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			return c
		}
	}
	t.Fatalf("no cluster %q", name)
	return nil
}

func checkEndpoint(t *testing.T, c *clusterv3.Cluster, host string, port uint32) {
	t.Helper()
	eps := c.GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
		t.Fatalf("cluster %s: want exactly one endpoint", c.GetName())
	}
	sa := eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if sa.GetAddress() != host || sa.GetPortValue() != port {
		t.Errorf("cluster %s: endpoint %s:%d, want %s:%d", c.GetName(), sa.GetAddress(), sa.GetPortValue(), host, port)
	}
}

// TestExtProcFilterGatesThroughThrottlekit: the ext_proc filter sits between
// the rate limit filter and the router, talks to throttlekit, exchanges
// headers only, and its message timeout leaves room for a gate's queue.
func TestExtProcFilterGatesThroughThrottlekit(t *testing.T) {
	b, _ := loadBootstrap(t)
	hcm := connectionManager(t, b)
	var names []string
	var ep *extprocfilterv3.ExternalProcessor
	for _, f := range hcm.GetHttpFilters() {
		names = append(names, f.GetName())
		if f.GetName() == "envoy.filters.http.ext_proc" {
			ep = new(extprocfilterv3.ExternalProcessor)
			if err := f.GetTypedConfig().UnmarshalTo(ep); err != nil {
				t.Fatalf("ext_proc typed_config: %v", err)
			}
		}
	}
	if ep == nil {
		t.Fatalf("no envoy.filters.http.ext_proc among %v", names)
	}
	want := []string{"envoy.filters.http.ratelimit", "envoy.filters.http.ext_proc", "envoy.filters.http.router"}
	if len(names) != 3 || names[0] != want[0] || names[1] != want[1] || names[2] != want[2] {
		t.Errorf("filters %v, want %v", names, want)
	}
	if got := ep.GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != rlsCluster {
		t.Errorf("ext_proc cluster %q, want %q", got, rlsCluster)
	}
	pm := ep.GetProcessingMode()
	if pm.GetRequestHeaderMode().String() != "SEND" || pm.GetResponseHeaderMode().String() != "SEND" ||
		pm.GetRequestBodyMode().String() != "NONE" || pm.GetResponseBodyMode().String() != "NONE" {
		t.Errorf("processing_mode %v: want headers SEND, bodies NONE", pm)
	}
	if d := ep.GetMessageTimeout().AsDuration(); d < 100*time.Millisecond {
		t.Errorf("message_timeout %v leaves no room for a gate's queue", d)
	}
}

// TestRateLimitTimeoutOutlastsStoreTimeout: Envoy must wait for throttlekit
// longer than throttlekit waits for its store, with room for the gRPC hop,
// or under a hung Redis Envoy gives up first and failure_mode_deny decides,
// bypassing the policy's on_store_error. Both shipped values are read where
// they are set: the timeout from envoy.yaml, --store-timeout's default from
// the serve command's source.
func TestRateLimitTimeoutOutlastsStoreTimeout(t *testing.T) {
	b, _ := loadBootstrap(t)
	var rl ratelimitv3.RateLimit
	for _, f := range connectionManager(t, b).GetHttpFilters() {
		if f.GetName() == "envoy.filters.http.ratelimit" {
			if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
				t.Fatal(err)
			}
		}
	}
	envoyTimeout := rl.GetTimeout().AsDuration()
	storeTimeout := serveFlagDefault(t, "store-timeout")
	// The store timeout again for the hop, a GC pause and the engine's own
	// work: the answer is throttlekit's whenever its store call timed out.
	if envoyTimeout < 2*storeTimeout {
		t.Errorf("ratelimit timeout %v, --store-timeout default %v: want the timeout ≥ 2 × the store timeout (%v), or Envoy gives up before on_store_error decides",
			envoyTimeout, storeTimeout, 2*storeTimeout)
	}
	// Every request waits this long when throttlekit hangs.
	if envoyTimeout > 250*time.Millisecond {
		t.Errorf("ratelimit timeout %v: want at most 250ms, the most a hung throttlekit may add to a request", envoyTimeout)
	}
}

// sidecarDir holds the serve command's source.
const sidecarDir = "../cmd/sidecar"

// serveFlagDefault returns the default of serve's duration flag name, read
// from the source: the third argument of the DurationVar call that defines
// it, evaluated as a constant (literals, the time units, package constants
// and arithmetic on them).
func serveFlagDefault(t *testing.T, name string) time.Duration {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(sidecarDir, "*.go"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("%s: no Go files (%v)", sidecarDir, err)
	}
	fset := token.NewFileSet()
	consts := map[string]ast.Expr{}
	var def ast.Expr
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							consts[n.Name] = vs.Values[i]
						}
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 4 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			lit, isLit := call.Args[1].(*ast.BasicLit)
			if ok && sel.Sel.Name == "DurationVar" && isLit && lit.Value == strconv.Quote(name) {
				def = call.Args[2]
			}
			return true
		})
	}
	if def == nil {
		t.Fatalf("%s: no DurationVar defines --%s", sidecarDir, name)
	}
	var eval func(e ast.Expr) constant.Value
	eval = func(e ast.Expr) constant.Value {
		switch e := e.(type) {
		case *ast.BasicLit:
			return constant.MakeFromLiteral(e.Value, e.Kind, 0)
		case *ast.ParenExpr:
			return eval(e.X)
		case *ast.BinaryExpr:
			op := e.Op
			if op == token.QUO {
				op = token.QUO_ASSIGN // integer division, as Go does on durations
			}
			return constant.BinaryOp(eval(e.X), op, eval(e.Y))
		case *ast.CallExpr: // time.Duration(x)
			if len(e.Args) == 1 {
				return eval(e.Args[0])
			}
		case *ast.SelectorExpr:
			if pkg, ok := e.X.(*ast.Ident); ok && pkg.Name == "time" {
				if u, ok := timeUnits[e.Sel.Name]; ok {
					return constant.MakeInt64(int64(u))
				}
			}
		case *ast.Ident:
			if c, ok := consts[e.Name]; ok {
				return eval(c)
			}
		}
		t.Fatalf("--%s default: cannot evaluate %s (at %v); extend serveFlagDefault", name, types.ExprString(e), fset.Position(e.Pos()))
		return nil
	}
	v, exact := constant.Int64Val(constant.ToInt(eval(def)))
	if !exact {
		t.Fatalf("--%s default %s is not a whole number of nanoseconds", name, types.ExprString(def))
	}
	return time.Duration(v)
}

var timeUnits = map[string]time.Duration{
	"Nanosecond": time.Nanosecond, "Microsecond": time.Microsecond, "Millisecond": time.Millisecond,
	"Second": time.Second, "Minute": time.Minute, "Hour": time.Hour,
}

// TestTokenRouteSettlesThroughExtProc: the token budgets' route asks the
// ext_proc filter for what a settlement reads — the response's end (the
// body streamed, trailers) and Envoy AI Gateway's metadata namespace —
// and has no route timeout to cut a long completion short.
func TestTokenRouteSettlesThroughExtProc(t *testing.T) {
	b, _ := loadBootstrap(t)
	r := connectionManager(t, b).GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0]
	if r.GetMatch().GetPrefix() != "/ai/" || r.GetRoute().GetCluster() != backendCluster {
		t.Fatalf("first route %v, want /ai/ to the backend", r.GetMatch())
	}
	if d := r.GetRoute().GetTimeout(); d == nil || d.AsDuration() != 0 {
		t.Errorf("route timeout %v, want 0s (none): a streamed completion outlasts Envoy's 15s default", d)
	}
	cfg, ok := r.GetTypedPerFilterConfig()["envoy.filters.http.ext_proc"]
	if !ok {
		t.Fatal("no ext_proc override on the token route")
	}
	var per extprocfilterv3.ExtProcPerRoute
	if err := cfg.UnmarshalTo(&per); err != nil {
		t.Fatal(err)
	}
	pm := per.GetOverrides().GetProcessingMode()
	if pm.GetRequestHeaderMode().String() != "SEND" || pm.GetResponseHeaderMode().String() != "SEND" ||
		pm.GetResponseBodyMode().String() != "STREAMED" || pm.GetResponseTrailerMode().String() != "SEND" ||
		pm.GetRequestBodyMode().String() != "NONE" {
		t.Errorf("processing_mode %v: want headers SEND, the response body STREAMED and its trailers SEND, no request body", pm)
	}
	if ns := per.GetOverrides().GetMetadataOptions().GetForwardingNamespaces().GetUntyped(); len(ns) != 1 || ns[0] != "io.envoy.ai_gateway" {
		t.Errorf("forwarded metadata namespaces %v, want [io.envoy.ai_gateway]", ns)
	}
}
