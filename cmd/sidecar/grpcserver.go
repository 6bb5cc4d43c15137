package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// grpcLimits are the gRPC server's limits: what it accepts on one
// connection, how it keeps connections alive, and how many rate-limit
// checks it runs at once before it sheds the excess.
type grpcLimits struct {
	// maxInflight is the most ShouldRateLimit calls in progress at once; a
	// call beyond it is answered RESOURCE_EXHAUSTED at once, which Envoy's
	// rate-limit filter treats as any failure of the service
	// (failure_mode_deny decides). 0: no limit.
	maxInflight int
	// maxStreams is HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS per connection:
	// a client (Envoy) queues streams beyond it on its side.
	maxStreams uint
	// keepaliveTime and keepaliveTimeout: after keepaliveTime without
	// activity the server pings the client, and closes the connection if no
	// answer comes within keepaliveTimeout.
	keepaliveTime, keepaliveTimeout time.Duration
	// keepaliveMinTime is the shortest interval between a client's pings
	// the server tolerates (it closes connections that ping more often).
	keepaliveMinTime time.Duration
	// maxConnectionAge closes connections older than it (gracefully, with
	// GOAWAY), so clients rebalance across replicas; 0: never.
	maxConnectionAge time.Duration
}

// define registers the limits' flags on fs.
func (l *grpcLimits) define(fs *flag.FlagSet) {
	fs.IntVar(&l.maxInflight, "grpc-max-inflight", 1024, "most rate-limit checks in progress at once; more are shed at once with RESOURCE_EXHAUSTED (Envoy's failure_mode_deny decides), not queued (0: no limit)")
	fs.UintVar(&l.maxStreams, "grpc-max-concurrent-streams", 1024, "HTTP/2 streams one client connection may have open at once (ext_proc holds one per HTTP request); the client queues the rest")
	fs.DurationVar(&l.keepaliveTime, "grpc-keepalive-time", time.Minute, "ping a client connection idle this long, to find dead peers")
	fs.DurationVar(&l.keepaliveTimeout, "grpc-keepalive-timeout", 20*time.Second, "close a connection whose keepalive ping is not answered within this")
	fs.DurationVar(&l.keepaliveMinTime, "grpc-keepalive-min-time", 10*time.Second, "shortest interval between a client's keepalive pings that is tolerated (Envoy's connection_keepalive interval must not be shorter)")
	fs.DurationVar(&l.maxConnectionAge, "grpc-max-connection-age", 0, "close client connections older than this, gracefully, so clients rebalance across replicas (0: never)")
}

func (l *grpcLimits) validate() error {
	var errs []error
	if l.maxInflight < 0 {
		errs = append(errs, fmt.Errorf("--grpc-max-inflight %d: must be ≥ 0 (0: no limit)", l.maxInflight))
	}
	if l.maxStreams < 1 || l.maxStreams > math.MaxUint32 {
		errs = append(errs, fmt.Errorf("--grpc-max-concurrent-streams %d: want 1 to %d", l.maxStreams, uint32(math.MaxUint32)))
	}
	if l.keepaliveTime <= 0 || l.keepaliveTimeout <= 0 || l.keepaliveMinTime <= 0 {
		errs = append(errs, errors.New("--grpc-keepalive-time, --grpc-keepalive-timeout and --grpc-keepalive-min-time must be positive"))
	}
	if l.maxConnectionAge < 0 {
		errs = append(errs, fmt.Errorf("--grpc-max-connection-age %v: must be ≥ 0 (0: never)", l.maxConnectionAge))
	}
	return errors.Join(errs...)
}

// options are the server options the limits make.
func (l *grpcLimits) options() []grpc.ServerOption {
	kp := keepalive.ServerParameters{Time: l.keepaliveTime, Timeout: l.keepaliveTimeout}
	if l.maxConnectionAge > 0 {
		kp.MaxConnectionAge = l.maxConnectionAge
		kp.MaxConnectionAgeGrace = l.maxConnectionAge / 10
	}
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(l.maxStreams)),
		grpc.KeepaliveParams(kp),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.keepaliveMinTime, PermitWithoutStream: true}),
	}
}

// shedder answers the rate-limit checks the server has no room for at once,
// instead of queueing them behind the ones it has: past its capacity a
// queue only grows, and every answer in it comes later than Envoy waits
// (its rate-limit timeout, 20 ms by default). A check whose caller has
// already given up (its deadline passed while it waited to be run) is
// dropped too: its answer would be thrown away.
type shedder struct {
	max      int64
	inflight atomic.Int64
	shed     *prometheus.CounterVec
}

func newShedder(max int, reg prometheus.Registerer) *shedder {
	s := &shedder{max: int64(max), shed: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "throttlekit_grpc_shed_total",
		Help: "Rate-limit checks answered without a decision because the server was past its capacity: reason inflight (more than --grpc-max-inflight in progress; answered RESOURCE_EXHAUSTED) or expired (the caller's deadline passed before the check ran).",
	}, []string{"reason"})}
	for _, r := range []string{"inflight", "expired"} {
		s.shed.WithLabelValues(r)
	}
	reg.MustRegister(s.shed)
	return s
}

var (
	errShed = status.Error(codes.ResourceExhausted,
		"throttlekit: more rate-limit checks in progress than --grpc-max-inflight; shed (Envoy's failure_mode_deny decides)")
	shouldRateLimit = "/" + rlsv3.RateLimitService_ServiceDesc.ServiceName + "/ShouldRateLimit"
)

// interceptor sheds ShouldRateLimit calls; every other method (health,
// reflection) passes.
func (s *shedder) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod != shouldRateLimit {
			return handler(ctx, req)
		}
		if err := ctx.Err(); err != nil {
			s.shed.WithLabelValues("expired").Inc()
			return nil, status.FromContextError(err).Err()
		}
		if n := s.inflight.Add(1); s.max > 0 && n > s.max {
			s.inflight.Add(-1)
			s.shed.WithLabelValues("inflight").Inc()
			return nil, errShed
		}
		defer s.inflight.Add(-1)
		return handler(ctx, req)
	}
}
