// Package certs serves a TLS listener's certificate, and the CA its
// clients' certificates must chain to, from PEM files, and loads them
// again when they change: a rewrite, or the symlink swap of a Kubernetes
// secret update. A rotation reaches new connections; open ones keep the
// certificate they were shown. ClientConfig is the other side: the TLS a
// client (throttlekit probe) dials such a listener with.
//
// Errors name the serve flag that gives each file (--grpc-tls-cert,
// --grpc-tls-key, --grpc-tls-client-ca, --grpc-tls-client-san): they are
// what a person fixes.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"
)

// Files are the PEM files a listener's TLS comes from. The zero value
// names none: Load then fails, naming --grpc-tls-cert.
type Files struct {
	CertFile, KeyFile string // the certificate chain and its private key
	// ClientCAFile, when set, makes clients present a certificate it
	// signed (mutual TLS; GRPCConfig only).
	ClientCAFile string
	// ClientSAN, when set with ClientCAFile, must be one of the client
	// certificate's subject alternative names (DNS name, IP address, URI or
	// e-mail address).
	ClientSAN string
}

// fileCheckInterval is how often, at most, a handshake looks whether
// the TLS files changed.
const fileCheckInterval = time.Second

// Source serves the certificate and client CA that its Files hold now. At
// most once a second (fileCheckInterval) a handshake stats the files and,
// when one changed (a rewrite, or the symlink swap of a Kubernetes secret
// update), loads them again; a set that does not load (a key that does not
// match its certificate, half written) is logged and the certificate in
// use stays. Open connections are never touched: a rotation reaches new
// connections only. Make one with Load; safe for concurrent handshakes.
type Source struct {
	files[material]
	f Files
}

// material is what one version of the files makes.
type material struct {
	grpc, http *tls.Config
	stat       []os.FileInfo // cert, key and CA file as loaded
	leaf       *x509.Certificate
}

// Load reads f's files and returns the Source that serves them; an error
// names the flag and the file. log is where reloads are said.
func Load(f Files, log *slog.Logger) (*Source, error) {
	s := &Source{f: f}
	s.files = files[material]{interval: fileCheckInterval, now: time.Now, log: log, stat: s.stat, load: s.load,
		statOf: func(m *material) []os.FileInfo { return m.stat },
		reloaded: func(old, m *material) {
			s.log.Info("TLS certificate reloaded", "subject", m.leaf.Subject.String(), "not_after", m.leaf.NotAfter,
				"previous_not_after", old.leaf.NotAfter)
		}}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

// stat looks at the files without reading them; an error names the flag.
func (s *Source) stat() ([]os.FileInfo, error) {
	files := [][2]string{{"--grpc-tls-cert", s.f.CertFile}, {"--grpc-tls-key", s.f.KeyFile}}
	if s.f.ClientCAFile != "" {
		files = append(files, [2]string{"--grpc-tls-client-ca", s.f.ClientCAFile})
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
func (s *Source) load() (*material, error) {
	st, err := s.stat()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(s.f.CertFile, s.f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("--grpc-tls-cert %s and --grpc-tls-key %s: %v", s.f.CertFile, s.f.KeyFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("--grpc-tls-cert %s: %v", s.f.CertFile, err)
	}
	m := &material{stat: st, leaf: leaf}
	m.http = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	m.grpc = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	if s.f.ClientCAFile != "" {
		pem, err := os.ReadFile(s.f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--grpc-tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--grpc-tls-client-ca %s: no PEM certificate in it", s.f.ClientCAFile)
		}
		m.grpc.ClientCAs = pool
		m.grpc.ClientAuth = tls.RequireAndVerifyClientCert
		// The HTTP listener asks for the same certificate without
		// requiring it (probes and scrapers need none); the handlers that
		// act for a client check it (Source.Client).
		m.http.ClientCAs = pool
		m.http.ClientAuth = tls.VerifyClientCertIfGiven
		if san := s.f.ClientSAN; san != "" {
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

// Client returns nil when st, an HTTP request's TLS state, carries a
// client certificate the gRPC listener would accept: verified against the
// client CA, and naming the client SAN when one is set. Otherwise an error
// says what is missing. With no client CA any client is accepted.
func (s *Source) Client(st *tls.ConnectionState) error {
	if s.f.ClientCAFile == "" {
		return nil
	}
	if st == nil || len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return errors.New("a client certificate signed by --grpc-tls-client-ca is required, as on the gRPC listener")
	}
	if san := s.f.ClientSAN; san != "" {
		if leaf := st.VerifiedChains[0][0]; !hasSAN(leaf, san) {
			return fmt.Errorf("the client certificate's subject alternative names (%s) do not include %q (--grpc-tls-client-san)", strings.Join(sans(leaf), ", "), san)
		}
	}
	return nil
}

// MutualTLS reports whether clients must present a certificate.
func (s *Source) MutualTLS() bool { return s.f.ClientCAFile != "" }

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

// GRPCConfig is the gRPC listener's TLS configuration (h2): each handshake
// gets the files' current certificate, client CA and SAN check.
func (s *Source) GRPCConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			s.refresh()
			return s.cur.Load().grpc, nil
		}}
}

// HTTPConfig is the HTTP listener's (HTTP/1.1): the same certificate; a
// client certificate is asked for, not required, with a client CA (Client
// checks it for the handlers that need one).
func (s *Source) HTTPConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			s.refresh()
			return s.cur.Load().http, nil
		}}
}
