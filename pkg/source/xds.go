package source

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// DefaultXDSKeepalive is XDSOptions.Keepalive's default.
const DefaultXDSKeepalive = 5 * time.Minute

// XDSOptions configure an XDS source. Target is required.
type XDSOptions struct {
	// Target is the management server, host:port (gRPC's target syntax).
	Target string
	// NodeID is the node the server keys its snapshots by (upstream's
	// default is "default").
	NodeID string
	// NodeMetadata is sent as the node's metadata, string values.
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata on the stream (an auth token, a
	// tenant).
	Headers map[string]string
	// TLS, when set, dials the server over TLS with it (ClientTLS builds
	// one); nil dials in plaintext.
	TLS *tls.Config
	// RetryInterval is the first wait before reconnecting after the stream
	// fails, doubled on each failure in a row up to MaxRetryInterval, with
	// ±50% jitter; a stream that delivered a push resets it. It is also
	// the wait before NACKing a push identical to the one just NACKed
	// (go-control-plane's snapshot cache sends a rejected snapshot again at
	// once). Default 3s.
	RetryInterval time.Duration
	// MaxRetryInterval caps the reconnect wait. Default 60s.
	MaxRetryInterval time.Duration
	// MaxMessageSize is the largest push accepted, in bytes (0: gRPC's 4 MiB).
	MaxMessageSize int
	// Keepalive is how long the stream may be silent before the client
	// pings the management server; a ping unanswered within KeepaliveTimeout
	// closes the connection and a reconnect begins, so a stalled server
	// (one that neither answers nor closes) is left in minutes rather than
	// when TCP gives up. Default 5 minutes: gRPC servers refuse pings more
	// frequent than their enforcement policy (5 minutes unless configured)
	// with a GOAWAY. Negative disables it.
	Keepalive time.Duration
	// KeepaliveTimeout is how long a ping may go unanswered. Default 20s.
	KeepaliveTimeout time.Duration
	// OverlayDir, when set, is read before each push is built (LoadOverlay),
	// and watched: a change rebuilds the last applied push with the new
	// overlay and applies it (a failure leaves the policy in use).
	OverlayDir string
	// OverlayDebounce is the quiet time after an overlay change before
	// rebuilding. Default 200ms.
	OverlayDebounce time.Duration
	// Logger receives connection and push events (nil: discard).
	Logger *slog.Logger
	// OnReject, when set, is called with the error of every push refused
	// (NACKed) and not applied; it must not block.
	OnReject func(err error)
}

// XDS is a Source that subscribes, state of the world, to RateLimitConfig
// resources on an xDS management server, as envoyproxy/ratelimit does with
// CONFIG_TYPE=GRPC_XDS_SOTW. Every push is built into a set (BuildSet, with
// the overlay), handed to Apply, and ACKed; a push that fails either way is
// NACKed with the error's text and the policy in use stays. A lost stream
// is redialled with backoff, for ever, until the context ends.
type XDS struct {
	opts XDSOptions
	log  *slog.Logger

	// mu serializes builds and applies (pushes and overlay changes).
	mu sync.Mutex
	// applied are the resources of the last push applied; nil before one.
	applied []*anypb.Any
}

var _ Source = (*XDS)(nil)

// NewXDS checks opts and returns the source; it does not dial.
func NewXDS(opts XDSOptions) (*XDS, error) {
	if opts.Target == "" {
		return nil, errors.New("source: the xDS server's address is empty (want host:port)")
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 3 * time.Second
	}
	if opts.MaxRetryInterval <= 0 {
		opts.MaxRetryInterval = 60 * time.Second
	}
	opts.MaxRetryInterval = max(opts.MaxRetryInterval, opts.RetryInterval)
	if opts.OverlayDebounce <= 0 {
		opts.OverlayDebounce = 200 * time.Millisecond
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &XDS{opts: opts, log: log.With("xds", opts.Target)}, nil
}

// Run subscribes until ctx ends, then returns nil. It returns an error
// at once when the overlay directory is not a directory.
func (x *XDS) Run(ctx context.Context, apply Apply) error {
	if dir := x.opts.OverlayDir; dir != "" {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("source: the overlay %s is not a directory (%v)", dir, err)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		// The overlay is watched before the first push is asked for: an
		// edit made once a push is applied is seen (the watcher, started
		// beside the subscription, missed an edit made right after the
		// first push on a loaded machine).
		watching := make(chan struct{})
		var once sync.Once
		ready := func() { once.Do(func() { close(watching) }) }
		go func() {
			defer wg.Done()
			defer ready()
			if err := watchDirReady(ctx, dir, x.opts.OverlayDebounce, x.log, nil, func() (func(), []string) {
				// The overlay is read by the judge, under x.mu with the push it
				// is built on; the empty-file hold still applies.
				return func() { x.reapply(ctx, apply) }, nil
			}, ready); err != nil {
				x.log.Error("overlay not watched: its changes apply at the next push", "overlay", dir, "error", err)
			}
		}()
		defer func() { cancel(); wg.Wait() }()
		select {
		case <-watching:
		case <-ctx.Done():
		}
	}
	return x.subscribe(ctx, apply)
}

// reapply rebuilds the last applied push with the overlay as it is now.
func (x *XDS) reapply(ctx context.Context, apply Apply) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.applied == nil {
		return
	}
	set, err := x.build(x.applied)
	if err == nil {
		err = apply(ctx, set)
	}
	if err != nil {
		x.log.Error("overlay changed, but the last push with it is refused: keeping the policy in use", "overlay", x.opts.OverlayDir, "error", err)
		if x.opts.OnReject != nil {
			x.opts.OnReject(err)
		}
		return
	}
	x.log.Info("overlay changed: the last push applied with it", "overlay", x.opts.OverlayDir, "hash", set.Hash)
}

// subscribe redials until ctx ends.
func (x *XDS) subscribe(ctx context.Context, apply Apply) error {
	wait := x.opts.RetryInterval
	for {
		pushed, err := x.session(ctx, apply)
		if ctx.Err() != nil {
			return nil
		}
		if pushed {
			wait = x.opts.RetryInterval
		}
		d := jitter(wait)
		x.log.Warn("xDS stream ended; reconnecting", "error", err, "in", d.Round(time.Millisecond))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, x.opts.MaxRetryInterval)
	}
}

// jitter is d ±50%.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d+1)
}

// session runs one stream: it dials, subscribes and handles pushes until
// the stream fails or ctx ends. pushed reports whether any push arrived.
func (x *XDS) session(ctx context.Context, apply Apply) (pushed bool, err error) {
	creds := insecure.NewCredentials()
	if x.opts.TLS != nil {
		creds = credentials.NewTLS(x.opts.TLS)
	}
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if ka := cmp.Or(x.opts.Keepalive, DefaultXDSKeepalive); ka > 0 {
		dopts = append(dopts, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: ka, Timeout: cmp.Or(x.opts.KeepaliveTimeout, 20*time.Second)}))
	}
	if x.opts.MaxMessageSize > 0 {
		dopts = append(dopts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(x.opts.MaxMessageSize)))
	}
	conn, err := grpc.NewClient(x.opts.Target, dopts...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(x.opts.Headers) > 0 {
		sctx = metadata.NewOutgoingContext(sctx, metadata.New(x.opts.Headers))
	}
	client := sotw.NewADSClient(sctx, x.node(), RateLimitConfigType)
	// Not WaitForReady: a server that cannot be reached fails the session
	// at once, and Run redials on its own backoff (gRPC's own reconnect
	// backoff grows to two minutes).
	if err := client.InitConnect(conn); err != nil {
		return false, err
	}
	x.log.Info("xDS stream open: waiting for RateLimitConfig pushes", "xds_node", x.opts.NodeID)
	var lastRejected [sha256.Size]byte
	for {
		resp, err := client.Fetch()
		if err != nil {
			return pushed, err
		}
		pushed = true
		sum := digest(resp.Resources)
		x.mu.Lock()
		set, err := x.build(resp.Resources)
		if err == nil {
			err = apply(ctx, set)
		}
		if err == nil {
			x.applied = resp.Resources
		}
		x.mu.Unlock()
		if err == nil {
			lastRejected = [sha256.Size]byte{}
			x.log.Info("xDS push applied", "resources", len(resp.Resources), "domains", len(set.Domains), "hash", set.Hash)
			if err := client.Ack(); err != nil {
				return pushed, err
			}
			continue
		}
		if sum == lastRejected {
			// The server sent the push it was just told is bad: answer
			// after a pause, or the two would spin.
			t := time.NewTimer(x.opts.RetryInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return pushed, ctx.Err()
			case <-t.C:
			}
		} else {
			x.log.Error("xDS push refused (NACK): keeping the policy in use", "resources", len(resp.Resources), "error", err)
			if x.opts.OnReject != nil {
				x.opts.OnReject(err)
			}
		}
		lastRejected = sum
		if err := client.Nack(err.Error()); err != nil {
			return pushed, err
		}
	}
}

// build reads the overlay afresh and builds the push's set.
func (x *XDS) build(resources []*anypb.Any) (*policy.Set, error) {
	cfgs, err := DecodeResources(resources)
	if err != nil {
		return nil, err
	}
	overlay, err := LoadOverlay(x.opts.OverlayDir)
	if err != nil {
		return nil, err
	}
	return BuildSet(cfgs, overlay)
}

// node is the xDS node this source announces.
func (x *XDS) node() *corev3.Node {
	n := &corev3.Node{Id: x.opts.NodeID}
	if len(x.opts.NodeMetadata) > 0 {
		fields := make(map[string]*structpb.Value, len(x.opts.NodeMetadata))
		for k, v := range x.opts.NodeMetadata {
			fields[k] = structpb.NewStringValue(v)
		}
		n.Metadata = &structpb.Struct{Fields: fields}
	}
	return n
}

// digest identifies a push's resources, to tell a resent push.
func digest(resources []*anypb.Any) [sha256.Size]byte {
	h := sha256.New()
	for _, r := range resources {
		fmt.Fprintf(h, "%d:%s%d:", len(r.GetTypeUrl()), r.GetTypeUrl(), len(r.GetValue()))
		h.Write(r.GetValue())
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
