package certs

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/throttlekit/throttlekit/internal/certtest"
)

// tlsServer serves grpc.health.v1 over TLS from src on a loopback port.
func tlsServer(t *testing.T, src *Source) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(src.GRPCConfig())))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// tlsClient connects to addr trusting ca, presenting cert (if any), and
// records the serial of every server certificate it is shown.
type tlsClient struct {
	conn    *grpc.ClientConn
	serials chan int64
}

func dialTLS(t *testing.T, addr string, ca *certtest.CA, cert *tls.Certificate) *tlsClient {
	t.Helper()
	c := &tlsClient{serials: make(chan int64, 16)}
	cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1",
		VerifyConnection: func(cs tls.ConnectionState) error {
			select {
			case c.serials <- cs.PeerCertificates[0].SerialNumber.Int64():
			default: // a client refused again and again (its retries)
			}
			return nil
		}}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c.conn = conn
	return c
}

// check makes one health call; it fails when the handshake does.
func (c *tlsClient) check() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := healthpb.NewHealthClient(c.conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false))
	return err
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestMutualTLSChecksClients: a client with a certificate the CA signed
// and the SAN asked for (if one is) gets in; no certificate, another CA's,
// or one without the SAN does not.
func TestMutualTLSChecksClients(t *testing.T) {
	ca, other := certtest.NewCA(t, "client-ca"), certtest.NewCA(t, "other-ca")
	server := ca.Issue(t, true, []string{"localhost"}, "")
	sec := certtest.NewSecretDir(t, map[string][]byte{"tls.crt": server.CertPEM, "tls.key": server.KeyPEM, "ca.crt": ca.PEM})
	// "": any client certificate the CA signed.
	for _, san := range []string{"", "envoy.gateway.internal", "spiffe://cluster.local/ns/eg/sa/envoy"} {
		src, err := Load(Files{CertFile: sec.Path("tls.crt"), KeyFile: sec.Path("tls.key"),
			ClientCAFile: sec.Path("ca.crt"), ClientSAN: san}, discardLog())
		if err != nil {
			t.Fatal(err)
		}
		addr := tlsServer(t, src)
		good := ca.Issue(t, false, []string{"envoy.gateway.internal"}, "spiffe://cluster.local/ns/eg/sa/envoy").Pair(t)
		wrongCA := other.Issue(t, false, []string{"envoy.gateway.internal"}, "spiffe://cluster.local/ns/eg/sa/envoy").Pair(t)
		wrongSAN := ca.Issue(t, false, []string{"intruder.internal"}, "spiffe://cluster.local/ns/x/sa/y").Pair(t)
		for _, tc := range []struct {
			name string
			cert *tls.Certificate
			ok   bool
		}{
			{"good client", &good, true},
			{"no client certificate", nil, false},
			{"another CA", &wrongCA, false},
			{"wrong SAN", &wrongSAN, san == ""},
		} {
			t.Run(san+"/"+tc.name, func(t *testing.T) {
				err := dialTLS(t, addr, ca, tc.cert).check()
				if tc.ok && err != nil {
					t.Fatalf("refused: %v", err)
				}
				if !tc.ok && err == nil {
					t.Fatal("let in")
				}
			})
		}
	}
}

// TestTLSRotation: after a secret update (a ..data symlink swap) a new
// connection is shown the new certificate, while a connection opened
// before keeps working on the old one; a half-written update (a key that
// does not match) keeps the certificate in use.
func TestTLSRotation(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	first, second := ca.Issue(t, true, []string{"localhost"}, ""), ca.Issue(t, true, []string{"localhost"}, "")
	sec := certtest.NewSecretDir(t, map[string][]byte{"tls.crt": first.CertPEM, "tls.key": first.KeyPEM})
	src, err := Load(Files{CertFile: sec.Path("tls.crt"), KeyFile: sec.Path("tls.key")}, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	src.interval = 0 // look at the files on every handshake
	addr := tlsServer(t, src)

	before := dialTLS(t, addr, ca, nil)
	if err := before.check(); err != nil {
		t.Fatal(err)
	}
	if got := <-before.serials; got != first.Serial {
		t.Fatalf("first connection shown serial %d, want %d", got, first.Serial)
	}

	// A mismatched pair (the new certificate, the old key): not loaded.
	sec.Update(t, map[string][]byte{"tls.crt": second.CertPEM, "tls.key": first.KeyPEM})
	mid := dialTLS(t, addr, ca, nil)
	if err := mid.check(); err != nil {
		t.Fatalf("a bad update broke new connections: %v", err)
	}
	if got := <-mid.serials; got != first.Serial {
		t.Fatalf("after a bad update: serial %d, want the old %d", got, first.Serial)
	}

	sec.Update(t, map[string][]byte{"tls.crt": second.CertPEM, "tls.key": second.KeyPEM})
	after := dialTLS(t, addr, ca, nil)
	if err := after.check(); err != nil {
		t.Fatal(err)
	}
	if got := <-after.serials; got != second.Serial {
		t.Fatalf("after the rotation a new connection was shown serial %d, want the new %d", got, second.Serial)
	}
	// The connection opened before: same connection, no new handshake,
	// still answering.
	for range 3 {
		if err := before.check(); err != nil {
			t.Fatalf("the connection opened before the rotation broke: %v", err)
		}
	}
	select {
	case s := <-before.serials:
		t.Fatalf("the old connection handshook again (serial %d)", s)
	default:
	}
}

// TestLoadSaysWhatIsWrong: a file that is missing, a key that is not the
// certificate's, a CA file without a certificate: the error names the flag
// and the file.
func TestLoadSaysWhatIsWrong(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	srv := ca.Issue(t, true, nil, "")
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(crt, srv.CertPEM, 0o600)
	os.WriteFile(key, srv.KeyPEM, 0o600)
	for _, tc := range []struct {
		files Files
		want  string
	}{
		{Files{CertFile: filepath.Join(dir, "missing.crt"), KeyFile: key}, "missing.crt"},
		{Files{CertFile: crt, KeyFile: crt}, "--grpc-tls-key " + crt},
		{Files{CertFile: crt, KeyFile: key, ClientCAFile: notPEM}, "--grpc-tls-client-ca " + notPEM + ": no PEM certificate"},
	} {
		if _, err := Load(tc.files, discardLog()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.files, err, tc.want)
		}
	}
}

// TestReloadWaitsForTheInterval: a handshake looks at the files at most
// once per interval, so a rotation shows only once the interval has
// passed, on a fake timeline.
func TestReloadWaitsForTheInterval(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	first, second := ca.Issue(t, true, nil, ""), ca.Issue(t, true, nil, "")
	sec := certtest.NewSecretDir(t, map[string][]byte{"tls.crt": first.CertPEM, "tls.key": first.KeyPEM})
	t0 := time.Unix(1_800_000_000, 0)
	now := t0
	src, err := Load(Files{CertFile: sec.Path("tls.crt"), KeyFile: sec.Path("tls.key")}, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	src.now = func() time.Time { return now }
	src.checked.Store(t0.UnixNano())
	serving := func() int64 { return src.cur.Load().leaf.SerialNumber.Int64() }

	sec.Update(t, map[string][]byte{"tls.crt": second.CertPEM, "tls.key": second.KeyPEM})
	for _, step := range []struct {
		at   time.Duration // after t0
		want int64
	}{
		{0, first.Serial},
		{fileCheckInterval - time.Nanosecond, first.Serial},
		{fileCheckInterval, second.Serial},
	} {
		now = t0.Add(step.at)
		src.refresh()
		if got := serving(); got != step.want {
			t.Errorf("t0+%v: serving serial %d, want %d", step.at, got, step.want)
		}
	}
}
