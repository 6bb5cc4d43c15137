package upstreamenv

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Env is what serve takes from envoyproxy/ratelimit's environment: the
// flags it sets and, for the start log, which variables it took, which it
// ignored and why. Translate makes one; Apply records which flags were
// given instead. Not safe for concurrent use: Apply and Log run once, at
// start.
type Env struct {
	// defaults: upstream's defaults apply (all interfaces, the
	// RUNTIME_ROOT layout, GRPC_MAX_CONNECTION_AGE), because a variable
	// only upstream uses is set, or --upstream-defaults.
	defaults bool
	flags    []flagValue       // the flags the variables make, in table order
	taken    []string          // variables set and used
	ignored  []ignoredVar      // variables set and ignored
	given    []ignoredVar      // variables whose flag was given: the flag won
	applied  []string          // upstream defaults that took effect ("--grpc-addr 0.0.0.0:8081")
	env      map[string]string // the variables set
	seen     map[string]bool   // the variables accounted for
	// noStore, when set, is why upstream would count in a Redis that no
	// variable names: Apply refuses unless --store was given (by flag or
	// THROTTLEKIT_STORE), rather than fall back to per-process counters.
	noStore string
}

// flagValue is one flag's value and the variables it came from.
type flagValue struct {
	flag, value string
	from        []string // the variables set that made it
	byDefault   bool     // an upstream default made it too
}

// ignoredVar is a variable serve does not honour, and why.
type ignoredVar struct{ name, why string }

// Translate makes the flags envoyproxy/ratelimit's variables in environ
// say (environ holds variable names and values; names the table does not
// hold, and values empty once trimmed of spaces, are not set). force
// applies upstream's defaults even when no variable only upstream uses is
// set (the binary runs as `ratelimit`). A value serve cannot honour (a
// unix socket, memcache, a malformed port) is an error naming the
// variable; secrets (REDIS_AUTH) never appear in one. The *Env is non-nil
// even with an error.
func Translate(environ map[string]string, force bool) (*Env, error) {
	set := map[string]string{}
	u := &Env{defaults: force, env: set, seen: map[string]bool{}}
	for _, v := range vars {
		if s := strings.TrimSpace(environ[v.name]); s != "" {
			set[v.name] = s
			u.defaults = u.defaults || !v.generic
		}
	}
	// value is a variable's value: set, or upstream's default when
	// upstream's defaults apply, or "".
	value := func(name string) string {
		if s, ok := set[name]; ok {
			return s
		}
		if u.defaults {
			v, _ := varNamed(name)
			return v.def
		}
		return ""
	}
	has := func(name string) bool { _, ok := set[name]; return ok }
	var errs []error
	bad := func(name, want string) {
		errs = append(errs, fmt.Errorf("%s=%q: %s", name, set[name], want))
	}
	boolean := func(name string) bool {
		if !has(name) {
			b, _ := strconv.ParseBool(value(name))
			return b
		}
		b, err := strconv.ParseBool(set[name])
		if err != nil {
			bad(name, "want true or false")
		}
		return b
	}

	// Listeners.
	for _, l := range []struct{ flag, host, port, def string }{
		{"--grpc-addr", "GRPC_HOST", "GRPC_PORT", "8081"},
		{"--http-addr", "HOST", "PORT", "8080"},
	} {
		if !has(l.host) && !has(l.port) && !u.defaults {
			continue
		}
		host, port := value(l.host), value(l.port)
		if host == "" {
			host = "127.0.0.1" // a port alone keeps throttlekit's loopback
		}
		if port == "" {
			port = l.def
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			bad(l.port, "want a port number, 0 to 65535 (e.g. "+l.def+")")
			continue
		}
		u.set(l.flag, net.JoinHostPort(host, port), !has(l.host) || !has(l.port), l.host, l.port)
	}
	if has("GRPC_UDS") {
		bad("GRPC_UDS", "throttlekit's gRPC listener is TCP only: unset GRPC_UDS and point Envoy at GRPC_HOST:GRPC_PORT")
	}
	if has("GRPC_MAX_CONNECTION_AGE") || u.defaults {
		u.set("--grpc-max-connection-age", value("GRPC_MAX_CONNECTION_AGE"), !has("GRPC_MAX_CONNECTION_AGE"), "GRPC_MAX_CONNECTION_AGE")
	}

	// Logging.
	if has("LOG_LEVEL") {
		switch l := strings.ToLower(set["LOG_LEVEL"]); l {
		case "trace", "debug":
			u.set("--log-level", "debug", false, "LOG_LEVEL")
		case "info", "warn", "error":
			u.set("--log-level", l, false, "LOG_LEVEL")
		case "warning":
			u.set("--log-level", "warn", false, "LOG_LEVEL")
		case "fatal", "panic":
			u.set("--log-level", "error", false, "LOG_LEVEL")
		default:
			bad("LOG_LEVEL", "want trace, debug, info, warn, error, fatal or panic")
		}
	}
	if has("LOG_FORMAT") {
		u.set("--log-format", strings.ToLower(set["LOG_FORMAT"]), false, "LOG_FORMAT")
	}

	// Where the policy comes from.
	switch ct := strings.ToUpper(value("CONFIG_TYPE")); ct {
	case "", "FILE":
		if has("RUNTIME_ROOT") || has("RUNTIME_SUBDIRECTORY") || has("RUNTIME_APPDIRECTORY") || u.defaults {
			dir := filepath.Join(value("RUNTIME_ROOT"), value("RUNTIME_SUBDIRECTORY"), value("RUNTIME_APPDIRECTORY"))
			u.set("--policy", dir, !has("RUNTIME_ROOT") || !has("RUNTIME_APPDIRECTORY"), "CONFIG_TYPE", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY")
			// Upstream loads every file below its runtime directory.
			u.set("--policy-tree", "true", !has("RUNTIME_ROOT") || !has("RUNTIME_APPDIRECTORY"), "CONFIG_TYPE", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY")
		}
		u.notXDS(set) // xds.go
	case "GRPC_XDS_SOTW":
		errs = append(errs, u.xds(set)...) // xds.go
		for _, name := range []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"} {
			if has(name) { // Envoy Gateway sets them beside GRPC_XDS_SOTW
				u.ignore(name, "CONFIG_TYPE is GRPC_XDS_SOTW: the policy comes over xDS")
			}
		}
	default:
		bad("CONFIG_TYPE", "want FILE or GRPC_XDS_SOTW")
	}

	// The store.
	switch bt := strings.ToLower(value("BACKEND_TYPE")); bt {
	case "", "redis":
		if !has("REDIS_URL") {
			// Upstream's default REDIS_URL is a unix socket (nutcracker's):
			// it counts in Redis. Here that would be per-process counters,
			// N replicas each enforcing the whole limit: refused.
			switch {
			case has("BACKEND_TYPE"):
				u.noStore = "BACKEND_TYPE=redis needs REDIS_URL (host:port of the Redis to count in)"
			case u.defaults:
				u.noStore = "REDIS_URL is not set, and envoyproxy/ratelimit's variables configure this process: upstream would count in the Redis at its default unix socket"
			}
			break
		}
		raw, err := redisURL(set, boolean("REDIS_TLS"))
		if err != nil {
			errs = append(errs, err)
			break
		}
		u.set("--store", "redis", false, "BACKEND_TYPE", "REDIS_URL")
		u.set("--redis-url", raw, false, "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_POOL_SIZE", "REDIS_AUTH", "REDIS_TLS")
	case "memcache":
		bad("BACKEND_TYPE", "throttlekit has no Memcache store: use Redis (REDIS_URL) or THROTTLEKIT_STORE=memory")
	default:
		bad("BACKEND_TYPE", "want redis")
	}
	// Redis over TLS: upstream reads these only with REDIS_TLS=true.
	for _, v := range [][2]string{{"REDIS_TLS_CACERT", "--redis-tls-ca"}, {"REDIS_TLS_CLIENT_CERT", "--redis-tls-cert"},
		{"REDIS_TLS_CLIENT_KEY", "--redis-tls-key"}, {"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "--redis-tls-skip-hostname-verification"}} {
		switch {
		case !has(v[0]):
		case !boolean("REDIS_TLS"):
			u.ignore(v[0], "REDIS_TLS is not true")
		case v[0] == "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION":
			if boolean(v[0]) {
				u.set(v[1], "true", false, v[0])
			} else {
				u.seen[v[0]] = true // false: the host name is verified, as asked
				u.taken = append(u.taken, v[0])
			}
		default:
			u.set(v[1], set[v[0]], false, v[0])
		}
	}

	// TLS on the gRPC listener.
	tlsVars := []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"}
	if boolean("GRPC_SERVER_USE_TLS") {
		if !has("GRPC_SERVER_TLS_CERT") || !has("GRPC_SERVER_TLS_KEY") {
			bad("GRPC_SERVER_USE_TLS", "needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY (the server's certificate chain and key, PEM files)")
		}
		for i, f := range []string{"--grpc-tls-cert", "--grpc-tls-key", "--grpc-tls-client-ca", "--grpc-tls-client-san"} {
			if has(tlsVars[i]) {
				u.set(f, set[tlsVars[i]], false, "GRPC_SERVER_USE_TLS", tlsVars[i])
			}
		}
	} else {
		if has("GRPC_SERVER_USE_TLS") {
			u.seen["GRPC_SERVER_USE_TLS"] = true // false: plaintext, as asked
			u.taken = append(u.taken, "GRPC_SERVER_USE_TLS")
		}
		for _, name := range tlsVars {
			if has(name) {
				u.ignore(name, "GRPC_SERVER_USE_TLS is not true")
			}
		}
	}

	// Switches.
	for _, s := range []struct{ name, flag string }{
		{"SHADOW_MODE", "--shadow"},
		{"LIMIT_RESPONSE_HEADERS_ENABLED", "--response-headers"},
		{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "--healthcheck-needs-policy"},
		{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "--healthcheck-needs-store"},
	} {
		if has(s.name) {
			u.set(s.flag, strconv.FormatBool(boolean(s.name)), false, s.name)
		}
	}

	// Prometheus: upstream serves it on a listener of its own.
	if boolean("USE_PROMETHEUS") {
		addr := value("PROMETHEUS_ADDR")
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad("PROMETHEUS_ADDR", "want host:port or :port (e.g. :19001)")
		} else {
			u.set("--metrics-addr", addr, !has("PROMETHEUS_ADDR"), "USE_PROMETHEUS", "PROMETHEUS_ADDR")
		}
		// Upstream's names too, so its dashboards and alerts keep working.
		u.set("--upstream-metrics", "true", false, "USE_PROMETHEUS")
	} else {
		if has("USE_PROMETHEUS") {
			u.seen["USE_PROMETHEUS"] = true // false: no listener of its own, as asked
			u.taken = append(u.taken, "USE_PROMETHEUS")
		}
		if has("PROMETHEUS_ADDR") {
			u.ignore("PROMETHEUS_ADDR", "USE_PROMETHEUS is not true")
		}
	}

	// Tracing (tracing.go).
	errs = append(errs, u.tracing(set, value)...)

	// What is left is ignored, with the table's reason.
	for _, v := range vars {
		if has(v.name) && !u.seen[v.name] {
			why := v.note
			switch {
			case v.flag == "--redis-url" || v.flag == "--store":
				why = "takes effect only with REDIS_URL"
			case v.flag != "": // taken only with others
				why = "takes effect only with " + strings.Join(companions(v.flag, v.name), ", ")
			}
			u.ignore(v.name, why)
		}
	}
	return u, errors.Join(errs...)
}

// companions are the other variables that make flag.
func companions(flag, name string) []string {
	var out []string
	for _, v := range vars {
		if v.flag == flag && v.name != name {
			out = append(out, v.name)
		}
	}
	return out
}

// set records that the variables from (those of them set) make flag
// value; byDefault: an upstream default made it too.
// Took reports whether Apply took the variable name (set, and its flag not
// given). A nil u took nothing.
func (u *Env) Took(name string) bool { return u != nil && slices.Contains(u.taken, name) }

// From returns the variables whose values set flag (e.g. "--grpc-tls-cert"),
// when Apply set it from them; nil otherwise.
func (u *Env) From(flag string) []string {
	if u == nil {
		return nil
	}
	for _, fv := range u.flags {
		if fv.flag == flag && len(fv.from) > 0 && slices.Contains(u.taken, fv.from[0]) {
			return fv.from
		}
	}
	return nil
}

func (u *Env) set(flag, value string, byDefault bool, from ...string) {
	var used []string
	for _, name := range from {
		if _, ok := u.env[name]; ok {
			used = append(used, name)
			u.seen[name] = true
		}
	}
	u.flags = append(u.flags, flagValue{flag: flag, value: value, from: used, byDefault: byDefault && u.defaults})
}

// ignore records that serve does not honour the variable name, and why.
func (u *Env) ignore(name, why string) {
	u.seen[name] = true
	u.ignored = append(u.ignored, ignoredVar{name, why})
}

// Apply sets on fs every flag u makes that fs does not already have set
// (serve gives flags on the command line or by their THROTTLEKIT_* twins:
// both win over upstream's variables). A flag fs lacks, or a value it
// refuses, is an error naming the flag and the variables that made it.
func (u *Env) Apply(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	if u.noStore != "" && !given["store"] {
		errs = append(errs, fmt.Errorf("%s; throttlekit does not fall back to in-memory counters (each replica would enforce the whole limit): set REDIS_URL, or choose them with --store memory (THROTTLEKIT_STORE=memory)", u.noStore))
	}
	for _, fv := range u.flags {
		name := strings.TrimPrefix(fv.flag, "--")
		if given[name] {
			for _, v := range fv.from {
				if !slices.ContainsFunc(u.given, func(g ignoredVar) bool { return g.name == v }) {
					u.given = append(u.given, ignoredVar{v, fv.flag + " was given"})
				}
			}
			continue
		}
		if err := fs.Set(name, fv.value); err != nil {
			from := fv.from
			if len(from) == 0 {
				from = []string{"upstream's default"}
			}
			errs = append(errs, fmt.Errorf("%s (from %s): %v", fv.flag, strings.Join(from, ", "), err))
			continue
		}
		for _, v := range fv.from {
			if !slices.Contains(u.taken, v) {
				u.taken = append(u.taken, v)
			}
		}
		if fv.byDefault {
			u.applied = append(u.applied, fv.flag+" "+fv.value)
		}
	}
	return errors.Join(errs...)
}

// Log says in one line, at level info, which upstream variables serve
// took, which it ignored and why, which a flag overrode (call it after
// Apply), and which upstream defaults apply. Never a value: REDIS_AUTH is
// one. A nil u, or one that took, ignored and defaulted nothing, logs
// nothing.
func (u *Env) Log(log *slog.Logger) {
	if u == nil || (len(u.taken) == 0 && len(u.ignored) == 0 && len(u.given) == 0 && !u.defaults) {
		return
	}
	why := func(vs []ignoredVar) string {
		parts := make([]string, len(vs))
		for i, v := range vs {
			parts[i] = v.name + " (" + v.why + ")"
		}
		return strings.Join(parts, "; ")
	}
	attrs := []any{"took", strings.Join(u.taken, ", ")}
	if len(u.ignored) > 0 {
		attrs = append(attrs, "ignored", why(u.ignored))
	}
	if len(u.given) > 0 {
		attrs = append(attrs, "overridden", why(u.given))
	}
	if u.defaults && len(u.applied) > 0 {
		attrs = append(attrs, "upstream_defaults", "upstream's defaults, because its variables configure this process: "+strings.Join(u.applied, ", "))
	}
	log.Info("envoyproxy/ratelimit environment", attrs...)
}
