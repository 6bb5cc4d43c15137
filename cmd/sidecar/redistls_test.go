package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttlekit/throttlekit/internal/certtest"
	"github.com/throttlekit/throttlekit/internal/testenv"
)

// tlsRedis is a redis-server serving TLS only, its certificate signed by a
// private CA, asking clients for a certificate that CA signed (with auth);
// client holds a client certificate of that CA and the CA, as files a
// Kubernetes secret volume would hold.
type tlsRedis struct {
	*testenv.Redis
	ca     *certtest.CA
	client *certtest.SecretDir // ca.crt, tls.crt, tls.key
	dir    string              // the server's files
}

func startTLSRedis(t *testing.T, auth bool, serverNames ...string) *tlsRedis {
	t.Helper()
	ca := certtest.NewCA(t, "redis-ca")
	dir := t.TempDir()
	write := writeIn(t, dir)
	var srv certtest.Leaf
	if len(serverNames) == 0 {
		srv = ca.Issue(t, true, []string{"localhost"}, "") // and 127.0.0.1
	} else {
		srv = ca.Sign(t, serverOnly(serverNames))
	}
	r := testenv.StartRedisTLS(t, testenv.RedisTLS{CertFile: write("redis.crt", srv.CertPEM), KeyFile: write("redis.key", srv.KeyPEM),
		CAFile: write("ca.crt", ca.PEM), AuthClients: auth})
	cl := ca.Issue(t, false, []string{"throttlekit"}, "")
	name := "127.0.0.1"
	if len(serverNames) > 0 {
		name = serverNames[0]
	}
	r.ClientTLS = &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cl.Pair(t)}, ServerName: name}
	return &tlsRedis{Redis: r, ca: ca, dir: dir,
		client: certtest.NewSecretDir(t, map[string][]byte{"ca.crt": ca.PEM, "tls.crt": cl.CertPEM, "tls.key": cl.KeyPEM})}
}

// writeIn returns a function writing a file of dir (mode 600) and giving
// its path.
func writeIn(t *testing.T, dir string) func(name string, b []byte) string {
	return func(name string, b []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// serverOnly is a server certificate's template naming names only (no IP
// address).
func serverOnly(names []string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: "redis"}, KeyUsage: x509.KeyUsageDigitalSignature,
		DNSNames: names, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
}

// args are serve's flags for r: the store, and the client's files.
func (r *tlsRedis) args(extra ...string) []string {
	return append([]string{"--store", "redis", "--redis-url", r.URL(), "--redis-tls-ca", r.client.Path("ca.crt"),
		"--redis-tls-cert", r.client.Path("tls.crt"), "--redis-tls-key", r.client.Path("tls.key")}, extra...)
}

// tlsPolicy is testPolicy's limit over an hour: a counter a test reads
// back from Redis after its checks (a second's key may expire first).
const tlsPolicy = "domain: t\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"

// askRedis asks s once for domain t, key k (tlsPolicy: 5 an hour), and
// returns the answer's code.
func askRedis(t *testing.T, s *sidecar, value string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "t",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: value}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetOverallCode()
}

// TestRedisTLSPrivateCAAndClientCertificate (issue 42, item 1): a Redis
// that serves TLS with a private CA and asks for client certificates, as
// Envoy Gateway's does: serve with --redis-tls-ca, --redis-tls-cert and
// --redis-tls-key counts in it (the store answers: store_up 1, a check's
// key is in Redis). Before, a private CA or a client certificate could not
// be given at all.
func TestRedisTLSPrivateCAAndClientCertificate(t *testing.T) {
	r := startTLSRedis(t, true)
	s := startServeWith(t, tlsPolicy, append(r.args(), storeDeadline...), nil)
	if s.grpcAddr == "" {
		t.Fatalf("serve did not start (exit %d):\n%s", s.code, s.stderr.String())
	}
	if up := s.gauge(t, "throttlekit_store_up"); up != 1 {
		t.Fatalf("throttlekit_store_up %v, want 1", up)
	}
	for i := range 6 {
		want := rlsv3.RateLimitResponse_OK
		if i == 5 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if got := askRedis(t, s, "tls"); got != want {
			t.Fatalf("check %d: %v, want %v", i+1, got, want)
		}
	}
	keys, err := r.Client().Keys(context.Background(), "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("Redis keys %v, %v: want the checks' counter", keys, err)
	}
}

// TestRedisTLSHandshakeErrorsNameTheFlag: a handshake that fails for
// what serve was told never succeeds by waiting: serve stops at start
// with one line naming the flag that fixes it (or, from upstream's
// variables, the variable).
func TestRedisTLSHandshakeErrorsNameTheFlag(t *testing.T) {
	r := startTLSRedis(t, true)
	other := startTLSRedis(t, false, "redis.internal") // a name 127.0.0.1 is not
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no CA", []string{"--store", "redis", "--redis-url", r.URL(), "--redis-tls-cert", r.client.Path("tls.crt"), "--redis-tls-key", r.client.Path("tls.key")}, nil,
			"give that CA (PEM) with --redis-tls-ca"},
		{"no client certificate", []string{"--store", "redis", "--redis-url", r.URL(), "--redis-tls-ca", r.client.Path("ca.crt")}, nil,
			"give one its CA signed with --redis-tls-cert and --redis-tls-key"},
		{"another name", []string{"--store", "redis", "--redis-url", other.URL(), "--redis-tls-ca", other.client.Path("ca.crt")}, nil,
			"--redis-tls-skip-hostname-verification"},
		{"upstream, no CA", nil, map[string]string{"REDIS_URL": r.Addr, "REDIS_TLS": "true", "REDIS_SOCKET_TYPE": "tcp",
			"REDIS_TLS_CLIENT_CERT": r.client.Path("tls.crt"), "REDIS_TLS_CLIENT_KEY": r.client.Path("tls.key")}, "REDIS_TLS_CACERT"},
		{"cert without key", []string{"--store", "redis", "--redis-url", r.URL(), "--redis-tls-cert", r.client.Path("tls.crt")}, nil,
			"--redis-tls-cert needs --redis-tls-key"},
		{"not rediss", []string{"--store", "redis", "--redis-url", "redis://127.0.0.1:1/0", "--redis-tls-ca", r.client.Path("ca.crt")}, nil,
			"need --store redis and a rediss://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServe(t, append(tc.args, storeDeadline...), tc.env)
			if s.grpcAddr != "" || s.code == 0 {
				t.Fatalf("serve started (exit %d), want it stopped:\n%s", s.code, s.stderr.String())
			}
			if !strings.Contains(s.stderr.String(), tc.want) {
				t.Errorf("serve's error does not say %q:\n%s", tc.want, s.stderr.String())
			}
		})
	}
	// The other name, its chain verified but not its name: served.
	s := startServe(t, append([]string{"--store", "redis", "--redis-url", other.URL(), "--redis-tls-ca", other.client.Path("ca.crt"),
		"--redis-tls-skip-hostname-verification"}, storeDeadline...), nil)
	if s.grpcAddr == "" || s.gauge(t, "throttlekit_store_up") != 1 {
		t.Fatalf("with --redis-tls-skip-hostname-verification: serve %q (exit %d), want it serving with its store up:\n%s", s.grpcAddr, s.code, s.stderr.String())
	}
}

// TestRedisTLSFromUpstreamVariables: Envoy Gateway's environment for a TLS
// Redis (REDIS_TLS, REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT,
// REDIS_TLS_CLIENT_KEY) serves, counting in Redis. Before, each of the
// three files stopped serve.
func TestRedisTLSFromUpstreamVariables(t *testing.T) {
	r := startTLSRedis(t, true)
	s := startServeWith(t, tlsPolicy, storeDeadline, map[string]string{"REDIS_URL": r.Addr, "REDIS_SOCKET_TYPE": "tcp", "REDIS_TLS": "true",
		"REDIS_TLS_CACERT": r.client.Path("ca.crt"), "REDIS_TLS_CLIENT_CERT": r.client.Path("tls.crt"), "REDIS_TLS_CLIENT_KEY": r.client.Path("tls.key")})
	if s.grpcAddr == "" {
		t.Fatalf("serve did not start (exit %d):\n%s", s.code, s.stderr.String())
	}
	if got := askRedis(t, s, "eg"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("check: %v, want OK", got)
	}
	if keys, err := r.Client().Keys(context.Background(), "*").Result(); err != nil || len(keys) == 0 {
		t.Fatalf("Redis keys %v, %v: want the check's counter", keys, err)
	}
}

// TestRedisTLSRotation: Redis comes back with a certificate of a new CA,
// and the secret volume swaps in that CA (and a client certificate it
// signed): serve's new connections verify with the new files, without a
// restart (store_up back to 1). Open connections keep what they were
// shown.
func TestRedisTLSRotation(t *testing.T) {
	r := startTLSRedis(t, true)
	s := startServeWith(t, tlsPolicy, append(r.args(), storeDeadline...), map[string]string{"THROTTLEKIT_STORE_PROBE_INTERVAL": "20ms"})
	if s.grpcAddr == "" || s.gauge(t, "throttlekit_store_up") != 1 {
		t.Fatalf("serve %q (exit %d), want it serving with its store up:\n%s", s.grpcAddr, s.code, s.stderr.String())
	}
	ca2 := certtest.NewCA(t, "redis-ca-2")
	srv := ca2.Issue(t, true, []string{"localhost"}, "")
	cl := ca2.Issue(t, false, []string{"throttlekit"}, "")
	for name, b := range map[string][]byte{"redis.crt": srv.CertPEM, "redis.key": srv.KeyPEM, "ca.crt": ca2.PEM} {
		if err := os.WriteFile(filepath.Join(r.dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r.Restart() // the new CA's certificate, and its clients only
	if !testenv.Eventually(func() bool { return s.gauge(t, "throttlekit_store_up") == 0 }) {
		t.Fatal("store_up not 0 with Redis's certificate from a CA serve does not trust yet")
	}
	r.client.Update(t, map[string][]byte{"ca.crt": ca2.PEM, "tls.crt": cl.CertPEM, "tls.key": cl.KeyPEM})
	if !testenv.Eventually(func() bool { return s.gauge(t, "throttlekit_store_up") == 1 }) {
		t.Fatalf("store_up not back to 1 within 10s of the secret's rotation:\n%s", s.stderr.String())
	}
	if got := askRedis(t, s, "rotated"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("check after the rotation: %v, want OK", got)
	}
	if code, _ := s.get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d after the rotation", code)
	}
}

// TestRedisTLSCluster: a Redis Cluster of three primaries serving TLS
// only (its bus too) with a private CA and client certificates: serve
// with a rediss+cluster:// --redis-url and --redis-tls-* reaches every
// node it is redirected to, verifying each by the host it dials, and
// counts there.
func TestRedisTLSCluster(t *testing.T) {
	ca := certtest.NewCA(t, "cluster-ca")
	node := ca.Sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: "node"}, KeyUsage: x509.KeyUsageDigitalSignature,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	write := writeIn(t, t.TempDir())
	files := testenv.RedisTLS{CertFile: write("node.crt", node.CertPEM), KeyFile: write("node.key", node.KeyPEM), CAFile: write("ca.crt", ca.PEM), AuthClients: true}
	c := testenv.StartClusterTLS(t, 3, files, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{node.Pair(t)}, ServerName: "127.0.0.1"})
	cl := ca.Issue(t, false, []string{"throttlekit"}, "")
	sec := certtest.NewSecretDir(t, map[string][]byte{"ca.crt": ca.PEM, "tls.crt": cl.CertPEM, "tls.key": cl.KeyPEM})
	s := startServeWith(t, tlsPolicy, append([]string{"--store", "redis", "--redis-url", c.URL(), "--redis-tls-ca", sec.Path("ca.crt"),
		"--redis-tls-cert", sec.Path("tls.crt"), "--redis-tls-key", sec.Path("tls.key")}, storeDeadline...), nil)
	if s.grpcAddr == "" || s.gauge(t, "throttlekit_store_up") != 1 {
		t.Fatalf("serve %q (exit %d), want it serving with its store up:\n%s", s.grpcAddr, s.code, s.stderr.String())
	}
	// Keys spread over the slots: every node is reached.
	for i := range 30 {
		if got := askRedis(t, s, fmt.Sprint("tenant-", i)); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("check %d: %v, want OK", i, got)
		}
	}
	per := map[string]int{}
	for _, a := range c.Addrs {
		n, err := c.NodeClient(a).DBSize(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		per[a] = int(n)
	}
	for a, n := range per {
		if n == 0 {
			t.Errorf("node %s holds no key of 30 tenants (%v): it was never reached", a, per)
		}
	}
}
