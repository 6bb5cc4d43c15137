package main

import (
	"context"
	"log/slog"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/source"
)

// forceStartHash marks the empty policy --force-start-without-policy
// serves until the first push: /readyz and /healthcheck see a policy.
const forceStartHash = "none: started without a policy (--force-start-without-policy), waiting for the first xDS push"

// newXDSSource builds the xDS policy source c.xds describes; pushes that
// fail (NACKed) are counted as failed reloads. Serve runs it with the
// reloader's apply (reload.go), as it runs the directory source.
func newXDSSource(c *serveConfig, m *metrics, log *slog.Logger) (*source.XDS, error) {
	x := c.xds
	meta, err := parsePairs(x.nodeMetadata, '=', "--config-xds-node-metadata")
	if err != nil {
		return nil, err
	}
	headers, err := parsePairs(x.headers, ':', "--config-xds-headers")
	if err != nil {
		return nil, err
	}
	opts := source.XDSOptions{Target: x.url, NodeID: x.nodeID, NodeMetadata: meta, Headers: headers,
		RetryInterval: x.retry, MaxRetryInterval: x.maxRetry, OverlayDir: x.overlay, Logger: log,
		// The source logs each refusal in full; serve counts it.
		OnReject: func(error) { m.PolicyRejected() }}
	if opts.NodeID == "" {
		opts.NodeID = c.nodeID
	}
	if x.useTLS {
		if opts.TLS, err = source.ClientTLS(x.tlsCert, x.tlsKey, x.tlsCA, x.tlsSAN); err != nil {
			return nil, err
		}
	}
	if x.overlay != "" { // a bad overlay is better found at start than at the first push
		if _, err := source.LoadOverlay(x.overlay); err != nil {
			return nil, err
		}
	}
	return source.NewXDS(opts)
}

// startWithoutPolicy loads the empty placeholder policy of
// --force-start-without-policy.
func startWithoutPolicy(ctx context.Context, eng *engine.Engine) error {
	return eng.Load(ctx, &policy.Set{Domains: []*policy.Domain{}, Hash: forceStartHash})
}
