package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// parseUpstream parses serve's command line args under the environment e.
func parseUpstream(t *testing.T, args []string, e map[string]string) *serveConfig {
	t.Helper()
	c, err := parseServe(args, env(e), io.Discard)
	if err != nil {
		t.Fatalf("%v %v: %v", args, e, err)
	}
	return c
}

// TestUpstreamVariablesSetFlags: each variable upstream reads sets the
// flag it means, with upstream's defaults for the rest of the process only
// when a variable only upstream uses is set.
func TestUpstreamVariablesSetFlags(t *testing.T) {
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
		{"GRPC_HOST and GRPC_PORT", map[string]string{"GRPC_HOST": "10.0.0.7", "GRPC_PORT": "9091"}, func(c *serveConfig) bool {
			return c.grpcAddr == "10.0.0.7:9091"
		}},
		{"PORT alone (a common name): its port, throttlekit's loopback", map[string]string{"PORT": "9090"}, func(c *serveConfig) bool {
			return c.httpAddr == "127.0.0.1:9090" && c.grpcAddr == "127.0.0.1:8081" && c.policyDir == "./config"
		}},
		{"HOST and PORT", map[string]string{"HOST": "127.0.0.2", "PORT": "9090"}, func(c *serveConfig) bool {
			return c.httpAddr == "127.0.0.2:9090"
		}},
		{"LOG_LEVEL alone stays on loopback", map[string]string{"LOG_LEVEL": "DEBUG"}, func(c *serveConfig) bool {
			return c.logLevel == "debug" && c.grpcAddr == "127.0.0.1:8081"
		}},
		{"LOG_LEVEL warning", map[string]string{"LOG_LEVEL": "warning"}, func(c *serveConfig) bool { return c.logLevel == "warn" }},
		{"LOG_LEVEL trace", map[string]string{"LOG_LEVEL": "trace"}, func(c *serveConfig) bool { return c.logLevel == "debug" }},
		{"LOG_LEVEL fatal", map[string]string{"LOG_LEVEL": "fatal"}, func(c *serveConfig) bool { return c.logLevel == "error" }},
		{"LOG_FORMAT", map[string]string{"LOG_FORMAT": "JSON"}, func(c *serveConfig) bool { return c.logFormat == "json" }},
		{"RUNTIME_ROOT and RUNTIME_SUBDIRECTORY", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit"}, func(c *serveConfig) bool {
			return c.policyDir == "/data/ratelimit/config"
		}},
		{"RUNTIME_APPDIRECTORY", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "rl", "RUNTIME_APPDIRECTORY": "limits"}, func(c *serveConfig) bool {
			return c.policyDir == "/data/rl/limits"
		}},
		{"CONFIG_TYPE FILE", map[string]string{"CONFIG_TYPE": "FILE"}, func(c *serveConfig) bool {
			return c.policyDir == "/srv/runtime_data/current/config"
		}},
		{"REDIS_URL single", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.infra:6379"}, func(c *serveConfig) bool {
			return c.store == "redis" && c.redisURL == "redis://redis.infra:6379/0"
		}},
		{"REDIS_URL with REDIS_AUTH, REDIS_TLS, REDIS_POOL_SIZE", map[string]string{"REDIS_URL": "redis.infra:6380", "REDIS_AUTH": "app:s3cret", "REDIS_TLS": "true", "REDIS_POOL_SIZE": "20"}, func(c *serveConfig) bool {
			return c.redisURL == "rediss://app:s3cret@redis.infra:6380/0?pool_size=20"
		}},
		{"REDIS_TYPE sentinel", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s-a:26379, s-b:26379", "REDIS_AUTH": "pw"}, func(c *serveConfig) bool {
			return c.redisURL == "redis://s-a:26379/0?addr=s-b%3A26379&master_name=mymaster&password=pw"
		}},
		{"REDIS_TYPE cluster", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "n1:6379,n2:6379,n3:6379", "REDIS_AUTH": "pw"}, func(c *serveConfig) bool {
			return c.redisURL == "redis+cluster://:pw@n1:6379?addr=n2%3A6379&addr=n3%3A6379"
		}},
		{"BACKEND_TYPE redis without REDIS_URL: memory", map[string]string{"BACKEND_TYPE": "redis", "REDIS_AUTH": "pw"}, func(c *serveConfig) bool {
			return c.store == "memory"
		}},
		{"GRPC_SERVER_USE_TLS", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "GRPC_SERVER_TLS_KEY": "/certs/tls.key",
			"GRPC_CLIENT_TLS_CACERT": "/certs/ca.crt", "GRPC_CLIENT_TLS_SAN": "envoy"}, func(c *serveConfig) bool {
			return c.tls == listenerTLS{certFile: "/certs/tls.crt", keyFile: "/certs/tls.key", clientCAFile: "/certs/ca.crt", clientSAN: "envoy"}
		}},
		{"TLS files without GRPC_SERVER_USE_TLS: plaintext, as upstream", map[string]string{"GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "GRPC_SERVER_TLS_KEY": "/certs/tls.key"}, func(c *serveConfig) bool {
			return !c.tls.enabled()
		}},
		{"GRPC_MAX_CONNECTION_AGE", map[string]string{"GRPC_MAX_CONNECTION_AGE": "1h"}, func(c *serveConfig) bool { return c.grpc.maxConnectionAge == time.Hour }},
		{"SHADOW_MODE", map[string]string{"SHADOW_MODE": "true"}, func(c *serveConfig) bool { return c.shadow }},
		{"LIMIT_RESPONSE_HEADERS_ENABLED", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "1"}, func(c *serveConfig) bool { return c.responseHeaders }},
		{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, func(c *serveConfig) bool { return c.healthcheckPolicy }},
		{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", map[string]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true"}, func(c *serveConfig) bool { return c.healthcheckStore }},
		{"USE_STATSD only: upstream's defaults, nothing else", map[string]string{"USE_STATSD": "false"}, func(c *serveConfig) bool {
			return c.grpcAddr == "0.0.0.0:8081" && c.store == "memory" && c.metricsAddr == ""
		}},
		{"USE_PROMETHEUS and PROMETHEUS_ADDR (Envoy Gateway's)", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001"}, func(c *serveConfig) bool {
			return c.metricsAddr == ":19001" && c.httpAddr == "0.0.0.0:8080"
		}},
		{"USE_PROMETHEUS alone: upstream's :9090", map[string]string{"USE_PROMETHEUS": "true"}, func(c *serveConfig) bool { return c.metricsAddr == ":9090" }},
		{"PROMETHEUS_ADDR without USE_PROMETHEUS: no listener, as upstream", map[string]string{"PROMETHEUS_ADDR": ":19001"}, func(c *serveConfig) bool { return c.metricsAddr == "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c := parseUpstream(t, nil, tc.env); !tc.check(c) {
				t.Errorf("%v: got %+v", tc.env, *c)
			}
		})
	}
}

// TestFlagsWinOverUpstreamVariables: the command line, then the
// THROTTLEKIT_* twin, then the upstream variable.
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
	var given []string
	for _, g := range c.upstream.given {
		given = append(given, g.name)
	}
	if strings.Join(given, ",") != "GRPC_PORT,PORT,LOG_LEVEL" {
		t.Errorf("overridden variables = %v, want GRPC_PORT, PORT, LOG_LEVEL", given)
	}
}

// TestEveryUpstreamVariableIsAccountedFor: set alone (with what it needs),
// each variable of the table is either taken, making the flag the table
// names, or ignored with the table's reason, or refused with an error
// naming it.
func TestEveryUpstreamVariableIsAccountedFor(t *testing.T) {
	sample := map[string]string{
		"HOST": "127.0.0.1", "PORT": "9090", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "9091", "GRPC_MAX_CONNECTION_AGE": "2h",
		"LOG_LEVEL": "info", "LOG_FORMAT": "json", "CONFIG_TYPE": "FILE", "RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "rl",
		"RUNTIME_APPDIRECTORY": "config", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "single", "REDIS_URL": "r:6379",
		"REDIS_POOL_SIZE": "5", "REDIS_AUTH": "pw", "REDIS_TLS": "true", "BACKEND_TYPE": "redis", "PROMETHEUS_ADDR": ":19001",
	}
	needs := map[string]map[string]string{
		"REDIS_SOCKET_TYPE": {"REDIS_URL": "r:6379"}, "REDIS_TYPE": {"REDIS_URL": "r:6379"}, "REDIS_POOL_SIZE": {"REDIS_URL": "r:6379"},
		"REDIS_AUTH": {"REDIS_URL": "r:6379"}, "REDIS_TLS": {"REDIS_URL": "r:6379"}, "BACKEND_TYPE": {"REDIS_URL": "r:6379"},
		"GRPC_SERVER_USE_TLS": {"GRPC_SERVER_TLS_CERT": "/c", "GRPC_SERVER_TLS_KEY": "/k"},
		"PROMETHEUS_ADDR":     {"USE_PROMETHEUS": "true"},
	}
	sample["TRACING_EXPORTER_PROTOCOL"], sample["TRACING_SAMPLING_RATE"] = "grpc", "0.5"
	for _, name := range []string{"TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE"} {
		needs[name] = map[string]string{"TRACING_ENABLED": "true"}
	}
	for _, name := range []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"} {
		needs[name] = map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c", "GRPC_SERVER_TLS_KEY": "/k", "GRPC_CLIENT_TLS_CACERT": "/ca"}
	}
	for _, v := range upstreamVars { // the xDS variables apply with CONFIG_TYPE=GRPC_XDS_SOTW (xdsflags.go)
		if strings.HasPrefix(v.name, "CONFIG_GRPC_XDS_") || strings.HasPrefix(v.name, "XDS_CLIENT_") || v.name == "FORCE_START_WITHOUT_INITIAL_CONFIG" {
			needs[v.name] = map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true"}
		}
	}
	refused := map[string]bool{"GRPC_UDS": true, "REDIS_TLS_CLIENT_CERT": true, "REDIS_TLS_CLIENT_KEY": true, "REDIS_TLS_CACERT": true}
	for _, v := range upstreamVars {
		t.Run(v.name, func(t *testing.T) {
			e := map[string]string{}
			for k, val := range needs[v.name] {
				e[k] = val
			}
			e[v.name] = sample[v.name]
			if e[v.name] == "" {
				e[v.name] = "x" // the value of a variable serve does not read
				if v.def == "true" || v.def == "false" {
					e[v.name] = "true"
				}
			}
			u, err := readUpstream(env(e), false)
			switch {
			case refused[v.name]:
				if err == nil || !strings.Contains(err.Error(), v.name) {
					t.Fatalf("refused variable: err = %v, want one naming it", err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			made := false
			for _, fv := range u.flags {
				if fv.flag == v.flag && strings.Contains(strings.Join(fv.from, " "), v.name) {
					made = true
				}
			}
			var why string
			for _, ig := range u.ignored {
				if ig.name == v.name {
					why = ig.why
				}
			}
			switch {
			case v.flag != "" && !made:
				t.Errorf("the table says it sets %s; it did not (ignored: %q)", v.flag, why)
			case v.flag == "" && why != v.note:
				t.Errorf("ignored with %q, the table says %q", why, v.note)
			}
		})
	}
}

func TestBadUpstreamValuesSayWhatToFix(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"GRPC_PORT": "eighty"}, `GRPC_PORT="eighty": want a port number`},
		{map[string]string{"PORT": "70000"}, `PORT="70000": want a port number`},
		{map[string]string{"LOG_LEVEL": "loud"}, `LOG_LEVEL="loud": want trace, debug`},
		{map[string]string{"LOG_FORMAT": "xml"}, `--log-format "xml": want text or json`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "maybe"}, `CONFIG_GRPC_XDS_SERVER_USE_TLS="maybe": want true or false`},
		{map[string]string{"CONFIG_TYPE": "ETCD"}, `CONFIG_TYPE="ETCD": want FILE or GRPC_XDS_SOTW`},
		{map[string]string{"BACKEND_TYPE": "memcache"}, `BACKEND_TYPE="memcache": throttlekit has no Memcache store`},
		{map[string]string{"REDIS_URL": "/var/run/nutcracker/ratelimit.sock"}, "throttlekit connects to Redis over TCP only"},
		{map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "r:6379"}, "set REDIS_SOCKET_TYPE=tcp"},
		{map[string]string{"REDIS_SOCKET_TYPE": "udp", "REDIS_URL": "r:6379"}, `REDIS_SOCKET_TYPE="udp": want tcp`},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "s-a:26379,s-b:26379"}, "wants the master's name, then each sentinel's host:port"},
		{map[string]string{"REDIS_URL": "a:1,b:2"}, "REDIS_TYPE single wants one host:port"},
		{map[string]string{"REDIS_TYPE": "ring", "REDIS_URL": "r:6379"}, `REDIS_TYPE="ring": want single, sentinel or cluster`},
		{map[string]string{"REDIS_URL": "redis-no-port"}, `"redis-no-port" is not host:port`},
		{map[string]string{"REDIS_URL": "redis://:hunter2@r:6379/0"}, "REDIS_URL redis://:xxxxx@r:6379/0: want host:port"},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_POOL_SIZE": "0"}, `REDIS_POOL_SIZE="0": want a positive number`},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_TLS_CLIENT_CERT": "/c"}, "REDIS_TLS_CLIENT_CERT=\"/c\": throttlekit's Redis client has no client certificates"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, "GRPC_SERVER_USE_TLS=\"true\": needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "yes please"}, `GRPC_SERVER_USE_TLS="yes please": want true or false`},
		{map[string]string{"GRPC_UDS": "/tmp/rl.sock"}, "GRPC_UDS=\"/tmp/rl.sock\": throttlekit's gRPC listener is TCP only"},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "forever"}, "--grpc-max-connection-age (from GRPC_MAX_CONNECTION_AGE)"},
		{map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "19001"}, `PROMETHEUS_ADDR="19001": want host:port or :port`},
		{map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":8080"}, "--metrics-addr :8080 is also"},
	} {
		_, err := parseServe(nil, env(tc.env), io.Discard)
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
		raw, err := upstreamRedisURL(e, e["REDIS_TLS"] == "true")
		if err != nil {
			t.Fatalf("%v: %v", e, err)
		}
		c, err := newRedisClient(raw, 50*time.Millisecond, nil)
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

// TestUpstreamLogSaysWhatWasTakenAndIgnored: one line; upstream's
// defaults called so; no secret in it.
func TestUpstreamLogSaysWhatWasTakenAndIgnored(t *testing.T) {
	c := parseUpstream(t, nil, map[string]string{"REDIS_URL": "r:6379", "REDIS_AUTH": "hunter2", "USE_STATSD": "false", "STATSD_PORT": "9125"})
	var b bytes.Buffer
	newLoggerTo := newLogger(c, &b)
	c.upstream.log(newLoggerTo)
	out := b.String()
	for _, want := range []string{"level=INFO", "took=", "REDIS_URL", "REDIS_AUTH",
		"USE_STATSD (" + whyStatsd + ")", "STATSD_PORT (" + whyStatsd + ")",
		"because its variables configure this process", "--grpc-addr 0.0.0.0:8081", "--http-addr 0.0.0.0:8080", "--policy /srv/runtime_data/current/config"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("the log shows REDIS_AUTH:\n%s", out)
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("want one line:\n%s", out)
	}
}

// TestReadmeUpstreamTable: README.md carries the table upstreamMarkdown
// writes, as it is.
func TestReadmeUpstreamTable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := upstreamMarkdown()
	if !bytes.Contains(readme, []byte(want)) {
		t.Fatalf("README.md lacks the table of envoyproxy/ratelimit's variables as upstream.go writes it; paste this:\n\n%s", want)
	}
}

// FuzzUpstreamEnvironment: whatever the variables hold, reading them ends
// in flags or an error, never a panic, and REDIS_AUTH shows in neither the
// error nor anything logged.
func FuzzUpstreamEnvironment(f *testing.F) {
	f.Add("sentinel", "m,a:1,b:2", "u:hunter2", "8081", "tcp", "5")
	f.Add("cluster", "a:1,b:2", "hunter2", "0", "", "")
	f.Add("single", "/sock", "", "x", "unix", "-1")
	f.Add("", "redis://:hunter2@h:1/0", "hunter2", "", "tcp", "")
	f.Fuzz(func(t *testing.T, typ, url, auth, port, socket, pool string) {
		e := map[string]string{"REDIS_TYPE": typ, "REDIS_URL": url, "REDIS_AUTH": auth, "GRPC_PORT": port, "REDIS_SOCKET_TYPE": socket, "REDIS_POOL_SIZE": pool}
		u, err := readUpstream(env(e), false)
		secret := len(auth) >= 6 && !strings.Contains(url, auth) && !strings.Contains(port, auth) &&
			!strings.Contains(typ, auth) && !strings.Contains(socket, auth) && !strings.Contains(pool, auth)
		if err != nil {
			if secret && strings.Contains(err.Error(), auth) {
				t.Fatalf("the error shows REDIS_AUTH: %v", err)
			}
			return
		}
		for _, fv := range u.flags {
			if fv.flag == "--redis-url" {
				if _, err := newRedisClient(fv.value, time.Millisecond, nil); err == nil && secret && strings.Contains(Redact(fv.value), auth) {
					t.Fatalf("Redact shows REDIS_AUTH: %s", Redact(fv.value))
				}
			}
		}
		var b bytes.Buffer
		c := &serveConfig{logFormat: "text", logLevel: "info"}
		u.log(newLogger(c, &b))
		if secret && strings.Contains(b.String(), auth) {
			t.Fatalf("the log shows REDIS_AUTH: %s", b.String())
		}
	})
}

// TestRuntimeLayoutIgnoredUnderXDS: Envoy Gateway sets RUNTIME_ROOT and
// RUNTIME_SUBDIRECTORY beside CONFIG_TYPE=GRPC_XDS_SOTW; they make no
// --policy then, and the log says why.
func TestRuntimeLayoutIgnoredUnderXDS(t *testing.T) {
	u, err := readUpstream(env(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit"}), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, fv := range u.flags {
		if fv.flag == "--policy" {
			t.Errorf("--policy %s under xDS", fv.value)
		}
	}
	var got []string
	for _, ig := range u.ignored {
		if strings.HasPrefix(ig.name, "RUNTIME_") && strings.Contains(ig.why, "the policy comes over xDS") {
			got = append(got, ig.name)
		}
	}
	if strings.Join(got, " ") != "RUNTIME_ROOT RUNTIME_SUBDIRECTORY" {
		t.Errorf("ignored as coming over xDS: %v, want RUNTIME_ROOT RUNTIME_SUBDIRECTORY", got)
	}
}
