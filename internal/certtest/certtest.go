// Package certtest makes certificate authorities, the certificates they
// sign, and files laid out as a Kubernetes secret volume, for tests of TLS
// listeners and clients. Every key is a new P-256 key; every certificate
// is valid from an hour before it is made to an hour after.
package certtest

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
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serial numbers every certificate the process makes, so each is told
// apart by its serial.
var serial atomic.Int64

// CA is a certificate authority made in the test. Safe for concurrent use.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte // Cert, PEM-encoded: the file a peer verifies against
	key  *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA named name (its common name).
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf is a certificate a CA signed and its private key, PEM-encoded.
type Leaf struct {
	CertPEM, KeyPEM []byte
	Serial          int64 // the certificate's serial number
}

// Issue signs a certificate naming dns (DNS names) and uri (a URI SAN, ""
// for none): a server's (for 127.0.0.1 too) or a client's.
func (ca *CA) Issue(tb testing.TB, server bool, dns []string, uri string) Leaf {
	tb.Helper()
	tmpl := &x509.Certificate{
		Subject: pkix.Name{CommonName: "leaf"}, KeyUsage: x509.KeyUsageDigitalSignature, DNSNames: dns,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	if uri != "" {
		u, err := url.Parse(uri)
		if err != nil {
			tb.Fatal(err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	return ca.Sign(tb, tmpl)
}

// Sign issues tmpl's certificate with a new key and serial number; it sets
// tmpl's SerialNumber, NotBefore and NotAfter.
func (ca *CA) Sign(tb testing.TB, tmpl *x509.Certificate) Leaf {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	n := serial.Add(1)
	tmpl.SerialNumber = big.NewInt(n)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return Leaf{pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), n}
}

// Pool is a pool of the CA alone, for a peer to verify against.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// Pair is l as a tls.Certificate, to present.
func (l Leaf) Pair(tb testing.TB) tls.Certificate {
	tb.Helper()
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// SecretDir lays files out as a Kubernetes secret volume does: each file a
// symlink through ..data to a timestamped directory, and an update a new
// directory swapped in by renaming a new ..data symlink over the old. Not
// safe for concurrent updates.
type SecretDir struct {
	dir string
	gen int
}

// NewSecretDir makes a secret volume holding files (name → content) in a
// directory the test removes when it ends.
func NewSecretDir(tb testing.TB, files map[string][]byte) *SecretDir {
	tb.Helper()
	s := &SecretDir{dir: tb.TempDir()}
	s.Update(tb, files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(s.dir, name)); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// Path is the path of the file name in the volume.
func (s *SecretDir) Path(name string) string { return filepath.Join(s.dir, name) }

// Update swaps in a new version of the files, at once, as the kubelet
// does; it names the same files NewSecretDir was given.
func (s *SecretDir) Update(tb testing.TB, files map[string][]byte) {
	tb.Helper()
	s.gen++
	gen := "..2026_11_25_" + strings.Repeat("0", 3) + string(rune('0'+s.gen))
	if err := os.Mkdir(filepath.Join(s.dir, gen), 0o755); err != nil {
		tb.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(s.dir, gen, name), b, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	tmp := filepath.Join(s.dir, "..data_tmp")
	if err := os.Symlink(gen, tmp); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "..data")); err != nil {
		tb.Fatal(err)
	}
}
