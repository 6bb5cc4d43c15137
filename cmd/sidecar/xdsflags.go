package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
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
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, string(sep))
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%s: %q is not key%cvalue", what, item, sep)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// xds maps envoyproxy/ratelimit's xDS variables (CONFIG_TYPE=GRPC_XDS_SOTW
// and the CONFIG_GRPC_XDS_* family, FORCE_START_WITHOUT_INITIAL_CONFIG,
// XDS_CLIENT_BACKOFF_*) to the --config-xds-* flags; set holds the
// variables set. readUpstream calls it for CONFIG_TYPE=GRPC_XDS_SOTW.
func (u *upstreamEnv) xds(set map[string]string) []error {
	var errs []error
	has := func(name string) bool { _, ok := set[name]; return ok }
	boolean := func(name string) bool {
		b, err := strconv.ParseBool(set[name])
		if has(name) && err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want true or false", name, set[name]))
		}
		return b
	}
	url := set["CONFIG_GRPC_XDS_SERVER_URL"]
	if url == "" {
		url = "localhost:18000" // upstream's default
	}
	u.set("--config-xds-url", url, !has("CONFIG_GRPC_XDS_SERVER_URL"), "CONFIG_TYPE", "CONFIG_GRPC_XDS_SERVER_URL")
	node := set["CONFIG_GRPC_XDS_NODE_ID"]
	if node == "" {
		node = "default" // upstream's default: the server keys snapshots by it
	}
	u.set("--config-xds-node-id", node, !has("CONFIG_GRPC_XDS_NODE_ID"), "CONFIG_GRPC_XDS_NODE_ID")
	if has("CONFIG_GRPC_XDS_NODE_METADATA") {
		// Upstream splits key=value pairs on commas; so does the flag.
		u.set("--config-xds-node-metadata", set["CONFIG_GRPC_XDS_NODE_METADATA"], false, "CONFIG_GRPC_XDS_NODE_METADATA")
	}
	if has("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS") {
		u.set("--config-xds-headers", set["CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"], false, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")
	}
	tlsVars := []struct{ name, flag string }{
		{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "--config-xds-tls-cert"},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "--config-xds-tls-key"},
		{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "--config-xds-tls-ca"},
		{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "--config-xds-tls-san"},
	}
	if boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS") {
		u.set("--config-xds-tls", "true", false, "CONFIG_GRPC_XDS_SERVER_USE_TLS")
		for _, v := range tlsVars {
			if has(v.name) {
				u.set(v.flag, set[v.name], false, v.name)
			}
		}
	} else {
		for _, v := range tlsVars {
			if has(v.name) {
				u.ignore(v.name, "CONFIG_GRPC_XDS_SERVER_USE_TLS is not true")
			}
		}
	}
	// Upstream's connect retry interval is our first backoff step, its
	// backoff ceiling our ceiling.
	for _, d := range []struct{ name, flag string }{
		{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "--config-xds-retry-interval"},
		{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "--config-xds-max-retry-interval"},
	} {
		if has(d.name) {
			u.set(d.flag, set[d.name], false, d.name)
		}
	}
	for _, name := range []string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER"} {
		if has(name) {
			u.ignore(name, whyXDSBackoff)
		}
	}
	if has("FORCE_START_WITHOUT_INITIAL_CONFIG") {
		u.set("--force-start-without-policy", strconv.FormatBool(boolean("FORCE_START_WITHOUT_INITIAL_CONFIG")), false, "FORCE_START_WITHOUT_INITIAL_CONFIG")
	}
	return errs
}

// notXDS marks the xDS variables set without CONFIG_TYPE=GRPC_XDS_SOTW
// as ignored, saying so.
func (u *upstreamEnv) notXDS(set map[string]string) {
	var names []string
	for name := range set {
		if strings.HasPrefix(name, "CONFIG_GRPC_XDS_") || strings.HasPrefix(name, "XDS_CLIENT_") || name == "FORCE_START_WITHOUT_INITIAL_CONFIG" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		u.ignore(name, "CONFIG_TYPE is not GRPC_XDS_SOTW")
	}
}
