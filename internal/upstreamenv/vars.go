// Package upstreamenv translates envoyproxy/ratelimit's environment
// variables (its src/settings/settings.go) into throttlekit's serve flags,
// so that a manifest written for envoyproxy/ratelimit runs throttlekit
// unchanged. One table holds every variable: taken (the flag it sets),
// ignored (and why), or refused (an error naming it).
//
// The package reads no environment: the caller hands it the variables as a
// map (Names lists the ones it reads), and it hands back the flag values
// they make (Env), which Apply sets on a flag.FlagSet for the flags not
// given otherwise.
package upstreamenv

import (
	"fmt"
	"strings"
)

// variable is one of envoyproxy/ratelimit's environment variables
// (its src/settings/settings.go) and what serve makes of it. serve takes it
// only for a flag given neither on the command line nor by its THROTTLEKIT_*
// twin; Translate (translate.go) does the taking, this table says what
// each variable is for, and the README's table is written from it
// (markdown).
type variable struct {
	name string // the variable, e.g. GRPC_PORT
	def  string // upstream's default; "" for none
	// flag is the throttlekit flag the variable sets, alone or with others
	// (GRPC_HOST and GRPC_PORT make --grpc-addr); "" when serve ignores it.
	flag string
	// note says how the value is taken, or, with flag "", why the variable
	// is ignored.
	note string
	// generic marks a common name (PORT, HOST, LOG_LEVEL, ...): set alone,
	// it is taken, but does not switch serve to upstream's defaults.
	generic bool
}

// Reasons shared by several ignored variables.
const (
	whyStatsd    = "throttlekit exports Prometheus metrics only: `/metrics` on the HTTP listener (PORT)"
	whyPerSecond = "one store holds every limit: per-second limits go to REDIS_URL too"
	whyMemcache  = "no Memcache store (BACKEND_TYPE=memcache stops serve with an error)"
	// whyXDSBackoff: xds (xds.go) ignores these with this reason.
	whyXDSBackoff = "the first wait is CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL, doubled per failure with a fixed ±50% jitter"
	whyHeaders    = "the header names are fixed: RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset"
	whyPipeline   = "each check is one Lua script call, one round trip; go-redis pools the connections"
)

// vars is every variable of envoyproxy/ratelimit's settings
// (src/settings/settings.go), in its order, and one Envoy Gateway sets.
var vars = []variable{
	{"PROTO", "tcp", "", "the listeners are TCP", true},
	{"HOST", "0.0.0.0", "--http-addr", "host of `--http-addr`", true},
	{"PORT", "8080", "--http-addr", "port of `--http-addr`; `/healthcheck` answers there as upstream's does", true},
	{"DEBUG_HOST", "0.0.0.0", "", "no debug listener: `/debug/policy` and `/metrics` are on the HTTP listener (PORT); no pprof", false},
	{"DEBUG_PORT", "6070", "", "no debug listener: `/debug/policy` and `/metrics` are on the HTTP listener (PORT); no pprof", false},
	{"GRPC_UDS", "", "", "the gRPC listener is TCP only: set, it stops serve with an error", false},
	{"GRPC_HOST", "0.0.0.0", "--grpc-addr", "host of `--grpc-addr`", false},
	{"GRPC_PORT", "8081", "--grpc-addr", "port of `--grpc-addr`", false},
	{"GRPC_MAX_CONNECTION_AGE", "24h", "--grpc-max-connection-age", "", false},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", "", "the grace is a tenth of `--grpc-max-connection-age`", false},
	{"GRPC_SERVER_USE_TLS", "false", "--grpc-tls-cert", "true: the four below apply; otherwise they are ignored", false},
	{"GRPC_SERVER_TLS_CERT", "", "--grpc-tls-cert", "reloaded when the file changes", false},
	{"GRPC_SERVER_TLS_KEY", "", "--grpc-tls-key", "reloaded when the file changes", false},
	{"GRPC_CLIENT_TLS_CACERT", "", "--grpc-tls-client-ca", "clients must present a certificate this CA signed (only this CA: upstream adds it to the system roots)", false},
	{"GRPC_CLIENT_TLS_SAN", "", "--grpc-tls-client-san", "the client certificate must name it (DNS or IP SAN as upstream; a URI SAN such as a SPIFFE ID too)", false},
	// Not upstream's, but Envoy Gateway sets it beside GRPC_SERVER_USE_TLS:
	// upstream ignores it too, and the log should say so.
	{"GRPC_SERVER_TLS_CA_CERT", "", "", "not an envoyproxy/ratelimit variable (Envoy Gateway sets it; upstream reads GRPC_CLIENT_TLS_CACERT): no client certificate is asked for", false},
	{"LOG_LEVEL", "WARN", "--log-level", "trace→debug, warning→warn, fatal and panic→error; unset, throttlekit's info (upstream's WARN would hide what serve says at start)", true},
	{"LOG_FORMAT", "text", "--log-format", "text or json", true},
	{"CONFIG_TYPE", "FILE", "--policy", "FILE: the RUNTIME_* layout below", false},
	// The xDS rows apply with CONFIG_TYPE=GRPC_XDS_SOTW; otherwise they
	// are ignored, saying so (xds.go).
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", "--force-start-without-policy", "ready (`/readyz`, `/healthcheck`) before the first push, answering as with no rule meanwhile; otherwise not ready until then", false},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", "--config-xds-node-id", "unset: upstream's `default`, the node the server keys snapshots by", false},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", "--config-xds-node-metadata", "key=value pairs, comma-separated, as upstream", false},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", "--config-xds-url", "with CONFIG_TYPE=GRPC_XDS_SOTW the policy comes from this xDS server (RateLimitConfig, state of the world), not a directory; extensions through `--config-xds-overlay`", false},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", "--config-xds-retry-interval", "the first wait before redialling, doubled per failure in a row (±50% jitter)", false},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", "--config-xds-headers", "key:value pairs, comma-separated, as upstream: gRPC metadata on the stream", false},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", "--config-xds-tls", "true: the four below apply; otherwise they are ignored", false},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", "--config-xds-tls-cert", "client certificate for mutual TLS", false},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", "--config-xds-tls-key", "its key; never logged", false},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", "--config-xds-tls-ca", "the xDS server's certificate must chain to it; unset, the system's roots", false},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", "--config-xds-tls-san", "the name the xDS server's certificate must carry", false},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", "", whyXDSBackoff, false},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", "--config-xds-max-retry-interval", "the longest wait between redials", false},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", "", whyXDSBackoff, false},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", "", whyXDSBackoff, false},
	{"USE_DOG_STATSD", "false", "", whyStatsd, false},
	{"USE_DOG_STATSD_MOGRIFIERS", "", "", whyStatsd, false},
	{"USE_STATSD", "true", "", whyStatsd, false},
	{"STATSD_HOST", "localhost", "", whyStatsd, false},
	{"STATSD_PORT", "8125", "", whyStatsd, false},
	{"EXTRA_TAGS", "", "", whyStatsd, false},
	{"STATS_FLUSH_INTERVAL", "10s", "", whyStatsd, false},
	{"DISABLE_STATS", "false", "", whyStatsd, false},
	{"USE_PROMETHEUS", "false", "--metrics-addr", "true: `/metrics` on a listener of its own at PROMETHEUS_ADDR too, and upstream's rate-limit metric names beside throttlekit's (`--upstream-metrics`); otherwise only on the HTTP listener (PORT)", false},
	{"PROMETHEUS_ADDR", ":9090", "--metrics-addr", "with USE_PROMETHEUS=true: that listener's address, plain HTTP, `/metrics` alone (Envoy Gateway sets `:19001` and scrapes it)", false},
	{"PROMETHEUS_PATH", "/metrics", "", "the path is `/metrics`, on both listeners", false},
	{"PROMETHEUS_MAPPER_YAML", "", "", "no statsd mapping is read: with USE_PROMETHEUS=true the names upstream's default mapping makes are served (`--upstream-metrics`)", false},
	{"RUNTIME_ROOT", "/srv/runtime_data/current", "--policy", "`--policy` is RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY; with CONFIG_TYPE=GRPC_XDS_SOTW the three are ignored", false},
	{"RUNTIME_SUBDIRECTORY", "", "--policy", "", false},
	{"RUNTIME_APPDIRECTORY", "config", "--policy", "", false},
	{"RUNTIME_IGNOREDOTFILES", "false", "", "files whose names start with a dot are always skipped", false},
	{"RUNTIME_WATCH_ROOT", "true", "", "the policy directory is always watched, symlink swaps (ConfigMap updates) included", false},
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", "", "counters expire with their window", false},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", "", "rules keep their own in-process state (cached_deny, leased modes), bounded by `--max-keys`", false},
	{"NEAR_LIMIT_RATIO", "0.8", "", "no near_limit statistic; decisions are counted by code in `/metrics`", false},
	{"CACHE_KEY_PREFIX", "", "", "throttlekit's keys have their own encoding (they never meet upstream's); give fleets that must not share counters their own Redis database (`/N`)", false},
	{"BACKEND_TYPE", "redis", "--store", "redis, at REDIS_URL: unset, serve refuses to start rather than count in memory (choose memory with --store memory); memcache stops serve with an error", false},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", "", "not configurable: a request one limit denies consumes nothing from its other limits (see Policy)", false},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", "--response-headers", "", false},
	{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", "", whyHeaders, false},
	{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", "", whyHeaders, false},
	{"LIMIT_RESET_HEADER", "RateLimit-Reset", "", whyHeaders, false},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", "--healthcheck-needs-policy", "", false},
	{"REDIS_SOCKET_TYPE", "unix", "--redis-url", "tcp; unix stops serve with an error (unset, a host:port REDIS_URL is taken as tcp)", false},
	{"REDIS_TYPE", "SINGLE", "--redis-url", "single, sentinel or cluster", false},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", "--redis-url", "`host:port`; sentinel `master,host:port,host:port`; cluster `host:port,host:port`. Also sets `--store redis`; unset, the store is memory", false},
	{"REDIS_POOL_SIZE", "10", "--redis-url", "`pool_size=`", false},
	{"REDIS_AUTH", "", "--redis-url", "`password` or `user:password`; never logged", false},
	{"REDIS_TLS", "false", "--redis-url", "`rediss://`", false},
	{"REDIS_TLS_CLIENT_CERT", "", "--redis-tls-cert", "with REDIS_TLS=true; reloaded when the file changes", false},
	{"REDIS_TLS_CLIENT_KEY", "", "--redis-tls-key", "with REDIS_TLS=true", false},
	{"REDIS_TLS_CACERT", "", "--redis-tls-ca", "with REDIS_TLS=true: trusted besides the system roots, as upstream; reloaded when the file changes", false},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", "--redis-tls-skip-hostname-verification", "with REDIS_TLS=true: the chain is still verified, as upstream", false},
	{"REDIS_PIPELINE_WINDOW", "0", "", whyPipeline, false},
	{"REDIS_PIPELINE_LIMIT", "0", "", whyPipeline, false},
	{"REDIS_PERSECOND", "false", "", whyPerSecond, false},
	{"REDIS_PERSECOND_SOCKET_TYPE", "unix", "", whyPerSecond, false},
	{"REDIS_PERSECOND_TYPE", "SINGLE", "", whyPerSecond, false},
	{"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", "", whyPerSecond, false},
	{"REDIS_PERSECOND_POOL_SIZE", "10", "", whyPerSecond, false},
	{"REDIS_PERSECOND_AUTH", "", "", whyPerSecond, false},
	{"REDIS_PERSECOND_TLS", "false", "", whyPerSecond, false},
	{"REDIS_PERSECOND_PIPELINE_WINDOW", "0", "", whyPerSecond, false},
	{"REDIS_PERSECOND_PIPELINE_LIMIT", "0", "", whyPerSecond, false},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", "--healthcheck-needs-store", "", false},
	{"MEMCACHE_HOST_PORT", "", "", whyMemcache, false},
	{"MEMCACHE_MAX_IDLE_CONNS", "2", "", whyMemcache, false},
	{"MEMCACHE_SRV", "", "", whyMemcache, false},
	{"MEMCACHE_SRV_REFRESH", "0", "", whyMemcache, false},
	{"MEMCACHE_TLS", "false", "", whyMemcache, false},
	{"MEMCACHE_TLS_CLIENT_CERT", "", "", whyMemcache, false},
	{"MEMCACHE_TLS_CLIENT_KEY", "", "", whyMemcache, false},
	{"MEMCACHE_TLS_CACERT", "", "", whyMemcache, false},
	{"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", "", whyMemcache, false},
	{"SHADOW_MODE", "false", "--shadow", "", false},
	{"MERGE_DOMAIN_CONFIG", "false", "", "one domain per file: a domain in two files is an error that names both", false},
	{"TRACING_ENABLED", "false", "--tracing", "", false},
	{"TRACING_SERVICE_NAME", "RateLimit", "--tracing-service-name", "with TRACING_ENABLED; upstream's default applies then (throttlekit's own: `throttlekit`)", false},
	{"TRACING_SERVICE_NAMESPACE", "", "--tracing-service-namespace", "with TRACING_ENABLED", false},
	{"TRACING_SERVICE_INSTANCE_ID", "", "--tracing-service-instance-id", "with TRACING_ENABLED; unset, a random id per process", false},
	{"TRACING_EXPORTER_PROTOCOL", "http", "--tracing-protocol", "with TRACING_ENABLED; upstream's default `http` applies then (throttlekit's own: `grpc`). The collector's address and headers come from the standard `OTEL_EXPORTER_OTLP_*` variables, read by the OpenTelemetry exporter as upstream's does", false},
	{"TRACING_SAMPLING_RATE", "1", "--tracing-sampling-rate", "with TRACING_ENABLED; a call carrying trace context follows its caller's sampling decision", false},
}

// Names are the variables the table holds, in its order: the ones a
// caller reads from the environment and hands to Translate.
func Names() []string {
	out := make([]string, len(vars))
	for i, v := range vars {
		out[i] = v.name
	}
	return out
}

// varNamed returns the table's row for name.
func varNamed(name string) (variable, bool) {
	for _, v := range vars {
		if v.name == name {
			return v, true
		}
	}
	return variable{}, false
}

// markdown is the README's table of upstream variables, written
// from vars.
func markdown() string {
	var b strings.Builder
	b.WriteString("| envoyproxy/ratelimit variable | its default | throttlekit | notes |\n| --- | --- | --- | --- |\n")
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, v := range vars {
		def, to := "", "ignored"
		if v.def != "" {
			def = "`" + v.def + "`"
		}
		if v.flag != "" {
			to = "`" + v.flag + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", v.name, cell(def), to, cell(v.note))
	}
	return b.String()
}
