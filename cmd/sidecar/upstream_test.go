package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// The translation of envoyproxy/ratelimit's variables into flags is tested
// in internal/upstreamenv; these tests check serve's side: that what it
// makes reaches serveConfig, below the command line and the THROTTLEKIT_*
// twins, and passes serve's own checks.

// parseUpstream parses serve's command line args under the environment e.
func parseUpstream(t *testing.T, args []string, e map[string]string) *serveConfig {
	t.Helper()
	c, err := parseServe(args, env(memoryStore(e)), io.Discard)
	if err != nil {
		t.Fatalf("%v %v: %v", args, e, err)
	}
	return c
}

// TestUpstreamVariablesReachServeConfig: the flags upstream's variables
// make are serve's configuration, upstream's defaults included.
func TestUpstreamVariablesReachServeConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		check func(c *serveConfig) bool
	}{
		{"no variables: throttlekit's defaults", nil, func(c *serveConfig) bool {
			return c.grpcAddr == "127.0.0.1:8081" && c.httpAddr == "127.0.0.1:8080" && c.policyDir == "./config" && c.store == "memory" && c.grpc.maxConnectionAge == 0
		}},
		{"GRPC_PORT: upstream's defaults, all interfaces", map[string]string{"GRPC_PORT": "9091"}, func(c *serveConfig) bool {
			return c.grpcAddr == "0.0.0.0:9091" && c.httpAddr == "0.0.0.0:8080" && c.policyDir == "/srv/runtime_data/current/config" && c.grpc.maxConnectionAge == 24*time.Hour
		}},
		{"REDIS_URL with REDIS_AUTH, REDIS_TLS, REDIS_POOL_SIZE", map[string]string{"REDIS_URL": "redis.infra:6380", "REDIS_AUTH": "app:s3cret", "REDIS_TLS": "true", "REDIS_POOL_SIZE": "20"}, func(c *serveConfig) bool {
			return c.store == "redis" && c.redisURL == "rediss://app:s3cret@redis.infra:6380/0?pool_size=20"
		}},
		{"GRPC_SERVER_USE_TLS", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "GRPC_SERVER_TLS_KEY": "/certs/tls.key",
			"GRPC_CLIENT_TLS_CACERT": "/certs/ca.crt", "GRPC_CLIENT_TLS_SAN": "envoy"}, func(c *serveConfig) bool {
			return c.tls.CertFile == "/certs/tls.crt" && c.tls.KeyFile == "/certs/tls.key" && c.tls.ClientCAFile == "/certs/ca.crt" && c.tls.ClientSAN == "envoy" && !c.tls.httpToo
		}},
		{"switches", map[string]string{"SHADOW_MODE": "true", "LIMIT_RESPONSE_HEADERS_ENABLED": "1", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true"}, func(c *serveConfig) bool {
			return c.shadow && c.responseHeaders && c.healthcheckPolicy && c.healthcheckStore
		}},
		{"USE_PROMETHEUS and PROMETHEUS_ADDR (Envoy Gateway's)", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001"}, func(c *serveConfig) bool {
			return c.metricsAddr == ":19001" && c.httpAddr == "0.0.0.0:8080"
		}},
		{"TRACING_ENABLED: upstream's tracing defaults", map[string]string{"TRACING_ENABLED": "true"}, func(c *serveConfig) bool {
			return c.tracing.Enabled && c.tracing.Protocol == "http" && c.tracing.ServiceName == "RateLimit"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c := parseUpstream(t, nil, tc.env); !tc.check(c) {
				t.Errorf("%v: got %+v", tc.env, *c)
			}
		})
	}
}

// TestFlagsWinOverUpstreamVariables: the command line, then the
// THROTTLEKIT_* twin, then the upstream variable; the start log names the
// variables a flag overrode.
func TestFlagsWinOverUpstreamVariables(t *testing.T) {
	e := map[string]string{"GRPC_PORT": "9091", "PORT": "9090", "RUNTIME_ROOT": "/data", "LOG_LEVEL": "debug",
		"THROTTLEKIT_HTTP_ADDR": "127.0.0.1:7000"}
	c := parseUpstream(t, []string{"--grpc-addr", "127.0.0.1:6000", "--log-level", "error"}, e)
	if c.grpcAddr != "127.0.0.1:6000" || c.logLevel != "error" {
		t.Errorf("the command line lost to upstream variables: %s %s", c.grpcAddr, c.logLevel)
	}
	if c.httpAddr != "127.0.0.1:7000" {
		t.Errorf("THROTTLEKIT_HTTP_ADDR lost to PORT: %s", c.httpAddr)
	}
	if c.policyDir != "/data/config" {
		t.Errorf("RUNTIME_ROOT not taken: %s", c.policyDir)
	}
	var b bytes.Buffer
	c.logLevel = "info"
	c.upstream.Log(newLogger(c, &b))
	if want := "GRPC_PORT (--grpc-addr was given); PORT (--http-addr was given); LOG_LEVEL (--log-level was given)"; !strings.Contains(b.String(), want) {
		t.Errorf("the start log does not say %q:\n%s", want, b.String())
	}
}

// TestBadUpstreamValuesSayWhatToFix: a value upstream's variables carry
// that serve's own checks refuse names the flag and the variables it came
// from. (Values the translation
// refuses: internal/upstreamenv's TestBadValuesSayWhatToFix.)
func TestBadUpstreamValuesSayWhatToFix(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"GRPC_PORT": "eighty"}, `GRPC_PORT="eighty": want a port number`},
		{map[string]string{"LOG_FORMAT": "xml"}, `--log-format (from LOG_FORMAT) "xml": want text or json`},
		{map[string]string{"REDIS_URL": "redis://:hunter2@r:6379/0"}, "REDIS_URL redis://:xxxxx@r:6379/0: want host:port"},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "forever"}, "--grpc-max-connection-age (from GRPC_MAX_CONNECTION_AGE)"},
		{map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":8080"}, "--metrics-addr (from USE_PROMETHEUS, PROMETHEUS_ADDR) :8080 is also"},
	} {
		_, err := parseServe(nil, env(memoryStore(tc.env)), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to mention %q", tc.env, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%v: the error shows the password: %v", tc.env, err)
		}
	}
}

// TestUpstreamRedisURLsConnect: every URL the Redis variables make is one
// the Redis client takes, and Redact hides REDIS_AUTH in each.
func TestUpstreamRedisURLsConnect(t *testing.T) {
	for _, e := range []map[string]string{
		{"REDIS_URL": "r:6379", "REDIS_AUTH": "hunter2"},
		{"REDIS_URL": "r:6379", "REDIS_AUTH": "app:hunter2", "REDIS_TLS": "true", "REDIS_POOL_SIZE": "3"},
		{"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,s-a:26379,s-b:26379", "REDIS_AUTH": "app:hunter2"},
		{"REDIS_TYPE": "cluster", "REDIS_URL": "n1:6379,n2:6379", "REDIS_AUTH": "hunter2", "REDIS_TLS": "true"},
	} {
		raw := parseUpstream(t, nil, e).redisURL
		c, err := newRedisClient(raw, 50*time.Millisecond, nil, nil)
		if err != nil {
			t.Errorf("%v: %s refused: %v", e, Redact(raw), err)
			continue
		}
		c.Close()
		if strings.Contains(Redact(raw), "hunter2") {
			t.Errorf("Redact(%s) shows the password", Redact(raw))
		}
	}
}

func TestRunAsRatelimitServes(t *testing.T) {
	for _, tc := range []struct{ argv, want []string }{
		{[]string{"/bin/ratelimit"}, []string{"serve", "--upstream-defaults"}},
		{[]string{"ratelimit", "--log-level", "debug"}, []string{"serve", "--upstream-defaults", "--log-level", "debug"}},
		{[]string{"/bin/ratelimit", "version"}, []string{"version"}},
		{[]string{"/throttlekit", "serve"}, []string{"serve"}},
		{[]string{"/throttlekit"}, []string{}},
	} {
		if got := commandLine(tc.argv); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%v: run gets %q, want %q", tc.argv, got, tc.want)
		}
	}
	c := parseUpstream(t, []string{"--upstream-defaults"}, nil)
	if c.grpcAddr != "0.0.0.0:8081" || c.httpAddr != "0.0.0.0:8080" || c.policyDir != "/srv/runtime_data/current/config" {
		t.Errorf("--upstream-defaults: %s %s %s", c.grpcAddr, c.httpAddr, c.policyDir)
	}
}

// TestUpstreamNeverFallsBackToMemory (issue 32, item 1): where upstream
// would count in Redis — BACKEND_TYPE=redis, or its variables configure
// the process, with REDIS_URL unset (upstream's default is a unix socket)
// — serve refuses to start, naming what to set, instead of serving on
// per-process counters (N replicas each enforcing the whole limit). Naming
// the memory store (--store memory, THROTTLEKIT_STORE=memory) or a Redis is
// fine; a misspelled THROTTLEKIT_* variable is refused, naming it.
func TestUpstreamNeverFallsBackToMemory(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string // "" for no error
	}{
		{"BACKEND_TYPE=redis, no REDIS_URL", nil, map[string]string{"BACKEND_TYPE": "redis"}, "BACKEND_TYPE=redis needs REDIS_URL"},
		{"upstream's variables, no REDIS_URL", nil, map[string]string{"GRPC_PORT": "8081", "RUNTIME_ROOT": "/data"}, "REDIS_URL is not set"},
		{"running as ratelimit, no REDIS_URL", []string{"--upstream-defaults"}, nil, "REDIS_URL is not set"},
		{"--store memory says so", []string{"--store", "memory"}, map[string]string{"BACKEND_TYPE": "redis"}, ""},
		{"THROTTLEKIT_STORE=memory says so", nil, map[string]string{"GRPC_PORT": "8081", "THROTTLEKIT_STORE": "memory"}, ""},
		{"a Redis", nil, map[string]string{"BACKEND_TYPE": "redis", "REDIS_URL": "r:6379"}, ""},
		{"common names alone keep the native default", nil, map[string]string{"PORT": "9090", "LOG_LEVEL": "debug"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseServe(tc.args, env(tc.env), io.Discard)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--store memory")):
				t.Fatalf("err = %v, want it to say %q and how to choose memory", err, tc.want)
			}
		})
	}
	t.Run("a misspelled THROTTLEKIT_ variable", func(t *testing.T) {
		t.Setenv("THROTTLEKIT_STOR", "redis")
		_, err := parseServe(nil, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "THROTTLEKIT_STOR") || !strings.Contains(err.Error(), "THROTTLEKIT_STORE") {
			t.Fatalf("err = %v, want THROTTLEKIT_STOR refused, suggesting THROTTLEKIT_STORE", err)
		}
	})
}
