package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// xdsConfig is where `serve` takes its policy from when an xDS management
// server pushes it (envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW)
// instead of the --policy directory; xdsserve.go runs it.
type xdsConfig struct {
	url          string // host:port; "" for the --policy directory
	nodeID       string // "" for --node-id
	nodeMetadata string // k=v,k=v
	headers      string // k:v,k:v
	useTLS       bool
	tlsCert      string
	tlsKey       string
	tlsCA        string
	tlsSAN       string
	retry        time.Duration
	maxRetry     time.Duration
	overlay      string // directory of extension overlays; "" for none
	// forceStart reports ready before the first push arrives.
	forceStart bool
}

func (x *xdsConfig) define(fs *flag.FlagSet) {
	fs.StringVar(&x.url, "config-xds-url", "", "take the policy from this xDS management server (host:port) instead of --policy: a state-of-the-world subscription to RateLimitConfig resources, as envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW (Envoy Gateway)")
	fs.StringVar(&x.nodeID, "config-xds-node-id", "", "the xDS node id the server keys its snapshots by (default: --node-id)")
	fs.StringVar(&x.nodeMetadata, "config-xds-node-metadata", "", "the xDS node's metadata: key=value pairs separated by commas")
	fs.StringVar(&x.headers, "config-xds-headers", "", "gRPC metadata sent on the xDS stream: key:value pairs separated by commas (a token, a tenant)")
	fs.BoolVar(&x.useTLS, "config-xds-tls", false, "dial the xDS server over TLS (the system's roots unless --config-xds-tls-ca)")
	fs.StringVar(&x.tlsCert, "config-xds-tls-cert", "", "client certificate (PEM) for mutual TLS with the xDS server; with --config-xds-tls-key")
	fs.StringVar(&x.tlsKey, "config-xds-tls-key", "", "the client certificate's private key (PEM); never logged")
	fs.StringVar(&x.tlsCA, "config-xds-tls-ca", "", "CA certificates (PEM) the xDS server's certificate must chain to")
	fs.StringVar(&x.tlsSAN, "config-xds-tls-san", "", "the name the xDS server's certificate must carry (default: the host of --config-xds-url)")
	fs.DurationVar(&x.retry, "config-xds-retry-interval", 3*time.Second, "first wait before redialling a lost xDS stream, doubled on each failure in a row (±50% jitter); also the pause before NACKing a rejected push the server sends again")
	fs.DurationVar(&x.maxRetry, "config-xds-max-retry-interval", time.Minute, "longest wait between attempts to redial the xDS server")
	fs.StringVar(&x.overlay, "config-xds-overlay", "", "directory of policy files that add throttlekit's extensions (mode, algorithm, burst, lease, gates, ...) to pushed domains, one file per domain (README: configuration over xDS)")
	fs.BoolVar(&x.forceStart, "force-start-without-policy", false, "with --config-xds-url: report ready (/readyz) before the first push arrives, answering as with no rule meanwhile (envoyproxy/ratelimit's FORCE_START_WITHOUT_INITIAL_CONFIG)")
}

func (x *xdsConfig) enabled() bool { return x.url != "" }

func (x *xdsConfig) validate() error {
	var errs []error
	if !x.enabled() {
		for name, set := range map[string]bool{"--config-xds-tls": x.useTLS, "--config-xds-overlay": x.overlay != "", "--force-start-without-policy": x.forceStart} {
			if set {
				errs = append(errs, fmt.Errorf("%s needs --config-xds-url (the policy comes from the --policy directory otherwise)", name))
			}
		}
		return errors.Join(errs...)
	}
	if strings.Contains(x.url, "://") {
		errs = append(errs, fmt.Errorf("--config-xds-url %q: want host:port (e.g. envoy-gateway:18001), without a scheme", x.url))
	}
	if !x.useTLS && (x.tlsCert != "" || x.tlsKey != "" || x.tlsCA != "" || x.tlsSAN != "") {
		errs = append(errs, errors.New("--config-xds-tls-cert, -key, -ca and -san need --config-xds-tls"))
	}
	if (x.tlsCert == "") != (x.tlsKey == "") {
		errs = append(errs, errors.New("--config-xds-tls-cert and --config-xds-tls-key go together"))
	}
	if x.retry <= 0 || x.maxRetry <= 0 {
		errs = append(errs, errors.New("--config-xds-retry-interval and --config-xds-max-retry-interval must be positive"))
	}
	if _, err := parsePairs(x.nodeMetadata, '=', "--config-xds-node-metadata"); err != nil {
		errs = append(errs, err)
	}
	if _, err := parsePairs(x.headers, ':', "--config-xds-headers"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// parsePairs reads "k<sep>v,k<sep>v" (spaces around items trimmed); empty
// is no pair.
func parsePairs(s string, sep byte, what string) (map[string]string, error) {
	out := map[string]string{}
	n := 0
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		n++
		k, v, ok := strings.Cut(item, string(sep))
		if !ok || strings.TrimSpace(k) == "" {
			// The item is not shown: it may be a token.
			return nil, fmt.Errorf("%s: pair %d is not key%cvalue (its text is not shown: it may hold a secret)", what, n, sep)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}
