package testenv

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterWait bounds how long a cluster may take to agree on its slots
// (after create, and after each slot moves).
const clusterWait = 30 * time.Second

// Cluster is a Redis Cluster of primaries only (no replicas), each a
// redis-server with cluster-enabled on free loopback ports, owned by one test
// (or benchmark) and killed when it ends.
type Cluster struct {
	// Addrs are the primaries' host:port on 127.0.0.1, in start order.
	Addrs []string
	// ClientTLS, for a cluster started with StartClusterTLS, is what the
	// helper's own clients dial its nodes with (the caller's, as
	// Redis.ClientTLS).
	ClientTLS *tls.Config

	tb    testing.TB
	nodes []*clusterNode
	tls   *RedisTLS // nil: plain TCP
}

// clusterNode is one redis-server of a Cluster.
type clusterNode struct {
	addr string
	bus  int // the cluster bus port
	dir  string
	tls  *RedisTLS
	process
}

// StartCluster starts primaries redis-servers with cluster-enabled and joins
// them into one cluster: with `redis-cli --cluster create ...
// --cluster-replicas 0` for 3 or more (redis-cli's minimum), by CLUSTER
// ADDSLOTSRANGE and CLUSTER MEET for 1 or 2. It returns once every node says
// cluster_state:ok and all agree on which node serves each slot, and
// registers the shutdown with tb.Cleanup.
func StartCluster(tb testing.TB, primaries int) *Cluster {
	tb.Helper()
	return startCluster(tb, primaries, nil, nil)
}

// StartClusterTLS is StartCluster with every node serving TLS only, its
// cluster bus too (tls-cluster), with t's files; t's certificate must be
// good for a client as well (the nodes present it to each other). client
// is what the helper's own clients dial with. Its URL is rediss+cluster://.
func StartClusterTLS(tb testing.TB, primaries int, t RedisTLS, client *tls.Config) *Cluster {
	tb.Helper()
	return startCluster(tb, primaries, &t, client)
}

func startCluster(tb testing.TB, primaries int, t *RedisTLS, client *tls.Config) *Cluster {
	tb.Helper()
	if primaries < 1 {
		tb.Fatalf("testenv: StartCluster(%d): want at least 1 primary", primaries)
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Fatal(RedisInstall)
		}
	}
	c := &Cluster{tb: tb, tls: t, ClientTLS: client}
	tb.Cleanup(c.kill)
	for i := 0; i < primaries; i++ {
		n := &clusterNode{dir: tb.TempDir(), tls: t}
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			var port int
			if port, err = freePort(); err != nil {
				continue
			}
			if n.bus, err = freePort(); err != nil {
				continue
			}
			n.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			if err = n.start(); err == nil {
				break
			}
		}
		if err != nil {
			tb.Fatalf("testenv: starting cluster node %d: %v", i, err)
		}
		c.nodes = append(c.nodes, n)
		c.Addrs = append(c.Addrs, n.addr)
	}
	if err := c.create(); err != nil {
		tb.Fatalf("testenv: creating the cluster: %v", err)
	}
	if err := c.waitAgreed(); err != nil {
		tb.Fatalf("testenv: cluster never settled: %v", err)
	}
	return c
}

func (n *clusterNode) start() error {
	_, port, _ := net.SplitHostPort(n.addr)
	ports := []string{"--port", port}
	if t := n.tls; t != nil {
		auth := "no"
		if t.AuthClients {
			auth = "yes"
		}
		ports = []string{"--port", "0", "--tls-port", port, "--tls-cluster", "yes", "--tls-cert-file", t.CertFile,
			"--tls-key-file", t.KeyFile, "--tls-ca-cert-file", t.CAFile, "--tls-auth-clients", auth}
	}
	cmd := exec.Command("redis-server", append(ports,
		"--bind", "127.0.0.1",
		"--cluster-enabled", "yes",
		"--cluster-port", strconv.Itoa(n.bus),
		"--cluster-config-file", n.dir+"/nodes.conf",
		"--cluster-node-timeout", "5000",
		"--cluster-announce-ip", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", n.dir, "--logfile", "",
		"--protected-mode", "no")...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	return n.launch(cmd, out, "redis-server (cluster)", "Ready to accept connections", func(c *exec.Cmd) { _ = c.Process.Kill() })
}

// create assigns the slots and joins the nodes.
func (c *Cluster) create() error {
	if len(c.nodes) >= 3 {
		var args []string
		if t := c.tls; t != nil {
			args = []string{"--tls", "--cacert", t.CAFile, "--cert", t.CertFile, "--key", t.KeyFile}
		}
		args = append(append(args, "--cluster", "create"), c.Addrs...)
		args = append(args, "--cluster-replicas", "0", "--cluster-yes")
		if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	per := 16384 / len(c.nodes)
	for i, n := range c.nodes {
		lo, hi := i*per, (i+1)*per-1
		if i == len(c.nodes)-1 {
			hi = 16383
		}
		if err := c.do(ctx, n.addr, "cluster", "addslotsrange", lo, hi); err != nil {
			return err
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(c.nodes[0].addr)
			if err := c.do(ctx, n.addr, "cluster", "meet", host, port, c.nodes[0].bus); err != nil {
				return err
			}
		}
	}
	return nil
}

// do runs one command on the node at addr, outside the cluster client.
func (c *Cluster) do(ctx context.Context, addr string, args ...any) error {
	return c.nodeCmd(ctx, addr, args...).Err()
}

func (c *Cluster) nodeCmd(ctx context.Context, addr string, args ...any) *redis.Cmd {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, TLSConfig: c.ClientTLS})
	defer cl.Close()
	return cl.Do(ctx, args...)
}

// waitAgreed waits until every node says cluster_state:ok and every node's
// CLUSTER SLOTS reply is the same, with all 16384 slots served.
func (c *Cluster) waitAgreed() error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	var last string
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if last = c.disagreement(ctx); last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %v: %s", clusterWait, last)
		case <-tick.C:
		}
	}
}

// disagreement says why the cluster is not settled, or "" when it is.
func (c *Cluster) disagreement(ctx context.Context) string {
	var first string
	for _, n := range c.nodes {
		info, err := c.nodeCmd(ctx, n.addr, "cluster", "info").Text()
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER INFO: %v", n.addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Sprintf("%s: not cluster_state:ok", n.addr)
		}
		owners, err := c.owners(ctx, n.addr)
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER SLOTS: %v", n.addr, err)
		}
		got := fmt.Sprint(owners)
		if first == "" {
			first = got
		} else if got != first {
			return fmt.Sprintf("%s disagrees on slot owners", n.addr)
		}
	}
	return ""
}

// owners returns, as the node at addr sees it, the primary serving each slot
// ("" for none).
func (c *Cluster) owners(ctx context.Context, addr string) ([16384]string, error) {
	var owners [16384]string
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, TLSConfig: c.ClientTLS})
	defer cl.Close()
	ranges, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		return owners, err
	}
	for _, r := range ranges {
		if len(r.Nodes) == 0 || r.Start < 0 || r.End > 16383 {
			continue
		}
		for s := r.Start; s <= r.End; s++ {
			owners[s] = r.Nodes[0].Addr
		}
	}
	for s, o := range owners {
		if o == "" {
			return owners, fmt.Errorf("slot %d is not served", s)
		}
	}
	return owners, nil
}

// kill stops every node (tb.Cleanup).
func (c *Cluster) kill() {
	for _, n := range c.nodes {
		n.Kill()
	}
}

// URL returns the cluster's URL in the form the sidecar's --redis-url takes:
// redis+cluster://host:port/?addr=host:port&addr=... (every primary).
func (c *Cluster) URL() string {
	var b strings.Builder
	scheme := "redis+cluster://"
	if c.tls != nil {
		scheme = "rediss+cluster://"
	}
	b.WriteString(scheme + c.Addrs[0] + "/")
	for i, a := range c.Addrs[1:] {
		if i == 0 {
			b.WriteString("?")
		} else {
			b.WriteString("&")
		}
		b.WriteString("addr=" + a)
	}
	return b.String()
}

// Client returns a new go-redis ClusterClient for the cluster, configured as
// the sidecar configures the one --redis-url describes for its default
// 50ms store timeout (no retries, one dial attempt, 200ms to dial, 500ms
// to read or write), closed on cleanup. MOVED and ASK are still followed:
// the ClusterClient's MaxRedirects (default 3) is separate from MaxRetries.
func (c *Cluster) Client() *redis.ClusterClient {
	return c.client(200*time.Millisecond, 500*time.Millisecond)
}

// PatientClient is Client with StoreDeadline to dial, read and write: for a
// test that judges answers (redirects followed, counts kept), not the
// store's latency, on a machine whose load can stall a round trip past
// Client's 500ms. Closed on cleanup.
func (c *Cluster) PatientClient() *redis.ClusterClient {
	return c.client(StoreDeadline, StoreDeadline)
}

func (c *Cluster) client(dial, rw time.Duration) *redis.ClusterClient {
	// The sidecar drops "+cluster" from the scheme before go-redis parses it.
	o, err := redis.ParseClusterURL(strings.Replace(strings.Replace(c.URL(), "rediss+cluster://", "rediss://", 1), "redis+cluster://", "redis://", 1))
	if err != nil {
		c.tb.Fatalf("testenv: parsing %s: %v", c.URL(), err)
	}
	o.MaxRetries, o.DialerRetries = -1, 1
	o.ContextTimeoutEnabled, o.Protocol = true, 2
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = dial, rw, rw
	if c.ClientTLS != nil {
		o.TLSConfig = c.ClientTLS
	}
	cl := redis.NewClusterClient(o)
	c.tb.Cleanup(func() { _ = cl.Close() })
	return cl
}

// ClientThrough returns a Cluster client of a one-primary cluster whose
// every connection goes to addr — a Proxy in front of the primary —
// whatever address the cluster names, so that faults put on the proxy
// reach every command. Retries are off (MaxRetries -1; MaxRedirects is the
// default, 3) and a read waits readTimeout. Closed on cleanup.
func (c *Cluster) ClientThrough(addr string, readTimeout time.Duration) *redis.ClusterClient {
	if len(c.Addrs) != 1 {
		c.tb.Fatalf("testenv: ClientThrough needs a one-primary cluster, not %d", len(c.Addrs))
	}
	cl := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: c.Addrs,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		ReadTimeout: readTimeout, MaxRetries: -1, Protocol: 2,
	})
	c.tb.Cleanup(func() { _ = cl.Close() })
	return cl
}

// NodeClient returns a plain client of the one node at addr (it answers
// MOVED for slots it does not serve), closed on cleanup.
func (c *Cluster) NodeClient(addr string) *redis.Client {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, TLSConfig: c.ClientTLS})
	c.tb.Cleanup(func() { _ = cl.Close() })
	return cl
}

// NodeID returns the cluster node ID of the primary at addr.
func (c *Cluster) NodeID(addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	return c.nodeCmd(ctx, addr, "cluster", "myid").Text()
}

// SlotOwner returns the address of the primary serving slot, as the first
// node sees it.
func (c *Cluster) SlotOwner(slot int) (string, error) {
	if slot < 0 || slot > 16383 {
		return "", fmt.Errorf("testenv: slot %d outside 0..16383", slot)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	owners, err := c.owners(ctx, c.Addrs[0])
	if err != nil {
		return "", err
	}
	return owners[slot], nil
}

// SlotOwners returns the address of the primary serving each slot, as the
// first node sees it: SlotOwner for every slot in one CLUSTER SLOTS, for a
// test that looks up many (a connection and a round trip per slot add up
// to seconds on a loaded machine).
func (c *Cluster) SlotOwners() ([16384]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	return c.owners(ctx, c.Addrs[0])
}

// KeySlot returns the slot of a Redis key name (CLUSTER KEYSLOT).
func (c *Cluster) KeySlot(key string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	n, err := c.nodeCmd(ctx, c.Addrs[0], "cluster", "keyslot", key).Int()
	return n, err
}

// CPU returns the CPU time (user + system) every node has used so far, from
// INFO CPU, summed over the nodes.
func (c *Cluster) CPU(ctx context.Context) (time.Duration, error) {
	var total time.Duration
	for _, a := range c.Addrs {
		info, err := c.nodeCmd(ctx, a, "info", "cpu").Text()
		if err != nil {
			return 0, err
		}
		d, err := parseCPU(info)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", a, err)
		}
		total += d
	}
	return total, nil
}

// parseCPU reads used_cpu_sys and used_cpu_user (seconds) from INFO CPU.
func parseCPU(info string) (time.Duration, error) {
	var total float64
	found := 0
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO CPU %s: %q: %w", name, v, err)
		}
		total += f
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("INFO CPU without used_cpu_sys and used_cpu_user")
	}
	return time.Duration(total * float64(time.Second)), nil
}
