package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// listenerTLS is TLS on serve's listeners: the gRPC listener always when
// certFile is set, the HTTP listener too with httpToo.
type listenerTLS struct {
	certFile, keyFile string // PEM: the certificate chain and its private key
	// clientCAFile, when set, makes clients present a certificate it signed
	// (mutual TLS on the gRPC listener).
	clientCAFile string
	// clientSAN, when set, must be one of the client certificate's subject
	// alternative names (DNS name, IP address, URI or e-mail address).
	clientSAN string
	httpToo   bool
}

func (t *listenerTLS) define(fs *flag.FlagSet) {
	fs.StringVar(&t.certFile, "grpc-tls-cert", "", "serve gRPC over TLS with this certificate chain (PEM file; needs --grpc-tls-key). Reloaded when the file changes (a Kubernetes secret rotation): new connections get the new certificate, open ones keep theirs")
	fs.StringVar(&t.keyFile, "grpc-tls-key", "", "the private key of --grpc-tls-cert (PEM file)")
	fs.StringVar(&t.clientCAFile, "grpc-tls-client-ca", "", "with --grpc-tls-cert: gRPC clients must present a certificate this CA (PEM file) signed (mutual TLS); reloaded like the certificate")
	fs.StringVar(&t.clientSAN, "grpc-tls-client-san", "", "with --grpc-tls-client-ca: the client certificate must carry this subject alternative name (DNS name, IP address, URI such as a SPIFFE ID, or e-mail)")
	fs.BoolVar(&t.httpToo, "http-tls", false, "serve the HTTP listener over TLS too, with --grpc-tls-cert (no client certificate asked: probes and scrapers stay simple)")
}

func (t *listenerTLS) enabled() bool { return t.certFile != "" || t.keyFile != "" }

func (t *listenerTLS) validate() error {
	switch {
	case t.certFile != "" && t.keyFile == "":
		return errors.New("--grpc-tls-cert needs --grpc-tls-key (its private key)")
	case t.certFile == "" && t.keyFile != "":
		return errors.New("--grpc-tls-key needs --grpc-tls-cert (its certificate chain)")
	case t.certFile == "" && (t.clientCAFile != "" || t.httpToo):
		return errors.New("--grpc-tls-client-ca and --http-tls need --grpc-tls-cert and --grpc-tls-key: the server's certificate")
	case t.clientSAN != "" && t.clientCAFile == "":
		return errors.New("--grpc-tls-client-san needs --grpc-tls-client-ca: the CA that signs client certificates")
	}
	return nil
}

// tlsFileCheckInterval is how often, at most, a handshake looks whether
// the TLS files changed.
const tlsFileCheckInterval = time.Second

// certSource serves the certificate and client CA that the files of a
// listenerTLS hold now. At most once per interval a handshake stats the
// files and, when one changed (a rewrite, or the symlink swap of a
// Kubernetes secret update), loads them again; a set that does not load (a
// key that does not match its certificate, half written) is logged and the
// certificate in use stays. Open connections are never touched: a
// rotation reaches new connections only. Safe for concurrent handshakes.
type certSource struct {
	files    listenerTLS
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger

	cur     atomic.Pointer[tlsMaterial]
	checked atomic.Int64  // when the files were last looked at, Unix ns
	mu      sync.Mutex    // one reload at a time
	failed  []os.FileInfo // the files as they last failed to load; guarded by mu
}

// tlsMaterial is what one version of the files makes.
type tlsMaterial struct {
	grpc, http *tls.Config
	stat       []os.FileInfo // cert, key and CA file as loaded
	leaf       *x509.Certificate
}

// newCertSource loads the files of t; an error names the flag and the file.
func newCertSource(t listenerTLS, log *slog.Logger) (*certSource, error) {
	s := &certSource{files: t, interval: tlsFileCheckInterval, now: time.Now, log: log}
	m, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	s.checked.Store(s.now().UnixNano())
	return s, nil
}

// stat looks at the files without reading them; an error names the flag.
func (s *certSource) stat() ([]os.FileInfo, error) {
	files := [][2]string{{"--grpc-tls-cert", s.files.certFile}, {"--grpc-tls-key", s.files.keyFile}}
	if s.files.clientCAFile != "" {
		files = append(files, [2]string{"--grpc-tls-client-ca", s.files.clientCAFile})
	}
	var out []os.FileInfo
	for _, f := range files {
		fi, err := os.Stat(f[1]) // follows the symlinks of a secret volume
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f[0], err)
		}
		out = append(out, fi)
	}
	return out, nil
}

// load reads the files. It stats them first: a change made while it
// reads shows at the next check, and is loaded then.
func (s *certSource) load() (*tlsMaterial, error) {
	st, err := s.stat()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(s.files.certFile, s.files.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--grpc-tls-cert %s and --grpc-tls-key %s: %v", s.files.certFile, s.files.keyFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("--grpc-tls-cert %s: %v", s.files.certFile, err)
	}
	m := &tlsMaterial{stat: st, leaf: leaf}
	m.http = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	m.grpc = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	if s.files.clientCAFile != "" {
		pem, err := os.ReadFile(s.files.clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--grpc-tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--grpc-tls-client-ca %s: no PEM certificate in it", s.files.clientCAFile)
		}
		m.grpc.ClientCAs = pool
		m.grpc.ClientAuth = tls.RequireAndVerifyClientCert
		if san := s.files.clientSAN; san != "" {
			m.grpc.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
				if len(chains) == 0 || len(chains[0]) == 0 {
					return errors.New("throttlekit: no verified client certificate")
				}
				if leaf := chains[0][0]; !hasSAN(leaf, san) {
					return fmt.Errorf("throttlekit: the client certificate's subject alternative names (%s) do not include %q (--grpc-tls-client-san)", strings.Join(sans(leaf), ", "), san)
				}
				return nil
			}
		}
	}
	return m, nil
}

// hasSAN reports whether c names san: as a DNS name or IP address the way
// envoyproxy/ratelimit checks GRPC_CLIENT_TLS_SAN (x509 host name rules,
// wildcards included), or exactly as a URI or e-mail address.
func hasSAN(c *x509.Certificate, san string) bool {
	if c.VerifyHostname(san) == nil {
		return true
	}
	for _, u := range c.URIs {
		if u.String() == san {
			return true
		}
	}
	return slices.Contains(c.EmailAddresses, san)
}

// sans lists c's subject alternative names, for an error.
func sans(c *x509.Certificate) []string {
	out := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	out = append(out, c.EmailAddresses...)
	if len(out) == 0 {
		out = []string{"none"}
	}
	return out
}

// refresh loads the files again when the interval has passed and one of
// them changed.
func (s *certSource) refresh() {
	now := s.now().UnixNano()
	last := s.checked.Load()
	if now-last < int64(s.interval) || !s.checked.CompareAndSwap(last, now) {
		return // looked at recently, or another handshake is looking
	}
	st, err := s.stat()
	if err != nil || sameFiles(st, s.cur.Load().stat) {
		return // gone for a moment (a swap), or unchanged
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sameFiles(st, s.failed) || sameFiles(st, s.cur.Load().stat) {
		return // known not to load, or loaded meanwhile
	}
	m, err := s.load()
	if err != nil {
		s.failed = st
		s.log.Error("TLS files changed but do not load: keeping the certificate in use", "error", err)
		return
	}
	old := s.cur.Swap(m)
	s.log.Info("TLS certificate reloaded", "subject", m.leaf.Subject.String(), "not_after", m.leaf.NotAfter,
		"previous_not_after", old.leaf.NotAfter)
}

func sameFiles(a, b []os.FileInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !os.SameFile(a[i], b[i]) || !a[i].ModTime().Equal(b[i].ModTime()) || a[i].Size() != b[i].Size() {
			return false
		}
	}
	return true
}

// grpcConfig is the gRPC listener's TLS configuration: each handshake gets
// the files' current certificate, client CA and SAN check.
func (s *certSource) grpcConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			s.refresh()
			return s.cur.Load().grpc, nil
		}}
}

// httpConfig is the HTTP listener's (HTTP/1.1): the same certificate, no
// client certificate asked.
func (s *certSource) httpConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			s.refresh()
			return s.cur.Load().http, nil
		}}
}
