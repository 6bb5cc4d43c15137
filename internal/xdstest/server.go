// Package xdstest runs a real xDS management server for tests: the
// go-control-plane server (pkg/server/v3) over its snapshot cache
// (pkg/cache/v3), serving the aggregated discovery service on a loopback
// port, optionally over TLS, and recording every request it receives (ACKs,
// NACKs with their error detail, node and stream metadata).
package xdstest

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
)

// Options configure a Server.
type Options struct {
	// Addr is the address to listen on; empty picks a free loopback port.
	// A restarted server passes its predecessor's Addr.
	Addr string
	// TLS, when set, serves over TLS with it (client certificates as it
	// says).
	TLS *tls.Config
	// PermitPings lets clients ping as often as they like (gRPC servers
	// otherwise answer pings more frequent than every 5 minutes with a
	// GOAWAY): for tests of a client's keepalive.
	PermitPings bool
}

// Server is a running management server owned by one test; it stops when
// the test ends. Its methods are safe for concurrent use.
type Server struct {
	// Addr is host:port on 127.0.0.1.
	Addr string
	// Cache holds the snapshots served, by node id.
	Cache cachev3.SnapshotCache

	tb  testing.TB
	gs  *grpc.Server
	mu  sync.Mutex
	req []*discoverygrpc.DiscoveryRequest
	md  []metadata.MD
}

// Start listens and serves until Stop or the end of the test.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatalf("xdstest: listen %s: %v", addr, err)
	}
	s := &Server{Addr: lis.Addr().String(), Cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), tb: tb}
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.mu.Lock()
			s.md = append(s.md, md)
			s.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, r *discoverygrpc.DiscoveryRequest) error {
			s.mu.Lock()
			s.req = append(s.req, r)
			s.mu.Unlock()
			return nil
		},
	}
	var gopts []grpc.ServerOption
	if opts.TLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	if opts.PermitPings {
		gopts = append(gopts, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Millisecond, PermitWithoutStream: true}))
	}
	s.gs = grpc.NewServer(gopts...)
	ctx, cancel := context.WithCancel(context.Background())
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(s.gs, serverv3.NewServer(ctx, s.Cache, cb))
	done := make(chan struct{})
	go func() { defer close(done); _ = s.gs.Serve(lis) }()
	tb.Cleanup(func() { s.Stop(); cancel(); <-done })
	return s
}

// Stop stops serving at once, cutting open streams, as a crash would.
// It is idempotent.
func (s *Server) Stop() { s.gs.Stop() }

// Push sets node's snapshot to version, holding cfgs as its RateLimitConfig
// resources; the server pushes it to the node's open stream.
func (s *Server) Push(node, version string, cfgs ...*rlsconfv3.RateLimitConfig) {
	s.tb.Helper()
	rs := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		rs[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		s.tb.Fatalf("xdstest: snapshot %s: %v", version, err)
	}
	if err := s.Cache.SetSnapshot(context.Background(), node, snap); err != nil {
		s.tb.Fatalf("xdstest: set snapshot %s: %v", version, err)
	}
}

// Requests are every discovery request received so far, in order.
func (s *Server) Requests() []*discoverygrpc.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.req)
}

// Acked reports whether a request acknowledged version (a request for
// version with no error detail, answering a response).
func (s *Server) Acked(version string) bool {
	for _, r := range s.Requests() {
		if r.GetVersionInfo() == version && r.GetErrorDetail() == nil && r.GetResponseNonce() != "" {
			return true
		}
	}
	return false
}

// Nacks are the error details of every NACK received, in order.
func (s *Server) Nacks() []string {
	var out []string
	for _, r := range s.Requests() {
		if d := r.GetErrorDetail(); d != nil {
			out = append(out, d.GetMessage())
		}
	}
	return out
}

// StreamMetadata is the gRPC metadata of every stream opened, in order.
func (s *Server) StreamMetadata() []metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.md)
}
