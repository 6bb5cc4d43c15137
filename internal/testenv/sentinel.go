package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelInstall says how to get redis-sentinel when it is missing.
const SentinelInstall = "redis-sentinel is not on PATH: install it (Debian/Ubuntu: `apt-get install -y redis-sentinel`; macOS: `brew install redis`, which has it); tests start their own sentinels and never use one already running"

// MasterName is the name the sentinels of StartSentinel monitor the
// primary under.
const MasterName = "tkprimary"

// Sentinel timings: a primary that does not answer for SentinelDownAfter is
// subjectively down; two sentinels agreeing make it objectively down and
// one of them promotes the replica. SentinelFailoverTimeout also bounds a
// failover that stalls (Sentinel retries after twice that).
const (
	SentinelDownAfter       = 500 * time.Millisecond
	SentinelFailoverTimeout = 5 * time.Second
)

// sentinelWait bounds each wait of StartSentinel and WaitFailover's
// default: sentinels discover each other through hello messages every 2 s.
const sentinelWait = 30 * time.Second

// Sentinel is a Redis primary, one replica of it and three redis-sentinels
// monitoring them (quorum 2) on loopback, owned by one test: none of them
// persists anything, and all are killed when the test ends. Its methods are
// safe for concurrent use; KillPrimary and WaitFailover fail the test and
// must be called from the test's goroutine.
type Sentinel struct {
	// Sentinels are the sentinels' host:port addresses.
	Sentinels []string

	tb        testing.TB
	mu        sync.Mutex
	servers   map[string]*process // by address: the primary and the replica
	sentinels []*process
	primary   string // the address the sentinels last agreed on
}

// StartSentinel starts the primary, one replica (fully synced) and the
// sentinels, waits until every sentinel names the primary and knows the
// replica and the two other sentinels, and registers the shutdown of all
// five processes with tb.Cleanup. It fails tb, saying how to install them,
// when redis-server or redis-sentinel is missing.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	return StartSentinelReplicas(tb, 1)
}

// StartSentinelReplicas is StartSentinel with n ≥ 1 replicas: after a
// failover the sentinels point the replicas left at the new primary, which
// then has replicas again.
func StartSentinelReplicas(tb testing.TB, n int) *Sentinel {
	tb.Helper()
	if n < 1 {
		tb.Fatalf("testenv: StartSentinelReplicas(%d): want at least one replica", n)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatal(RedisInstall)
	}
	if _, err := exec.LookPath("redis-sentinel"); err != nil {
		tb.Fatal(SentinelInstall)
	}
	s := &Sentinel{tb: tb, servers: map[string]*process{}}
	primary := s.startServer("")
	s.primary = primary
	var replicas []string
	for range n {
		replicas = append(replicas, s.startServer(primary))
	}
	for _, replica := range replicas {
		if err := waitUntil(sentinelWait, func(ctx context.Context) error { return replicaInSync(ctx, replica) }); err != nil {
			tb.Fatalf("testenv: replica %s never synced with primary %s: %v", replica, primary, err)
		}
	}
	dir := tb.TempDir()
	for i := 0; i < 3; i++ {
		s.startSentinel(dir, i, primary)
	}
	if err := waitUntil(sentinelWait, func(ctx context.Context) error { return s.agreed(ctx, primary, replicas) }); err != nil {
		tb.Fatalf("testenv: sentinels never agreed on primary %s with replicas %v: %v", primary, replicas, err)
	}
	return s
}

// startServer starts a redis-server with no persistence on a free port, a
// replica of replicaOf unless that is empty, and returns its address.
func (s *Sentinel) startServer(replicaOf string) string {
	s.tb.Helper()
	dir := s.tb.TempDir()
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var port int
		if port, err = freePort(); err != nil {
			continue
		}
		args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", "",
			"--protected-mode", "no"}
		if replicaOf != "" {
			host, pport, _ := net.SplitHostPort(replicaOf)
			args = append(args, "--replicaof", host, pport)
		}
		p := &process{}
		if err = p.launchLogged("redis-server", "Ready to accept connections", args...); err == nil {
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			s.mu.Lock()
			s.servers[addr] = p
			s.mu.Unlock()
			s.tb.Cleanup(p.Kill)
			return addr
		}
	}
	s.tb.Fatalf("testenv: starting redis-server: %v", err)
	return ""
}

// startSentinel starts sentinel i, monitoring primary, with its
// configuration file (which Sentinel rewrites) in dir.
func (s *Sentinel) startSentinel(dir string, i int, primary string) {
	s.tb.Helper()
	host, pport, _ := net.SplitHostPort(primary)
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var port int
		if port, err = freePort(); err != nil {
			continue
		}
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d-%d.conf", i, attempt))
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %q\nlogfile \"\"\n"+
			"sentinel monitor %s %s %s 2\n"+
			"sentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s %d\n"+
			"sentinel parallel-syncs %s 1\n",
			port, dir, MasterName, host, pport,
			MasterName, SentinelDownAfter.Milliseconds(),
			MasterName, SentinelFailoverTimeout.Milliseconds(),
			MasterName)
		if err = os.WriteFile(conf, []byte(text), 0o600); err != nil {
			s.tb.Fatal(err)
		}
		p := &process{}
		if err = p.launchLogged("redis-sentinel", "+monitor master", conf); err == nil {
			s.mu.Lock()
			s.sentinels = append(s.sentinels, p)
			s.mu.Unlock()
			s.Sentinels = append(s.Sentinels, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			s.tb.Cleanup(p.Kill) // before the servers' (cleanups run last first)
			return
		}
	}
	s.tb.Fatalf("testenv: starting redis-sentinel: %v", err)
}

// launchLogged starts bin with args, logging to its stdout, as p, and
// waits for the log line ready.
func (p *process) launchLogged(bin, ready string, args ...string) error {
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	return p.launch(cmd, out, bin, ready, func(c *exec.Cmd) { _ = c.Process.Kill() })
}

// waitUntil polls cond every 10ms until it returns nil or timeout passes,
// and returns its last error then.
func waitUntil(timeout time.Duration, cond func(ctx context.Context) error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := cond(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		<-tick.C
	}
}

// replicaInSync reports, as an error, why the server at addr is not a
// replica whose link to its primary is up.
func replicaInSync(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("INFO replication of %s: %q", addr, info)
	}
	return nil
}

// agreed reports, as an error, why some sentinel does not name primary,
// see replicas as healthy replicas, or know the two other sentinels.
func (s *Sentinel) agreed(ctx context.Context, primary string, replicas []string) error {
	for _, addr := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: addr})
		err := sentinelAgrees(ctx, c, primary, replicas, len(s.Sentinels)-1)
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", addr, err)
		}
	}
	return nil
}

func sentinelAgrees(ctx context.Context, c *redis.SentinelClient, primary string, want []string, others int) error {
	got, err := c.GetMasterAddrByName(ctx, MasterName).Result()
	if err != nil {
		return err
	}
	if len(got) != 2 || net.JoinHostPort(got[0], got[1]) != primary {
		return fmt.Errorf("names primary %v, want %s", got, primary)
	}
	replicas, err := c.Replicas(ctx, MasterName).Result()
	if err != nil {
		return err
	}
	healthy := 0
	for _, r := range replicas {
		addr := net.JoinHostPort(r["ip"], r["port"])
		if slices.Contains(want, addr) && r["flags"] == "slave" && r["master-link-status"] == "ok" {
			healthy++
		}
	}
	if healthy != len(want) {
		return fmt.Errorf("replicas %v, want %v healthy", replicas, want)
	}
	peers, err := c.Sentinels(ctx, MasterName).Result()
	if err != nil {
		return err
	}
	if len(peers) != others {
		return fmt.Errorf("knows %d other sentinels, want %d", len(peers), others)
	}
	return nil
}

// URL returns the redis:// URL of the primary through the sentinels, in
// the form go-redis's ParseFailoverURL and the sidecar's --redis-url take:
//
//	redis://SENTINEL1/0?master_name=NAME&addr=SENTINEL2&addr=SENTINEL3
func (s *Sentinel) URL() string {
	u := "redis://" + s.Sentinels[0] + "/0?master_name=" + MasterName
	for _, a := range s.Sentinels[1:] {
		u += "&addr=" + a
	}
	return u
}

// Client returns a new go-redis failover client (the primary, found
// through the sentinels), closed on cleanup.
func (s *Sentinel) Client() *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: s.Sentinels})
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Primary returns the address of the primary the sentinels last agreed on
// (at start, or in WaitFailover).
func (s *Sentinel) Primary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.primary
}

// Replicas returns the addresses of the servers other than Primary that
// are still running.
func (s *Sentinel) Replicas() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var addrs []string
	for addr, p := range s.servers {
		if addr != s.primary && p.running() {
			addrs = append(addrs, addr)
		}
	}
	return addrs
}

// ServerClient returns a plain go-redis client of the server at addr
// (Primary, or one of Replicas), closed on cleanup.
func (s *Sentinel) ServerClient(addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// running reports whether the server has been started and not killed (nor
// exited by itself).
func (p *process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}
