package source_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/xdstest"
	"github.com/throttlekit/throttlekit/pkg/source"
)

// testCA issues certificates for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key for dnsName, for servers and
// clients alike.
func (ca *testCA) issue(t *testing.T, dnsName string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: dnsName},
		DNSNames: []string{dnsName}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// mtlsServer starts a management server that presents a certificate for
// xds.test and requires a client certificate from ca.
func mtlsServer(t *testing.T, ca *testCA) *xdstest.Server {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, "xds.test")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return xdstest.Start(t, xdstest.Options{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}})
}

// TestXDSMutualTLS: with the CA, a client certificate and the server's SAN
// the push arrives; without a client certificate, with a certificate from
// another CA, or expecting another SAN, no stream ever reaches the server.
func TestXDSMutualTLS(t *testing.T) {
	ca := newCA(t, "xds test CA")
	dir := t.TempDir()
	files := map[string][]byte{"ca.pem": ca.pem}
	files["client.pem"], files["client-key.pem"] = ca.issue(t, "throttlekit")
	other := newCA(t, "another CA")
	files["other.pem"], files["other-key.pem"] = other.issue(t, "throttlekit")
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f := func(name string) string { return filepath.Join(dir, name) }

	cases := []struct {
		name           string
		cert, key, san string
		want           string // in the reconnect log; "" for success
	}{
		{name: "good client", cert: f("client.pem"), key: f("client-key.pem"), san: "xds.test"},
		{name: "no client certificate", san: "xds.test", want: "certificate required"},
		{name: "client certificate from another CA", cert: f("other.pem"), key: f("other-key.pem"), san: "xds.test", want: "unknown certificate authority"},
		{name: "wrong SAN", cert: f("client.pem"), key: f("client-key.pem"), san: "not-xds.test", want: "not-xds.test"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := mtlsServer(t, ca)
			srv.Push("n", "v1", limitConfig("e", "edge", "k", 1))
			cfg, err := source.ClientTLS(tc.cert, tc.key, f("ca.pem"), tc.san)
			if err != nil {
				t.Fatal(err)
			}
			h := startSource(t, source.XDSOptions{Target: srv.Addr, NodeID: "n", TLS: cfg})
			if tc.want == "" {
				wait(t, "v1 ACKed over mTLS", func() bool { return srv.Acked("v1") && h.appliedCount() == 1 })
				return
			}
			defer func() {
				if t.Failed() {
					t.Log(h.logs.String())
				}
			}()
			wait(t, "two failed attempts naming "+tc.want, func() bool {
				logs := h.logs.String()
				return strings.Count(logs, "reconnecting") >= 2 && strings.Contains(logs, tc.want)
			})
			if n := len(srv.Requests()); n != 0 || h.appliedCount() != 0 {
				t.Fatalf("%d requests reached the server, %d sets applied: the TLS check let the client in", n, h.appliedCount())
			}
		})
	}
}

// TestClientTLSErrors: bad files are named, the key file's contents never.
func TestClientTLSErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "junk.pem", "not a certificate")
	writeFile(t, dir, "key.pem", "-----BEGIN EC PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END EC PRIVATE KEY-----\n")
	for _, tc := range []struct{ name, cert, key, ca, want string }{
		{"missing CA", "", "", filepath.Join(dir, "nope.pem"), "nope.pem"},
		{"CA not PEM", "", "", filepath.Join(dir, "junk.pem"), "no PEM certificate"},
		{"cert without key", filepath.Join(dir, "junk.pem"), "", "", "give both files or neither"},
		{"bad pair", filepath.Join(dir, "junk.pem"), filepath.Join(dir, "key.pem"), "", "junk.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := source.ClientTLS(tc.cert, tc.key, tc.ca, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "c2VjcmV0") {
				t.Fatalf("the error quotes the key: %v", err)
			}
		})
	}
}

// TestXDSClientCertificateRotation: the client certificate is read at each
// connection: one the server refuses, replaced in place by a good one (as
// a Kubernetes secret rotates), is used at the next attempt.
func TestXDSClientCertificateRotation(t *testing.T) {
	ca, other := newCA(t, "xds test CA"), newCA(t, "another CA")
	dir := t.TempDir()
	write := func(cert, key []byte) {
		for name, data := range map[string][]byte{"client.pem": cert, "client-key.pem": key} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(other.issue(t, "throttlekit"))
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := mtlsServer(t, ca)
	srv.Push("n", "v1", limitConfig("e", "edge", "k", 1))
	cfg, err := source.ClientTLS(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"), filepath.Join(dir, "ca.pem"), "xds.test")
	if err != nil {
		t.Fatal(err)
	}
	h := startSource(t, source.XDSOptions{Target: srv.Addr, NodeID: "n", TLS: cfg})
	wait(t, "the first certificate refused", func() bool { return strings.Contains(h.logs.String(), "unknown certificate authority") })
	write(ca.issue(t, "throttlekit"))
	wait(t, "v1 ACKed with the rotated certificate", func() bool { return srv.Acked("v1") && h.appliedCount() == 1 })
}
