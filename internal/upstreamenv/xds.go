package upstreamenv

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// xds maps envoyproxy/ratelimit's xDS variables (CONFIG_TYPE=GRPC_XDS_SOTW
// and the CONFIG_GRPC_XDS_* family, FORCE_START_WITHOUT_INITIAL_CONFIG,
// XDS_CLIENT_BACKOFF_*) to the --config-xds-* flags; set holds the
// variables set. Translate calls it for CONFIG_TYPE=GRPC_XDS_SOTW.
func (u *Env) xds(set map[string]string) []error {
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
func (u *Env) notXDS(set map[string]string) {
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
