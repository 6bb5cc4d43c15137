package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// TestServeHelpShowsNoValueForBoolFlags (issue 32, item 11): Go's flag
// usage reads a back-quoted word in a bool flag's help as its value's
// name, and printed -upstream-defaults ratelimit as if it took one.
func TestServeHelpShowsNoValueForBoolFlags(t *testing.T) {
	_, out, errs := runCLI("serve", "--help")
	help := out + errs
	if !strings.Contains(help, "-upstream-defaults\n") || strings.Contains(help, "-upstream-defaults ratelimit") {
		t.Fatalf("serve --help shows -upstream-defaults with a value:\n%s", help)
	}
}

// TestJSONLogsWriteDurationsAsText (issue 32, item 11): the JSON log
// wrote a duration as nanoseconds (1500000000); it writes 1.5s, as the
// text log does.
func TestJSONLogsWriteDurationsAsText(t *testing.T) {
	var b bytes.Buffer
	newLogger(&serveConfig{logFormat: "json", logLevel: "info", nodeID: "n"}, &b).Info("x", "after", 1500*time.Millisecond)
	if !strings.Contains(b.String(), `"after":"1.5s"`) {
		t.Fatalf("JSON log line %q, want \"after\":\"1.5s\"", b.String())
	}
}

// TestWrongRedisAuthNamesREDIS_AUTH (issue 32, item 11): a password from
// envoyproxy/ratelimit's REDIS_AUTH that Redis refuses is named as such;
// the error used to tell the user to fix --redis-url, a flag they never
// wrote. The password is never shown.
func TestWrongRedisAuthNamesREDIS_AUTH(t *testing.T) {
	r := testenv.StartRedis(t)
	if err := r.Client().ConfigSet(context.Background(), "requirepass", "right-one").Err(); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	code := run(context.Background(), []string{"serve"}, env(map[string]string{
		"REDIS_URL": r.Addr, "REDIS_AUTH": "wrong-one", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "HOST": "127.0.0.1", "PORT": "0",
		"RUNTIME_ROOT": t.TempDir(),
		// A start check that missed 50ms on a loaded machine took the
		// refusal for an outage and served (TestRedisConfigErrorsStopServe).
		"THROTTLEKIT_STORE_TIMEOUT": testenv.StoreDeadline.String(),
	}), &out, &errs)
	msg := errs.String()
	if code == 0 || !strings.Contains(msg, "REDIS_AUTH") || strings.Contains(msg, "--redis-url") || strings.Contains(msg, "wrong-one") {
		t.Fatalf("exit %d, stderr:\n%s\nwant a refusal naming REDIS_AUTH, not --redis-url, without the password", code, msg)
	}
}

// TestHTTPServerBoundsEveryPhase (issue 32, item 3): the HTTP listener set
// only a header-read timeout, so a slow body or a client that stopped
// reading held a connection without end.
func TestHTTPServerBoundsEveryPhase(t *testing.T) {
	s := newHTTPServer(nil)
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Fatalf("an unbounded phase: header %v, read %v, write %v, idle %v, header bytes %d", s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout, s.MaxHeaderBytes)
	}
}
