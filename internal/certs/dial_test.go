package certs

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/internal/certtest"
)

// echoTLS serves TLS with leaf on a loopback port, asking for a client
// certificate pool signed when pool is set; it answers each handshake's
// client certificate count on the connection.
func echoTLS(t *testing.T, leaf certtest.Leaf, pool *x509.CertPool) string {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{leaf.Pair(t)}}
	if pool != nil {
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err == nil {
					_, _ = c.Write([]byte{byte(len(c.(*tls.Conn).ConnectionState().PeerCertificates))})
				}
			}()
		}
	}()
	return lis.Addr().String()
}

// handshake dials addr with cfg and reads the server's answer.
func handshake(addr string, cfg *tls.Config) error {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = io.ReadFull(c, make([]byte, 1))
	return err
}

func writeFiles(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var dialFlags = [3]string{"--redis-tls-ca", "--redis-tls-cert", "--redis-tls-key"}

// TestDialVerifiesTheNameGiven: the server's chain is verified against the
// CA file, and its name against the one the caller gives, an IP address
// included (an IP is never sent as SNI: a check against the handshake's
// name skipped it, and a certificate for another host passed); with
// skipHostname only the chain is.
func TestDialVerifiesTheNameGiven(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	other := certtest.NewCA(t, "other")
	leaf := ca.Sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: "redis"}, KeyUsage: x509.KeyUsageDigitalSignature,
		DNSNames: []string{"redis.internal"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	addr := echoTLS(t, leaf, nil)
	dir := writeFiles(t, map[string][]byte{"ca.crt": ca.PEM, "other.crt": other.PEM})
	src, err := LoadDial(DialFiles{CAFile: filepath.Join(dir, "ca.crt"), Flags: dialFlags}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var host x509.HostnameError
	if err := handshake(addr, src.Config("127.0.0.1", false)); !errors.As(err, &host) {
		t.Errorf("dialing 127.0.0.1, a certificate for redis.internal: %v, want a host name error", err)
	}
	if err := handshake(addr, src.Config("redis.internal", false)); err != nil {
		t.Errorf("the name it carries: %v", err)
	}
	if err := handshake(addr, src.Config("127.0.0.1", true)); err != nil {
		t.Errorf("the name skipped, the chain good: %v", err)
	}
	wrong, err := LoadDial(DialFiles{CAFile: filepath.Join(dir, "other.crt"), Flags: dialFlags}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var unknown x509.UnknownAuthorityError
	if err := handshake(addr, wrong.Config("redis.internal", true)); !errors.As(err, &unknown) {
		t.Errorf("another CA, the name skipped: %v, want an unknown authority", err)
	}
}

// TestDialPresentsTheClientCertificate: a server that asks for a client
// certificate gets the files' one; a rotation of the files reaches the next
// connection.
func TestDialPresentsTheClientCertificate(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	addr := echoTLS(t, ca.Issue(t, true, []string{"localhost"}, ""), ca.Pool())
	sec := certtest.NewSecretDir(t, map[string][]byte{"ca.crt": ca.PEM, "tls.crt": []byte("not yet"), "tls.key": []byte("not yet")})
	if _, err := LoadDial(DialFiles{CAFile: sec.Path("ca.crt"), CertFile: sec.Path("tls.crt"), KeyFile: sec.Path("tls.key"), Flags: dialFlags}, slog.New(slog.DiscardHandler)); err == nil ||
		!strings.Contains(err.Error(), "--redis-tls-cert") {
		t.Fatalf("a certificate that does not load: %v, want an error naming --redis-tls-cert", err)
	}
	c1 := ca.Issue(t, false, []string{"one"}, "")
	sec.Update(t, map[string][]byte{"ca.crt": ca.PEM, "tls.crt": c1.CertPEM, "tls.key": c1.KeyPEM})
	src, err := LoadDial(DialFiles{CAFile: sec.Path("ca.crt"), CertFile: sec.Path("tls.crt"), KeyFile: sec.Path("tls.key"), Flags: dialFlags}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(addr, src.Config("127.0.0.1", false)); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if leaf, _ := x509.ParseCertificate(src.cur.Load().cert.Certificate[0]); leaf.SerialNumber.Int64() != c1.Serial {
		t.Fatalf("presenting serial %v, want %d", leaf.SerialNumber, c1.Serial)
	}
	c2 := ca.Issue(t, false, []string{"two"}, "")
	sec.Update(t, map[string][]byte{"ca.crt": ca.PEM, "tls.crt": c2.CertPEM, "tls.key": c2.KeyPEM})
	src.interval = 0 // look at the files at every handshake
	if err := handshake(addr, src.Config("127.0.0.1", false)); err != nil {
		t.Fatalf("after the rotation: %v", err)
	}
	if leaf, _ := x509.ParseCertificate(src.cur.Load().cert.Certificate[0]); leaf.SerialNumber.Int64() != c2.Serial {
		t.Errorf("after the rotation presenting serial %v, want %d", leaf.SerialNumber, c2.Serial)
	}
	if _, err := LoadDial(DialFiles{CertFile: sec.Path("tls.crt"), Flags: dialFlags}, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--redis-tls-cert needs --redis-tls-key") {
		t.Errorf("a certificate without its key: %v", err)
	}
}
