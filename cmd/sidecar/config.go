package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/internal/upstreamenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
)

// maxMaxKeys bounds --max-keys: 16M keys, about 8 GB of L1 per rule.
const maxMaxKeys = 1 << 24

// envPrefix starts the environment twin of every flag: --grpc-addr is also
// THROTTLEKIT_GRPC_ADDR. A flag on the command line wins over its twin.
const envPrefix = "THROTTLEKIT_"

// serveConfig is everything `serve` is told, validated.
type serveConfig struct {
	policyDir       string
	policyTree      bool // every file below policyDir (policy.LoadTree)
	store           string
	redisURL        string
	grpcAddr        string
	httpAddr        string
	metricsAddr     string // a listener of /metrics alone (metricslistener.go); "" for none
	nodeID          string
	logFormat       string
	logLevel        string
	responseHeaders bool
	shadow          bool
	storeTimeout    time.Duration
	waitReplicas    int // --redis-wait-replicas
	maxKeys         int // --max-keys
	// storeProbeInterval is how often the background probe asks the store
	// whether it answers (store_up, /readyz, grpc.health.v1).
	storeProbeInterval time.Duration
	drainTimeout       time.Duration
	reloadDebounce     time.Duration
	messageTimeout     time.Duration
	// region, federationURL, federationTimeout and federationProbe join
	// a federation (mode: federated); region empty for none.
	region            string
	federationURL     string
	federationTimeout time.Duration
	federationProbe   time.Duration
	// postgresURL is the PostgreSQL distributed gates with coordinator:
	// postgres meet in; empty for none.
	postgresURL string
	// grpc are the gRPC server's limits (grpcserver.go).
	grpc grpcLimits
	// tls is TLS on the listeners (tlsflags.go); zero: plaintext.
	tls listenerTLS
	// redisTLS is what a rediss:// --redis-url dials with (redistls.go).
	redisTLS redisTLS
	// twins names the THROTTLEKIT_* variable that gave each flag ("--x")
	// its value, when one did (named).
	twins map[string]string
	// xds, when its url is set, takes the policy from an xDS management
	// server instead of policyDir (xdsflags.go).
	xds xdsConfig
	// tracing exports OpenTelemetry spans (tracingflags.go).
	tracing tracingConfig
	// rlqs serves the Rate Limit Quota Service (rlqsflags.go); off by default.
	rlqs rlqsConfig
	// healthcheckPolicy and healthcheckStore: what /healthcheck, upstream's
	// health check, requires besides not shutting down (upstream_health.go).
	healthcheckPolicy, healthcheckStore bool
	// upstreamMetrics: /metrics also serves envoyproxy/ratelimit's
	// rate-limit metric names (telemetry.UpstreamCollector).
	upstreamMetrics bool
	// readyNeedsStore: /readyz and grpc.health.v1 also need the store to
	// answer (by default they mean "can answer": each rule answers a store
	// outage by its own failure mode).
	readyNeedsStore bool
	// upstreamDefaults applies envoyproxy/ratelimit's defaults even when
	// none of its variables is set; upstream is what serve took from them
	// (internal/upstreamenv), for the start log.
	upstreamDefaults bool
	upstream         *upstreamenv.Env
}

func parseServe(args []string, getenv func(string) string, stderr io.Writer) (*serveConfig, error) {
	c, _, err := parseServeFor("serve", args, getenv, stderr)
	return c, err
}

// parseServeFor reads serve's flags and environment for command, serve
// or validate (which takes the same, and policy directories after them:
// returned as rest; serve takes none).
func parseServeFor(command string, args []string, getenv func(string) string, stderr io.Writer) (c *serveConfig, rest []string, err error) {
	host, _ := os.Hostname()
	c = &serveConfig{}
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.policyDir, "policy", "./config", "directory of policy *.yaml files (one domain per file), watched for changes")
	fs.BoolVar(&c.policyTree, "policy-tree", false, "read every file below --policy, subdirectories included and whatever the extension, as envoyproxy/ratelimit reads its runtime directory (its RUNTIME_* variables set this)")
	fs.StringVar(&c.store, "store", "memory", "where counters live: memory (this process only) or redis (shared by the fleet)")
	fs.StringVar(&c.redisURL, "redis-url", "redis://127.0.0.1:6379/0", "Redis to use with --store redis: redis:// or rediss:// (TLS); ?master_name=NAME for Sentinel (the host is a sentinel, more with &addr=); redis+cluster:// or repeated &addr= for Cluster")
	fs.StringVar(&c.grpcAddr, "grpc-addr", "127.0.0.1:8081", "gRPC listen address (RateLimitService, health, reflection); loopback unless told otherwise")
	fs.StringVar(&c.httpAddr, "http-addr", "127.0.0.1:8080", "HTTP listen address (/metrics, /healthz, /readyz, /debug/policy, /json)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "also serve /metrics, alone and in plain HTTP, on this address (host:port or :port), as envoyproxy/ratelimit's PROMETHEUS_ADDR with USE_PROMETHEUS=true (Envoy Gateway scrapes :19001); /metrics stays on --http-addr too")
	fs.StringVar(&c.nodeID, "node-id", host, "this sidecar's name in logs and in the fleet of each distributed concurrency gate: unique per sidecar (a pod name)")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&c.responseHeaders, "response-headers", false, "add RateLimit-Limit, -Remaining and -Reset headers to responses")
	fs.BoolVar(&c.shadow, "shadow", false, "global shadow mode: count every rule, enforce none")
	fs.DurationVar(&c.storeTimeout, "store-timeout", 50*time.Millisecond, "longest a request waits for the store (all its limits together) before on_store_error decides")
	fs.IntVar(&c.waitReplicas, "redis-wait-replicas", 0, "strict and cached_deny checks wait (Redis WAIT, up to --store-timeout) until this many replicas hold them, so a Sentinel failover loses no admission a check answered; fewer in time fail the check to on_store_error. 0: no wait. Not with redis+cluster://")
	fs.IntVar(&c.maxKeys, "max-keys", gale.DefaultMaxKeys, "most keys each rule keeps in this process (cached denials, leased credits): past it the least recently used key is evicted and its unused credits go back to the store; about 500 bytes a key")
	fs.DurationVar(&c.storeProbeInterval, "store-probe-interval", time.Second, "how often to ask the store whether it answers (each probe waits at most --store-timeout): drives throttlekit_store_up (and /readyz and grpc.health.v1 with --ready-needs-store)")
	fs.BoolVar(&c.upstreamMetrics, "upstream-metrics", false, "/metrics also serves envoyproxy/ratelimit's rate-limit metrics under the names its default mapping gives them (ratelimit_service_rate_limit_{total_hits,within_limit,near_limit,over_limit,shadow_mode} by domain, key1, key2), so dashboards and alerts written for it keep working; on with upstream's USE_PROMETHEUS=true")
	fs.BoolVar(&c.readyNeedsStore, "ready-needs-store", false, "/readyz and grpc.health.v1 also fail while the store does not answer. Off: ready means a policy is loaded and the process answers, each rule answering a store outage by its failure mode; as a native sidecar, readiness counts toward the application pod's, so a Redis outage would take the application out of its Service")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 10*time.Second, "on SIGTERM, how long in-flight calls may take to finish")
	fs.DurationVar(&c.messageTimeout, "extproc-message-timeout", 200*time.Millisecond, "Envoy's ext_proc message_timeout: concurrency gates' queue timeouts must stay below it")
	fs.DurationVar(&c.reloadDebounce, "reload-debounce", 200*time.Millisecond, "quiet time after a policy change before reloading")
	fs.StringVar(&c.region, "region", "", "this process's region in a federation (mode: federated rules share one budget across regions); needs --federation-url")
	fs.StringVar(&c.federationURL, "federation-url", "", "the cross-region coordinator every region shares: redis://, rediss://, redis+cluster:// or postgres://; needs --region")
	fs.DurationVar(&c.federationTimeout, "federation-timeout", 500*time.Millisecond, "longest a lease from the cross-region coordinator may take (a request with a federated limit waits at most this for it)")
	fs.StringVar(&c.postgresURL, "postgres-url", "", "the PostgreSQL where distributed concurrency gates with coordinator: postgres meet (postgres://user@host:5432/db; the password is never logged)")
	fs.DurationVar(&c.federationProbe, "federation-probe-after", time.Second, "after a failed lease, how long federated rules leave the coordinator alone (answering by their outage mode) before asking it again")
	c.grpc.define(fs)
	c.tls.define(fs)
	c.redisTLS.define(fs)
	c.xds.define(fs)
	c.tracing.define(fs)
	c.rlqs.define(fs)
	fs.BoolVar(&c.healthcheckPolicy, "healthcheck-needs-policy", false, "/healthcheck (envoyproxy/ratelimit's health check) fails until a policy is loaded")
	fs.BoolVar(&c.healthcheckStore, "healthcheck-needs-store", false, "/healthcheck fails while the store does not answer (a liveness probe on it then restarts replicas in a store outage)")
	fs.BoolVar(&c.upstreamDefaults, "upstream-defaults", false, "take envoyproxy/ratelimit's defaults (listen on all interfaces, policy in $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config) even when none of its variables is set; on when the binary runs as ratelimit (/bin/ratelimit)")
	fs.Usage = func() {
		if command == "validate" {
			fmt.Fprint(stderr, validateUsage)
		} else {
			fmt.Fprint(stderr, "usage: throttlekit serve [flags]\n\n")
		}
		fmt.Fprintf(stderr, "Every flag has an environment twin: --grpc-addr is %sGRPC_ADDR.\n"+
			"Unset, envoyproxy/ratelimit's variable decides (GRPC_PORT, ...), then %sGRPC_ADDR, a default only.\n\n", envPrefix, envDefaultPrefix)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil { // one-line errors, durations with an example (flags.go)
		return nil, nil, err
	}
	if fs.NArg() > 0 && command == "serve" {
		return nil, nil, fmt.Errorf("serve takes no arguments (got %q): did you mean --policy %s?", fs.Args(), fs.Arg(0))
	}
	rest = fs.Args()
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if err := applyEnv(fs, getenv); err != nil {
		return nil, nil, err
	}
	c.twins = map[string]string{}
	fs.Visit(func(f *flag.Flag) {
		if !given[f.Name] {
			c.twins["--"+f.Name] = envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		}
	})
	// envoyproxy/ratelimit's variables, for the flags still not given
	// (internal/upstreamenv, which reads no environment: it is handed
	// the variables its table names).
	environ := map[string]string{}
	for _, name := range upstreamenv.Names() {
		environ[name] = getenv(name)
	}
	up, err := upstreamenv.Translate(environ, c.upstreamDefaults)
	if err == nil {
		err = up.Apply(fs)
	}
	if err == nil {
		err = applyEnvDefaults(fs, getenv) // below both: the image's defaults
	}
	if err != nil {
		return nil, nil, err
	}
	c.upstream = up
	var flags []string
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, "--"+f.Name) })
	return c, rest, c.namedErr(c.validate(), flags...)
}

// named is flag as a message names it for the person who set it: with the
// variable that gave its value when one did (its THROTTLEKIT_* twin, or
// envoyproxy/ratelimit's), which is what they would look for.
func (c *serveConfig) named(flag string) string {
	if v := c.twins[flag]; v != "" {
		return flag + " (" + v + ")"
	}
	if from := c.upstream.From(flag); len(from) > 0 {
		return flag + " (from " + strings.Join(from, ", ") + ")"
	}
	return flag
}

// namedErr is err with each of flags it mentions named as c.named does.
func (c *serveConfig) namedErr(err error, flags ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, f := range flags {
		if n := c.named(f); n != f {
			msg = replaceFlag(msg, f, n)
		}
	}
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}

// replaceFlag replaces flag in msg by with where it stands as a word (not
// --grpc-tls-cert inside --grpc-tls-certificate).
func replaceFlag(msg, flag, with string) string {
	var b strings.Builder
	for {
		i := strings.Index(msg, flag)
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		end := i + len(flag)
		b.WriteString(msg[:i])
		if end < len(msg) && (msg[end] == '-' || msg[end] >= 'a' && msg[end] <= 'z') {
			b.WriteString(flag)
		} else {
			b.WriteString(with)
		}
		msg = msg[end:]
	}
}

// environ lists the process's environment variable names (the
// misspelling check; tests set variables with t.Setenv).
var environ = func() []string {
	var names []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	return names
}

// unknownTwins refuses every THROTTLEKIT_* variable in the environment that
// is no flag's twin (THROTTLEKIT_<FLAG> or THROTTLEKIT_DEFAULT_<FLAG>): a
// misspelling would otherwise be ignored without a word, and a store or a
// limit silently left at its default. It suggests the nearest twin.
func unknownTwins(fs *flag.FlagSet) error {
	twins := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		n := strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		twins[envPrefix+n], twins[envDefaultPrefix+n] = true, true
	})
	var errs []error
	for _, name := range environ() {
		if !strings.HasPrefix(name, envPrefix) || twins[name] {
			continue
		}
		best, dist := "", 4
		for t := range twins {
			if d := editDistance(name, t); d < dist || d == dist && t < best {
				best, dist = t, d
			}
		}
		hint := "no flag has this twin: `throttlekit serve --help` lists the flags (--grpc-addr is THROTTLEKIT_GRPC_ADDR)"
		if best != "" {
			hint = "did you mean " + best + "?"
		}
		errs = append(errs, fmt.Errorf("environment variable %s is not a setting: %s", name, hint))
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// applyEnv sets every flag not given on the command line from its
// environment twin.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	if err := unknownTwins(fs); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" && !given[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %v", name, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// envDefaultPrefix starts a variable that sets a flag's default only:
// THROTTLEKIT_DEFAULT_GRPC_ADDR is --grpc-addr's value when neither the
// flag, nor THROTTLEKIT_GRPC_ADDR, nor envoyproxy/ratelimit's variables
// set it. The image sets its defaults so (listen on all interfaces, the
// example policies): a manifest that runs it as /bin/ratelimit with
// upstream's variables gets what they say.
const envDefaultPrefix = envPrefix + "DEFAULT_"

// applyEnvDefaults sets every flag still unset from its
// THROTTLEKIT_DEFAULT_* variable.
func applyEnvDefaults(fs *flag.FlagSet, getenv func(string) string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := envDefaultPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" && !set[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %v", name, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

func (c *serveConfig) validate() error {
	var errs []error
	switch c.store {
	case "memory", "redis":
	default:
		errs = append(errs, fmt.Errorf("--store %q: want memory or redis", c.store))
	}
	switch c.logFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("--log-format %q: want text or json", c.logFormat))
	}
	if _, err := parseLevel(c.logLevel); err != nil {
		errs = append(errs, err)
	}
	for name, addr := range map[string]string{"--grpc-addr": c.grpcAddr, "--http-addr": c.httpAddr} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: want host:port (e.g. 127.0.0.1:8081): %v", name, addr, err))
		}
	}
	if _, port, _ := net.SplitHostPort(c.grpcAddr); c.grpcAddr == c.httpAddr && port != "0" {
		// Port 0 asks the kernel for a free port: two of them never clash.
		errs = append(errs, fmt.Errorf("--grpc-addr and --http-addr are both %s", c.grpcAddr))
	}
	if c.metricsAddr != "" {
		if _, port, err := net.SplitHostPort(c.metricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-addr %q: want host:port or :port (e.g. :19001): %v", c.metricsAddr, err))
		} else if port != "0" && (overlaps(c.metricsAddr, c.grpcAddr) || overlaps(c.metricsAddr, c.httpAddr)) {
			errs = append(errs, fmt.Errorf("--metrics-addr %s is also --grpc-addr or --http-addr: give it a port of its own", c.metricsAddr))
		}
	}
	if c.storeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--store-timeout %v: must be positive", c.storeTimeout))
	}
	switch {
	case c.waitReplicas < 0:
		errs = append(errs, fmt.Errorf("--redis-wait-replicas %d: must be ≥ 0", c.waitReplicas))
	case c.waitReplicas > 0 && c.store != "redis":
		errs = append(errs, fmt.Errorf("--redis-wait-replicas %d: needs --store redis (replicas are Redis's)", c.waitReplicas))
	}
	if c.maxKeys < 1 || c.maxKeys > maxMaxKeys {
		errs = append(errs, fmt.Errorf("--max-keys %d: want 1 to %d", c.maxKeys, maxMaxKeys))
	}
	if c.storeProbeInterval <= 0 {
		errs = append(errs, fmt.Errorf("--store-probe-interval %v: must be positive", c.storeProbeInterval))
	}
	switch {
	case c.region != "" && c.federationURL == "":
		errs = append(errs, errors.New("--region needs --federation-url: the coordinator the regions share (redis://... or postgres://...)"))
	case c.region == "" && c.federationURL != "":
		errs = append(errs, errors.New("--federation-url needs --region: this process's region name (e.g. eu-west-1)"))
	case c.region != "":
		if _, err := federationScheme(c.federationURL); err != nil {
			errs = append(errs, err)
		}
		if len(c.region) > 64 || strings.ContainsAny(c.region, "/\x00") {
			errs = append(errs, fmt.Errorf("--region %q: at most 64 bytes, without / or NUL", c.region))
		}
	}
	if c.postgresURL != "" {
		if u, err := url.Parse(c.postgresURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			errs = append(errs, fmt.Errorf("--postgres-url %s: want postgres://user@host:5432/db", Redact(c.postgresURL)))
		}
	}
	if c.nodeID == "" {
		errs = append(errs, errors.New("--node-id is empty (and the hostname unknown): name this sidecar, uniquely in its fleet"))
	}
	if c.federationTimeout <= 0 || c.federationProbe <= 0 {
		errs = append(errs, errors.New("--federation-timeout and --federation-probe-after must be positive"))
	}
	if err := c.grpc.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.tls.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.redisTLS.validate(c.store, c.redisURL); err != nil {
		errs = append(errs, err)
	}
	if err := c.xds.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.tracing.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.rlqs.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.drainTimeout <= 0 || c.reloadDebounce < 0 {
		errs = append(errs, errors.New("--drain-timeout must be positive and --reload-debounce not negative"))
	}
	return errors.Join(errs...)
}

// overlaps reports whether listeners on host:port addresses a and b would
// take the same port: the same port, on the same host or on all
// interfaces (":19001", "0.0.0.0:8080").
func overlaps(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb {
		return false
	}
	everywhere := func(h string) bool { return h == "" || net.ParseIP(h).IsUnspecified() }
	return ha == hb || everywhere(ha) || everywhere(hb)
}
