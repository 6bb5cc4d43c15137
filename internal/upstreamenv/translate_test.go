package upstreamenv

import (
	"bytes"
	"flag"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/internal/redact"
)

// flagSet is a FlagSet with every flag the table names, each a string
// (serve's own types are serve's to check), and --grpc-max-connection-age a
// duration as serve's is.
func flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Duration("grpc-max-connection-age", 0, "")
	fs.String("policy-tree", "", "") // made beside --policy by the RUNTIME_* layout
	for _, v := range vars {
		if name := strings.TrimPrefix(v.flag, "--"); name != "" && fs.Lookup(name) == nil {
			fs.String(name, "", "")
		}
	}
	return fs
}

// made is the flags u makes: flag → value.
func made(u *Env) map[string]string {
	out := map[string]string{}
	for _, fv := range u.flags {
		out[fv.flag] = fv.value
	}
	return out
}

// TestTranslateSetsFlags: each variable upstream reads makes the flag it
// means, with upstream's defaults for the rest of the process only when a
// variable only upstream uses is set.
func TestTranslateSetsFlags(t *testing.T) {
	upstreamDefaults := map[string]string{"--grpc-addr": "0.0.0.0:8081", "--http-addr": "0.0.0.0:8080",
		"--policy": "/srv/runtime_data/current/config", "--policy-tree": "true", "--grpc-max-connection-age": "24h"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want map[string]string // flag → value; "" for a flag not made
		only bool              // want is every flag made
	}{
		{"no variables: no flag", nil, nil, true},
		{"GRPC_PORT: upstream's defaults, all interfaces", map[string]string{"GRPC_PORT": "9091"},
			map[string]string{"--grpc-addr": "0.0.0.0:9091", "--http-addr": "0.0.0.0:8080", "--policy": "/srv/runtime_data/current/config", "--policy-tree": "true", "--grpc-max-connection-age": "24h"}, true},
		{"GRPC_HOST and GRPC_PORT", map[string]string{"GRPC_HOST": "10.0.0.7", "GRPC_PORT": "9091"}, map[string]string{"--grpc-addr": "10.0.0.7:9091"}, false},
		{"PORT alone (a common name): its port, throttlekit's loopback", map[string]string{"PORT": "9090"}, map[string]string{"--http-addr": "127.0.0.1:9090"}, true},
		{"HOST and PORT", map[string]string{"HOST": "127.0.0.2", "PORT": "9090"}, map[string]string{"--http-addr": "127.0.0.2:9090"}, true},
		{"LOG_LEVEL alone stays on loopback", map[string]string{"LOG_LEVEL": "DEBUG"}, map[string]string{"--log-level": "debug"}, true},
		{"LOG_LEVEL warning", map[string]string{"LOG_LEVEL": "warning"}, map[string]string{"--log-level": "warn"}, true},
		{"LOG_LEVEL trace", map[string]string{"LOG_LEVEL": "trace"}, map[string]string{"--log-level": "debug"}, true},
		{"LOG_LEVEL fatal", map[string]string{"LOG_LEVEL": "fatal"}, map[string]string{"--log-level": "error"}, true},
		{"LOG_FORMAT", map[string]string{"LOG_FORMAT": "JSON"}, map[string]string{"--log-format": "json"}, true},
		{"spaces around a value are trimmed", map[string]string{"LOG_FORMAT": " json\n", "SHADOW_MODE": "  "}, map[string]string{"--log-format": "json"}, true},
		{"RUNTIME_ROOT and RUNTIME_SUBDIRECTORY", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit"}, map[string]string{"--policy": "/data/ratelimit/config", "--policy-tree": "true"}, false},
		{"RUNTIME_APPDIRECTORY", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "rl", "RUNTIME_APPDIRECTORY": "limits"}, map[string]string{"--policy": "/data/rl/limits"}, false},
		{"CONFIG_TYPE FILE", map[string]string{"CONFIG_TYPE": "FILE"}, upstreamDefaults, true},
		{"REDIS_URL single", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.infra:6379"},
			map[string]string{"--store": "redis", "--redis-url": "redis://redis.infra:6379/0"}, false},
		{"REDIS_URL with REDIS_AUTH, REDIS_TLS, REDIS_POOL_SIZE", map[string]string{"REDIS_URL": "redis.infra:6380", "REDIS_AUTH": "app:s3cret", "REDIS_TLS": "true", "REDIS_POOL_SIZE": "20"},
			map[string]string{"--redis-url": "rediss://app:s3cret@redis.infra:6380/0?pool_size=20"}, false},
		{"REDIS_TYPE sentinel", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s-a:26379, s-b:26379", "REDIS_AUTH": "pw"},
			map[string]string{"--redis-url": "redis://s-a:26379/0?addr=s-b%3A26379&master_name=mymaster&password=pw"}, false},
		{"REDIS_TYPE cluster", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "n1:6379,n2:6379,n3:6379", "REDIS_AUTH": "pw"},
			map[string]string{"--redis-url": "redis+cluster://:pw@n1:6379?addr=n2%3A6379&addr=n3%3A6379"}, false},
		{"BACKEND_TYPE redis without REDIS_URL: memory", map[string]string{"BACKEND_TYPE": "redis", "REDIS_AUTH": "pw"},
			map[string]string{"--store": "", "--redis-url": ""}, false},
		{"GRPC_SERVER_USE_TLS", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "GRPC_SERVER_TLS_KEY": "/certs/tls.key",
			"GRPC_CLIENT_TLS_CACERT": "/certs/ca.crt", "GRPC_CLIENT_TLS_SAN": "envoy"},
			map[string]string{"--grpc-tls-cert": "/certs/tls.crt", "--grpc-tls-key": "/certs/tls.key", "--grpc-tls-client-ca": "/certs/ca.crt", "--grpc-tls-client-san": "envoy"}, false},
		{"TLS files without GRPC_SERVER_USE_TLS: plaintext, as upstream", map[string]string{"GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "GRPC_SERVER_TLS_KEY": "/certs/tls.key"},
			map[string]string{"--grpc-tls-cert": "", "--grpc-tls-key": ""}, false},
		{"GRPC_MAX_CONNECTION_AGE", map[string]string{"GRPC_MAX_CONNECTION_AGE": "1h"}, map[string]string{"--grpc-max-connection-age": "1h"}, false},
		{"SHADOW_MODE", map[string]string{"SHADOW_MODE": "true"}, map[string]string{"--shadow": "true"}, false},
		{"LIMIT_RESPONSE_HEADERS_ENABLED", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "1"}, map[string]string{"--response-headers": "true"}, false},
		{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, map[string]string{"--healthcheck-needs-policy": "true"}, false},
		{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", map[string]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true"}, map[string]string{"--healthcheck-needs-store": "true"}, false},
		{"USE_STATSD only: upstream's defaults, nothing else", map[string]string{"USE_STATSD": "false"}, upstreamDefaults, true},
		{"USE_PROMETHEUS and PROMETHEUS_ADDR (Envoy Gateway's)", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001"},
			map[string]string{"--metrics-addr": ":19001", "--http-addr": "0.0.0.0:8080"}, false},
		{"USE_PROMETHEUS alone: upstream's :9090", map[string]string{"USE_PROMETHEUS": "true"}, map[string]string{"--metrics-addr": ":9090"}, false},
		{"PROMETHEUS_ADDR without USE_PROMETHEUS: no listener, as upstream", map[string]string{"PROMETHEUS_ADDR": ":19001"}, map[string]string{"--metrics-addr": ""}, false},
		{"a variable the table does not hold is not read", map[string]string{"THROTTLEKIT_GRPC_ADDR": "127.0.0.1:1", "PATH": "/bin"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := Translate(tc.env, false)
			if err != nil {
				t.Fatal(err)
			}
			got := made(u)
			for flag, want := range tc.want {
				if got[flag] != want {
					t.Errorf("%s = %q, want %q (all: %v)", flag, got[flag], want, got)
				}
			}
			if tc.only {
				for flag, v := range got {
					if _, ok := tc.want[flag]; !ok {
						t.Errorf("%s %q made too", flag, v)
					}
				}
			}
		})
	}
}

// TestEveryVariableIsAccountedFor: set alone (with what it needs), each
// variable of the table is either taken, making the flag the table names,
// or ignored with the table's reason, or refused with an error naming it.
func TestEveryVariableIsAccountedFor(t *testing.T) {
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
	for _, v := range vars { // the xDS variables apply with CONFIG_TYPE=GRPC_XDS_SOTW (xds.go)
		if strings.HasPrefix(v.name, "CONFIG_GRPC_XDS_") || strings.HasPrefix(v.name, "XDS_CLIENT_") || v.name == "FORCE_START_WITHOUT_INITIAL_CONFIG" {
			needs[v.name] = map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true"}
		}
	}
	for _, name := range []string{"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"} {
		needs[name] = map[string]string{"REDIS_URL": "r:6379", "REDIS_TLS": "true"}
	}
	refused := map[string]bool{"GRPC_UDS": true}
	for _, v := range vars {
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
			u, err := Translate(e, false)
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

// TestBadValuesSayWhatToFix: a value serve cannot honour is an error
// naming the variable and what it wants, without REDIS_AUTH's value.
func TestBadValuesSayWhatToFix(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"GRPC_PORT": "eighty"}, `GRPC_PORT="eighty": want a port number`},
		{map[string]string{"PORT": "70000"}, `PORT="70000": want a port number`},
		{map[string]string{"LOG_LEVEL": "loud"}, `LOG_LEVEL="loud": want trace, debug`},
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
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, "GRPC_SERVER_USE_TLS=\"true\": needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "yes please"}, `GRPC_SERVER_USE_TLS="yes please": want true or false`},
		{map[string]string{"GRPC_UDS": "/tmp/rl.sock"}, "GRPC_UDS=\"/tmp/rl.sock\": throttlekit's gRPC listener is TCP only"},
		{map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "19001"}, `PROMETHEUS_ADDR="19001": want host:port or :port`},
		{map[string]string{"TRACING_ENABLED": "yes please"}, `TRACING_ENABLED="yes please": want true or false`},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "zipkin"}, `TRACING_EXPORTER_PROTOCOL="zipkin": want http or grpc`},
		// A value the flag refuses: Apply names the flag and the variable.
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "forever"}, "--grpc-max-connection-age (from GRPC_MAX_CONNECTION_AGE)"},
	} {
		u, err := Translate(tc.env, false)
		if err == nil {
			err = u.Apply(flagSet())
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to mention %q", tc.env, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%v: the error shows the password: %v", tc.env, err)
		}
	}
}

// TestRedisTLSVariables: with REDIS_TLS=true, upstream's Redis TLS files
// and switch become --redis-tls-*; without it upstream reads none of them,
// and neither does serve (each is reported ignored, saying why).
func TestRedisTLSVariables(t *testing.T) {
	files := map[string]string{"REDIS_URL": "r:6379", "REDIS_TLS_CACERT": "/ca.pem", "REDIS_TLS_CLIENT_CERT": "/c.pem",
		"REDIS_TLS_CLIENT_KEY": "/k.pem", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}
	on := map[string]string{"REDIS_TLS": "true"}
	for k, v := range files {
		on[k] = v
	}
	u, err := Translate(on, false)
	if err != nil {
		t.Fatal(err)
	}
	fs := flagSet()
	if err := u.Apply(fs); err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]string{"redis-url": "rediss://r:6379/0", "redis-tls-ca": "/ca.pem", "redis-tls-cert": "/c.pem",
		"redis-tls-key": "/k.pem", "redis-tls-skip-hostname-verification": "true"} {
		if got := fs.Lookup(flag).Value.String(); !strings.HasPrefix(got, want) {
			t.Errorf("--%s = %q, want %q", flag, got, want)
		}
	}
	u, err = Translate(files, false)
	if err != nil {
		t.Fatal(err)
	}
	ignored := map[string]string{}
	for _, ig := range u.ignored {
		ignored[ig.name] = ig.why
	}
	for name := range files {
		if name != "REDIS_URL" && ignored[name] != "REDIS_TLS is not true" {
			t.Errorf("%s without REDIS_TLS: ignored %q, want \"REDIS_TLS is not true\"", name, ignored[name])
		}
	}
}

// TestApplyLeavesGivenFlags: a flag already set keeps its value, and the
// variables that would have made it are reported as overridden.
func TestApplyLeavesGivenFlags(t *testing.T) {
	u, err := Translate(map[string]string{"GRPC_PORT": "9091", "PORT": "9090", "RUNTIME_ROOT": "/data", "LOG_LEVEL": "debug"}, false)
	if err != nil {
		t.Fatal(err)
	}
	fs := flagSet()
	for _, f := range [][2]string{{"grpc-addr", "127.0.0.1:6000"}, {"log-level", "error"}, {"http-addr", "127.0.0.1:7000"}, {"store", "memory"}} {
		if err := fs.Set(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := u.Apply(fs); err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]string{"grpc-addr": "127.0.0.1:6000", "log-level": "error", "http-addr": "127.0.0.1:7000", "policy": "/data/config"} {
		if got := fs.Lookup(flag).Value.String(); got != want {
			t.Errorf("--%s = %q, want %q", flag, got, want)
		}
	}
	var given []string
	for _, g := range u.given {
		given = append(given, g.name)
	}
	if strings.Join(given, ",") != "GRPC_PORT,PORT,LOG_LEVEL" {
		t.Errorf("overridden variables = %v, want GRPC_PORT, PORT, LOG_LEVEL", given)
	}
}

// TestLogSaysWhatWasTakenAndIgnored: one line; upstream's defaults called
// so; no secret in it.
func TestLogSaysWhatWasTakenAndIgnored(t *testing.T) {
	u, err := Translate(map[string]string{"REDIS_URL": "r:6379", "REDIS_AUTH": "hunter2", "USE_STATSD": "false", "STATSD_PORT": "9125"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Apply(flagSet()); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	u.Log(slog.New(slog.NewTextHandler(&b, nil)))
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
	b.Reset()
	(*Env)(nil).Log(slog.New(slog.NewTextHandler(&b, nil)))
	if none, _ := Translate(nil, false); none != nil {
		none.Log(slog.New(slog.NewTextHandler(&b, nil)))
	}
	if b.Len() != 0 {
		t.Errorf("no variable, yet a log line: %s", b.String())
	}
}

// upstreamTableDoc is the page that carries the table of upstream's
// variables (the README's front page links to it).
const upstreamTableDoc = "../../docs/replacing-envoyproxy-ratelimit.md"

// TestReadmeUpstreamTable: docs/replacing-envoyproxy-ratelimit.md carries
// the table markdown writes, as it is.
func TestReadmeUpstreamTable(t *testing.T) {
	readme, err := os.ReadFile(upstreamTableDoc)
	if err != nil {
		t.Fatal(err)
	}
	want := markdown()
	if !bytes.Contains(readme, []byte(want)) {
		t.Fatalf("%s lacks the table of envoyproxy/ratelimit's variables as internal/upstreamenv writes it; paste this:\n\n%s", upstreamTableDoc, want)
	}
}

// TestNamesAreTheTable: Names lists the table's variables, each once.
func TestNamesAreTheTable(t *testing.T) {
	names := Names()
	seen := map[string]bool{}
	for i, name := range names {
		if seen[name] {
			t.Errorf("%s listed twice", name)
		}
		seen[name] = true
		if name != vars[i].name {
			t.Errorf("Names()[%d] = %s, the table's row is %s", i, name, vars[i].name)
		}
	}
	if len(names) != len(vars) {
		t.Errorf("%d names, %d rows", len(names), len(vars))
	}
}

// FuzzTranslate: whatever the variables hold, translating them ends in
// flags or an error, never a panic, and REDIS_AUTH shows in neither the
// error, nor the redacted --redis-url, nor anything logged.
func FuzzTranslate(f *testing.F) {
	f.Add("sentinel", "m,a:1,b:2", "u:hunter2", "8081", "tcp", "5")
	f.Add("cluster", "a:1,b:2", "hunter2", "0", "", "")
	f.Add("single", "/sock", "", "x", "unix", "-1")
	f.Add("", "redis://:hunter2@h:1/0", "hunter2", "", "tcp", "")
	f.Fuzz(func(t *testing.T, typ, url, auth, port, socket, pool string) {
		e := map[string]string{"REDIS_TYPE": typ, "REDIS_URL": url, "REDIS_AUTH": auth, "GRPC_PORT": port, "REDIS_SOCKET_TYPE": socket, "REDIS_POOL_SIZE": pool}
		u, err := Translate(e, false)
		secret := len(auth) >= 6 && !strings.Contains(url, auth) && !strings.Contains(port, auth) &&
			!strings.Contains(typ, auth) && !strings.Contains(socket, auth) && !strings.Contains(pool, auth)
		if err != nil {
			if secret && strings.Contains(err.Error(), auth) {
				t.Fatalf("the error shows REDIS_AUTH: %v", err)
			}
			return
		}
		for _, fv := range u.flags {
			if fv.flag == "--redis-url" && secret && strings.Contains(redact.URL(fv.value), auth) {
				t.Fatalf("redact.URL shows REDIS_AUTH: %s", redact.URL(fv.value))
			}
		}
		err = u.Apply(flagSet())
		if err != nil && secret && strings.Contains(err.Error(), auth) {
			t.Fatalf("Apply's error shows REDIS_AUTH: %v", err)
		}
		var b bytes.Buffer
		u.Log(slog.New(slog.NewTextHandler(&b, nil)))
		if secret && strings.Contains(b.String(), auth) {
			t.Fatalf("the log shows REDIS_AUTH: %s", b.String())
		}
	})
}

// TestRuntimeLayoutIgnoredUnderXDS: Envoy Gateway sets RUNTIME_ROOT and
// RUNTIME_SUBDIRECTORY beside CONFIG_TYPE=GRPC_XDS_SOTW; they make no
// --policy then, and the log says why.
func TestRuntimeLayoutIgnoredUnderXDS(t *testing.T) {
	u, err := Translate(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit"}, false)
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

// TestApplyRefusesAStoreNoVariableNames: where upstream would count in a
// Redis no variable names, Apply refuses unless --store was given.
func TestApplyRefusesAStoreNoVariableNames(t *testing.T) {
	for _, e := range []map[string]string{{"BACKEND_TYPE": "redis"}, {"GRPC_PORT": "9091"}} {
		u, err := Translate(e, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := u.Apply(flagSet()); err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
			t.Errorf("%v: Apply = %v, want a refusal naming REDIS_URL", e, err)
		}
		fs := flagSet()
		if err := fs.Set("store", "memory"); err != nil {
			t.Fatal(err)
		}
		if err := u.Apply(fs); err != nil {
			t.Errorf("%v with --store memory: %v", e, err)
		}
	}
}
