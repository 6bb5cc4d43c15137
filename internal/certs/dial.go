package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// DialFiles are the PEM files a client (throttlekit serve dialing a Redis
// over TLS) verifies its server with and presents itself with. The zero
// value trusts the system's roots and presents no certificate.
type DialFiles struct {
	// CAFile, when set, is a CA (PEM) the server's certificate may chain
	// to, besides the system's roots (as envoyproxy/ratelimit's
	// REDIS_TLS_CACERT).
	CAFile string
	// CertFile and KeyFile, both or neither, are the certificate chain the
	// client presents (mutual TLS) and its private key.
	CertFile, KeyFile string
	// Flags name the flags that give CAFile, CertFile and KeyFile, for
	// errors: they are what a person fixes.
	Flags [3]string
}

// DialSource holds what its DialFiles hold now, and loads them again when
// they change, as Source does for a listener: at most once a second a
// handshake stats the files, and a set that does not load is logged while
// the one in use stays. Open connections keep what they were shown. Make
// one with LoadDial; safe for concurrent handshakes.
type DialSource struct {
	files[dialMaterial]
	f DialFiles
}

type dialMaterial struct {
	roots *x509.CertPool   // nil: the system's
	cert  *tls.Certificate // nil: none presented
	stat  []os.FileInfo
}

// LoadDial reads f's files and returns the DialSource that serves them;
// an error names the flag and the file.
func LoadDial(f DialFiles, log *slog.Logger) (*DialSource, error) {
	switch {
	case f.CertFile != "" && f.KeyFile == "":
		return nil, fmt.Errorf("%s needs %s (its private key)", f.Flags[1], f.Flags[2])
	case f.CertFile == "" && f.KeyFile != "":
		return nil, fmt.Errorf("%s needs %s (the certificate chain it goes with)", f.Flags[2], f.Flags[1])
	}
	s := &DialSource{f: f}
	s.files = files[dialMaterial]{interval: fileCheckInterval, now: time.Now, log: log, stat: s.stat, load: s.load,
		statOf:   func(m *dialMaterial) []os.FileInfo { return m.stat },
		reloaded: func(_, _ *dialMaterial) { s.log.Info("TLS files reloaded", "ca", s.f.CAFile, "cert", s.f.CertFile) }}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *DialSource) stat() ([]os.FileInfo, error) {
	var out []os.FileInfo
	for i, name := range []string{s.f.CAFile, s.f.CertFile, s.f.KeyFile} {
		if name == "" {
			continue
		}
		fi, err := os.Stat(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.f.Flags[i], err)
		}
		out = append(out, fi)
	}
	return out, nil
}

func (s *DialSource) load() (*dialMaterial, error) {
	st, err := s.stat()
	if err != nil {
		return nil, err
	}
	m := &dialMaterial{stat: st}
	if f := s.f.CAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.f.Flags[0], err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s %s: no PEM certificate in it", s.f.Flags[0], f)
		}
		m.roots = pool
	}
	if s.f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.f.CertFile, s.f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s %s and %s %s: %v", s.f.Flags[1], s.f.CertFile, s.f.Flags[2], s.f.KeyFile, err)
		}
		m.cert = &cert
	}
	return m, nil
}

// Config is the client's TLS configuration for a connection to the server
// named serverName (a DNS name or an IP address): each handshake presents
// the files' current certificate (when there is one) and verifies the
// server's chain against the current roots and, unless skipHostname, that
// it names serverName. skipHostname is envoyproxy/ratelimit's
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: the chain is still verified. The
// name is the caller's, not the handshake's: an IP address is never sent
// as SNI, and a check against the handshake's name would skip it.
func (s *DialSource) Config(serverName string, skipHostname bool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		// Verified in VerifyConnection, against the roots in use now.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			s.refresh()
			if c := s.cur.Load().cert; c != nil {
				return c, nil
			}
			return &tls.Certificate{}, nil // none: the server decides whether it needs one
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			s.refresh()
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server presented no certificate")
			}
			opts := x509.VerifyOptions{Roots: s.cur.Load().roots, Intermediates: x509.NewCertPool()}
			if !skipHostname {
				if serverName == "" {
					return errors.New("throttlekit: no server name to verify the certificate against")
				}
				opts.DNSName = serverName
			}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		},
	}
}
