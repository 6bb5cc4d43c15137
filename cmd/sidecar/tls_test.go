package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// testCA is a certificate authority made in the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial atomic.Int64

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf is a certificate the CA signs: a server's (127.0.0.1, localhost)
// or a client's, naming dns and uri.
type leaf struct {
	certPEM, keyPEM []byte
	serial          int64
}

func (ca *testCA) issue(t *testing.T, server bool, dns []string, uri string) leaf {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject: pkix.Name{CommonName: "leaf"}, KeyUsage: x509.KeyUsageDigitalSignature, DNSNames: dns,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	if uri != "" {
		u, _ := url.Parse(uri)
		tmpl.URIs = []*url.URL{u}
	}
	return ca.sign(t, tmpl)
}

// sign issues tmpl's certificate, valid for an hour either side of now,
// with a new key and serial number.
func (ca *testCA) sign(t *testing.T, tmpl *x509.Certificate) leaf {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n := serial.Add(1)
	tmpl.SerialNumber = big.NewInt(n)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return leaf{pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), n}
}

// certPool is a pool of the CA alone, for a peer to verify against.
func (ca *testCA) certPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

func (l leaf) pair(t *testing.T) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(l.certPEM, l.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// secretDir lays files out as a Kubernetes secret volume does: each file a
// symlink through ..data to a timestamped directory, and an update a new
// directory swapped in by renaming a new ..data symlink over the old.
type secretDir struct {
	dir string
	gen int
}

func newSecretDir(t *testing.T, files map[string][]byte) *secretDir {
	t.Helper()
	s := &secretDir{dir: t.TempDir()}
	s.update(t, files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(s.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *secretDir) path(name string) string { return filepath.Join(s.dir, name) }

func (s *secretDir) update(t *testing.T, files map[string][]byte) {
	t.Helper()
	s.gen++
	gen := "..2026_11_25_" + strings.Repeat("0", 3) + string(rune('0'+s.gen))
	if err := os.Mkdir(filepath.Join(s.dir, gen), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(s.dir, gen, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(s.dir, "..data_tmp")
	if err := os.Symlink(gen, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// tlsServer serves grpc.health.v1 over TLS from src on a loopback port.
func tlsServer(t *testing.T, src *certSource) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(src.grpcConfig())))
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

func dialTLS(t *testing.T, addr string, ca *testCA, cert *tls.Certificate) *tlsClient {
	t.Helper()
	c := &tlsClient{serials: make(chan int64, 16)}
	cfg := &tls.Config{RootCAs: ca.certPool(), ServerName: "127.0.0.1",
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
	ca, other := newTestCA(t, "client-ca"), newTestCA(t, "other-ca")
	server := ca.issue(t, true, []string{"localhost"}, "")
	sec := newSecretDir(t, map[string][]byte{"tls.crt": server.certPEM, "tls.key": server.keyPEM, "ca.crt": ca.pem})
	// "": any client certificate the CA signed.
	for _, san := range []string{"", "envoy.gateway.internal", "spiffe://cluster.local/ns/eg/sa/envoy"} {
		src, err := newCertSource(listenerTLS{certFile: sec.path("tls.crt"), keyFile: sec.path("tls.key"),
			clientCAFile: sec.path("ca.crt"), clientSAN: san}, discardLog())
		if err != nil {
			t.Fatal(err)
		}
		addr := tlsServer(t, src)
		good := ca.issue(t, false, []string{"envoy.gateway.internal"}, "spiffe://cluster.local/ns/eg/sa/envoy").pair(t)
		wrongCA := other.issue(t, false, []string{"envoy.gateway.internal"}, "spiffe://cluster.local/ns/eg/sa/envoy").pair(t)
		wrongSAN := ca.issue(t, false, []string{"intruder.internal"}, "spiffe://cluster.local/ns/x/sa/y").pair(t)
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
	ca := newTestCA(t, "ca")
	first, second := ca.issue(t, true, []string{"localhost"}, ""), ca.issue(t, true, []string{"localhost"}, "")
	sec := newSecretDir(t, map[string][]byte{"tls.crt": first.certPEM, "tls.key": first.keyPEM})
	src, err := newCertSource(listenerTLS{certFile: sec.path("tls.crt"), keyFile: sec.path("tls.key")}, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	src.interval = 0 // look at the files on every handshake
	addr := tlsServer(t, src)

	before := dialTLS(t, addr, ca, nil)
	if err := before.check(); err != nil {
		t.Fatal(err)
	}
	if got := <-before.serials; got != first.serial {
		t.Fatalf("first connection shown serial %d, want %d", got, first.serial)
	}

	// A mismatched pair (the new certificate, the old key): not loaded.
	sec.update(t, map[string][]byte{"tls.crt": second.certPEM, "tls.key": first.keyPEM})
	mid := dialTLS(t, addr, ca, nil)
	if err := mid.check(); err != nil {
		t.Fatalf("a bad update broke new connections: %v", err)
	}
	if got := <-mid.serials; got != first.serial {
		t.Fatalf("after a bad update: serial %d, want the old %d", got, first.serial)
	}

	sec.update(t, map[string][]byte{"tls.crt": second.certPEM, "tls.key": second.keyPEM})
	after := dialTLS(t, addr, ca, nil)
	if err := after.check(); err != nil {
		t.Fatal(err)
	}
	if got := <-after.serials; got != second.serial {
		t.Fatalf("after the rotation a new connection was shown serial %d, want the new %d", got, second.serial)
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

func TestTLSFlagsSayWhatIsMissing(t *testing.T) {
	ca := newTestCA(t, "ca")
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	srv := ca.issue(t, true, nil, "")
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(crt, srv.certPEM, 0o600)
	os.WriteFile(key, srv.keyPEM, 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc-tls-cert", crt}, "--grpc-tls-cert needs --grpc-tls-key"},
		{[]string{"--grpc-tls-key", key}, "--grpc-tls-key needs --grpc-tls-cert"},
		{[]string{"--grpc-tls-client-ca", notPEM}, "need --grpc-tls-cert and --grpc-tls-key"},
		{[]string{"--grpc-tls-cert", crt, "--grpc-tls-key", key, "--grpc-tls-client-san", "x"}, "--grpc-tls-client-san needs --grpc-tls-client-ca"},
	} {
		if _, err := parseServe(tc.args, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
	for _, tc := range []struct {
		files listenerTLS
		want  string
	}{
		{listenerTLS{certFile: filepath.Join(dir, "missing.crt"), keyFile: key}, "missing.crt"},
		{listenerTLS{certFile: crt, keyFile: crt}, "--grpc-tls-key " + crt},
		{listenerTLS{certFile: crt, keyFile: key, clientCAFile: notPEM}, "--grpc-tls-client-ca " + notPEM + ": no PEM certificate"},
	} {
		if _, err := newCertSource(tc.files, discardLog()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.files, err, tc.want)
		}
	}
}
