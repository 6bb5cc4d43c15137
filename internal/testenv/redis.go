// Package testenv starts throwaway servers for tests: a real redis-server,
// or a real PostgreSQL cluster in a temporary directory, on a free loopback
// port, killed when the test ends. Tests never assume a server is already
// running.
package testenv

import (
	"context"
	"crypto/tls"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisInstall says how to get redis-server when it is missing.
const RedisInstall = "redis-server is not on PATH: install it (Debian/Ubuntu: `apt-get install -y redis-server`; macOS: `brew install redis`); tests start their own server and never use one already running"

// startTimeout bounds how long a server may take to say it is ready.
const startTimeout = 15 * time.Second

// Redis is a redis-server owned by one test (or benchmark).
type Redis struct {
	// Addr is the server's host:port on 127.0.0.1.
	Addr string

	// ClientTLS, for a server started with StartRedisTLS, is what Client
	// dials it with; the caller sets it (the server's CA, a client
	// certificate when the server asks for one).
	ClientTLS *tls.Config

	tb      testing.TB
	dir     string
	durable bool     // append-only file, fsync'd on every write; kept by Restart
	tls     []string // redis-server's TLS arguments; nil: plain TCP
	process
}

// RedisTLS is how StartRedisTLS serves TLS: its certificate chain and key,
// and the CA it checks client certificates against (PEM files).
type RedisTLS struct {
	CertFile, KeyFile, CAFile string
	// AuthClients: clients must present a certificate CAFile signed
	// (redis-server's tls-auth-clients yes); otherwise none is asked for.
	AuthClients bool
}

// StartRedis starts a redis-server with no persistence on a free loopback
// port and registers its shutdown with tb.Cleanup. It fails tb, saying how to
// install the server, when redis-server is missing.
func StartRedis(tb testing.TB) *Redis {
	tb.Helper()
	return startRedis(tb, false)
}

// StartRedisDurable starts a redis-server that writes every change to its
// append-only file and fsyncs it before replying (appendfsync always): a
// Kill loses nothing it acknowledged, and Restart comes back with it.
func StartRedisDurable(tb testing.TB) *Redis {
	tb.Helper()
	return startRedis(tb, true)
}

// StartRedisTLS starts a redis-server that serves TLS only (no plain
// port), as StartRedis does otherwise. Its URL is rediss://.
func StartRedisTLS(tb testing.TB, t RedisTLS) *Redis {
	tb.Helper()
	auth := "no"
	if t.AuthClients {
		auth = "yes"
	}
	return startRedisWith(tb, false, []string{"--tls-cert-file", t.CertFile, "--tls-key-file", t.KeyFile,
		"--tls-ca-cert-file", t.CAFile, "--tls-auth-clients", auth})
}

func startRedis(tb testing.TB, durable bool) *Redis {
	tb.Helper()
	return startRedisWith(tb, durable, nil)
}

func startRedisWith(tb testing.TB, durable bool, tlsArgs []string) *Redis {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatal(RedisInstall)
	}
	r := &Redis{tb: tb, dir: tb.TempDir(), durable: durable, tls: tlsArgs}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var port int
		if port, err = freePort(); err != nil {
			continue
		}
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err = r.start(); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("testenv: starting redis-server: %v", err)
	}
	tb.Cleanup(r.Kill)
	return r
}

// freePort asks the kernel for a free loopback port. Another process could
// take it before redis-server binds it; StartRedis retries when that happens.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (r *Redis) start() error {
	_, port, _ := net.SplitHostPort(r.Addr)
	persist := []string{"--appendonly", "no"}
	if r.durable {
		persist = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	ports := []string{"--port", port}
	if r.tls != nil {
		ports = append([]string{"--port", "0", "--tls-port", port}, r.tls...)
	}
	cmd := exec.Command("redis-server", append(append(ports,
		"--bind", "127.0.0.1",
		"--save", "",
		"--dir", r.dir, "--logfile", "",
		"--protected-mode", "no"), persist...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	return r.launch(cmd, out, "redis-server", "Ready to accept connections", func(c *exec.Cmd) { _ = c.Process.Kill() })
}

// Restart starts the server again on the same address after Kill: with an
// empty dataset, or, durable, with everything it acknowledged.
func (r *Redis) Restart() {
	r.tb.Helper()
	r.Kill()
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = r.start(); err == nil {
			return
		}
	}
	r.tb.Fatalf("testenv: restarting redis-server on %s: %v", r.Addr, err)
}

// URL returns a redis:// URL for the server (rediss:// over TLS).
func (r *Redis) URL() string {
	if r.tls != nil {
		return "rediss://" + r.Addr + "/0"
	}
	return "redis://" + r.Addr + "/0"
}

// Client returns a new go-redis client for the server, closed on cleanup.
func (r *Redis) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr, TLSConfig: r.ClientTLS})
	r.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// CommandCalls returns how many times the server has run each command, from
// INFO commandstats (e.g. "evalsha" → 12).
func (r *Redis) CommandCalls(ctx context.Context) (map[string]int64, error) {
	c := redis.NewClient(&redis.Options{Addr: r.Addr, TLSConfig: r.ClientTLS})
	defer c.Close()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return parseCommandStats(info), nil
}

// parseCommandStats reads lines like
// "cmdstat_evalsha:calls=12,usec=34,usec_per_call=2.83,...".
func parseCommandStats(info string) map[string]int64 {
	calls := make(map[string]int64)
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return calls
}
