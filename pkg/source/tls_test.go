package source_test

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/internal/certtest"
	"github.com/throttlekit/throttlekit/internal/xdstest"
	"github.com/throttlekit/throttlekit/pkg/source"
)

// issue is a certificate for name from ca, good for a server (xds.test,
// 127.0.0.1) and a client alike, PEM-encoded.
func issue(t *testing.T, ca *certtest.CA, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	l := ca.Sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	return l.CertPEM, l.KeyPEM
}

// mtlsServer starts a management server that presents a certificate for
// xds.test and requires a client certificate from ca.
func mtlsServer(t *testing.T, ca *certtest.CA) *xdstest.Server {
	t.Helper()
	certPEM, keyPEM := issue(t, ca, "xds.test")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return xdstest.Start(t, xdstest.Options{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: ca.Pool(),
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}})
}

// TestXDSMutualTLS: with the CA, a client certificate and the server's SAN
// the push arrives; without a client certificate, with a certificate from
// another CA, or expecting another SAN, no stream ever reaches the server.
func TestXDSMutualTLS(t *testing.T) {
	ca := certtest.NewCA(t, "xds test CA")
	dir := t.TempDir()
	files := map[string][]byte{"ca.pem": ca.PEM}
	files["client.pem"], files["client-key.pem"] = issue(t, ca, "throttlekit")
	other := certtest.NewCA(t, "another CA")
	files["other.pem"], files["other-key.pem"] = issue(t, other, "throttlekit")
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f := func(name string) string { return filepath.Join(dir, name) }

	cases := []struct {
		name           string
		cert, key, san string
		orBroken       bool   // a broken connection also names the refusal (see its case)
		want           string // in the reconnect log; "" for success
	}{
		{name: "good client", cert: f("client.pem"), key: f("client-key.pem"), san: "xds.test"},
		// Under TLS 1.3 the client's handshake completes before the server
		// checks its certificate (here and from another CA): the server's
		// alert comes after, and a client whose next write lands first sees
		// the connection broken, not the alert (a loaded machine saw only
		// "broken pipe" for 10 s). Either names a refusal; no request
		// reaching the server is what proves it.
		{name: "no client certificate", san: "xds.test", want: "certificate required", orBroken: true},
		{name: "client certificate from another CA", cert: f("other.pem"), key: f("other-key.pem"), san: "xds.test", want: "unknown certificate authority", orBroken: true},
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
				named := strings.Contains(logs, tc.want) ||
					tc.orBroken && (strings.Contains(logs, "broken pipe") || strings.Contains(logs, "connection reset"))
				return strings.Count(logs, "reconnecting") >= 2 && named
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
	ca, other := certtest.NewCA(t, "xds test CA"), certtest.NewCA(t, "another CA")
	dir := t.TempDir()
	write := func(cert, key []byte) {
		for name, data := range map[string][]byte{"client.pem": cert, "client-key.pem": key} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(issue(t, other, "throttlekit"))
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := mtlsServer(t, ca)
	srv.Push("n", "v1", limitConfig("e", "edge", "k", 1))
	cfg, err := source.ClientTLS(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"), filepath.Join(dir, "ca.pem"), "xds.test")
	if err != nil {
		t.Fatal(err)
	}
	h := startSource(t, source.XDSOptions{Target: srv.Addr, NodeID: "n", TLS: cfg})
	// A refused certificate ends the attempt as the server's alert
	// ("unknown certificate authority") or, when the server has closed the
	// connection before the client reads the alert (a loaded machine), as
	// a broken pipe or reset: any ended attempt, with nothing ACKed, is the
	// old certificate refused.
	wait(t, "the first certificate refused", func() bool { return strings.Contains(h.logs.String(), "xDS stream ended; reconnecting") })
	if srv.Acked("v1") || h.appliedCount() != 0 {
		t.Fatalf("a certificate from another CA was accepted:\n%s", h.logs.String())
	}
	write(issue(t, ca, "throttlekit"))
	wait(t, "v1 ACKed with the rotated certificate", func() bool { return srv.Acked("v1") && h.appliedCount() == 1 })
}
