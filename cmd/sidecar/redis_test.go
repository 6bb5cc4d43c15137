package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// requirePassword makes r ask for password, as `requirepass` does.
func requirePassword(t *testing.T, r *testenv.Redis, password string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Client().ConfigSet(ctx, "requirepass", password).Err(); err != nil {
		t.Fatalf("CONFIG SET requirepass: %v", err)
	}
}

// TestRedisConfigErrorsStopServe: a Redis that answers but refuses the
// configuration --redis-url describes stops serve at start, with one line
// that says why and never holds the password.
func TestRedisConfigErrorsStopServe(t *testing.T) {
	const secret = "hunter2-wrong"
	plain := testenv.StartRedis(t)
	locked := testenv.StartRedis(t)
	requirePassword(t, locked, "s3cret-right")
	for _, tc := range []struct {
		name, url, want string
	}{
		{"database out of range", "redis://" + plain.Addr + "/99", "ERR DB index is out of range"},
		{"wrong password", "redis://:" + secret + "@" + locked.Addr + "/0", "WRONGPASS"},
		{"wrong user", "redis://nobody:" + secret + "@" + locked.Addr + "/0", "WRONGPASS"},
		{"no password", "redis://" + locked.Addr + "/0", "NOAUTH"},
		{"cluster URL at a single server", "redis+cluster://" + plain.Addr, "cluster support disabled"},
		{"sentinel URL at a plain server", "redis://" + plain.Addr + "/0?master_name=mymaster", "unknown command 'sentinel'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// storeDeadline: with 50ms, a loaded machine's slow dial or
			// handshake fails the start check as a timeout, an outage, and
			// serve serves instead of naming the refusal.
			s := startServe(t, append([]string{"--store", "redis", "--redis-url", tc.url}, storeDeadline...), nil)
			if s.grpcAddr != "" {
				t.Fatalf("serve logged \"serving\" with --redis-url %s", Redact(tc.url))
			}
			out := s.stderr.String()
			var lines []string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "throttlekit serve:") {
					lines = append(lines, l)
				}
			}
			if s.code != 1 || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Errorf("exit %d, message %q; want exit 1 and one line mentioning %q", s.code, lines, tc.want)
			}
			if strings.Contains(out, secret) {
				t.Errorf("the password reached the output:\n%s", out)
			}
			t.Logf("%s", lines)
		})
	}
}

// TestRedisDownAtStartServes: a Redis that is merely down (connection
// refused) does not stop serve: it serves, ready (each rule answers by its
// failure mode), store_up 0 until Redis comes up; with --ready-needs-store
// it is not ready until then. The right password is no configuration error
// either.
func TestRedisDownAtStartServes(t *testing.T) {
	t.Run("down, then up", func(t *testing.T) {
		r := testenv.StartRedis(t)
		r.Kill()
		s := startServe(t, append([]string{"--store", "redis", "--redis-url", r.URL()}, storeDeadline...),
			map[string]string{"THROTTLEKIT_STORE_PROBE_INTERVAL": "20ms"})
		if s.grpcAddr == "" {
			t.Fatalf("serve stopped (exit %d) because Redis was down", s.code)
		}
		if code, body := s.get(t, "/readyz"); code != http.StatusOK || !strings.Contains(body, "store unreachable") {
			t.Errorf("GET /readyz with Redis down: %d %q, want 200 naming the store's outage", code, body)
		}
		if up := s.gauge(t, "throttlekit_store_up"); up != 0 {
			t.Errorf("throttlekit_store_up %v with Redis down, want 0", up)
		}
		r.Restart()
		if !testenv.Eventually(func() bool { return s.gauge(t, "throttlekit_store_up") == 1 }) {
			t.Error("throttlekit_store_up not 1 within 10s of Redis coming up")
		}
	})
	t.Run("down, ready needs store", func(t *testing.T) {
		r := testenv.StartRedis(t)
		r.Kill()
		s := startServe(t, append([]string{"--store", "redis", "--redis-url", r.URL()}, storeDeadline...),
			map[string]string{"THROTTLEKIT_STORE_PROBE_INTERVAL": "20ms", "THROTTLEKIT_READY_NEEDS_STORE": "true"})
		if s.grpcAddr == "" {
			t.Fatalf("serve stopped (exit %d) because Redis was down", s.code)
		}
		if code, body := s.get(t, "/readyz"); code != http.StatusServiceUnavailable {
			t.Errorf("GET /readyz with Redis down: %d %q, want 503", code, body)
		}
		r.Restart()
		if !testenv.Eventually(func() bool { code, _ := s.get(t, "/readyz"); return code == http.StatusOK }) {
			t.Error("GET /readyz not 200 within 10s of Redis coming up")
		}
	})
	t.Run("right password", func(t *testing.T) {
		r := testenv.StartRedis(t)
		requirePassword(t, r, "s3cret-right")
		s := startServe(t, append([]string{"--store", "redis", "--redis-url", "redis://:s3cret-right@" + r.Addr + "/0"}, storeDeadline...), nil)
		if s.grpcAddr == "" {
			t.Fatalf("serve stopped (exit %d) with the right password", s.code)
		}
		if code, body := s.get(t, "/readyz"); code != http.StatusOK {
			t.Errorf("GET /readyz: %d %q, want 200", code, body)
		}
		if strings.Contains(s.stderr.String(), "s3cret-right") {
			t.Errorf("the password reached the logs:\n%s", s.stderr.String())
		}
	})
}

// TestPasswordWithoutOneOnRedisIsWarned (issue 42, item 6): a password
// given (in --redis-url, or REDIS_AUTH) for a Redis that has none used to
// be accepted without a word; serve still serves, and says once that the
// password is not used, naming where it came from, never its value. A
// password Redis does use is not warned of.
func TestPasswordWithoutOneOnRedisIsWarned(t *testing.T) {
	r := testenv.StartRedis(t)
	const warning = "is not used: this Redis has no password"
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"--redis-url", []string{"--store", "redis", "--redis-url", "redis://:s3cret-unused@" + r.Addr + "/0"}, nil, "the password in --redis-url " + warning},
		{"REDIS_AUTH", nil, map[string]string{"REDIS_URL": r.Addr, "REDIS_SOCKET_TYPE": "tcp", "REDIS_AUTH": "s3cret-unused"}, "REDIS_AUTH " + warning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServe(t, append(tc.args, storeDeadline...), tc.env)
			if s.grpcAddr == "" {
				t.Fatalf("serve did not start (exit %d):\n%s", s.code, s.stderr.String())
			}
			out := s.stderr.String()
			if strings.Count(out, tc.want) != 1 {
				t.Errorf("want one warning %q:\n%s", tc.want, out)
			}
			if strings.Contains(out, "s3cret-unused") {
				t.Errorf("the password reached the logs:\n%s", out)
			}
		})
	}
	t.Run("used", func(t *testing.T) {
		r := testenv.StartRedis(t)
		requirePassword(t, r, "s3cret-used")
		s := startServe(t, append([]string{"--store", "redis", "--redis-url", "redis://:s3cret-used@" + r.Addr + "/0"}, storeDeadline...), nil)
		if s.grpcAddr == "" || strings.Contains(s.stderr.String(), warning) {
			t.Errorf("serve %q (exit %d), want it serving without the warning:\n%s", s.grpcAddr, s.code, s.stderr.String())
		}
	})
}
