package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ClientFiles are what a client (throttlekit probe) dials a TLS listener
// with. The zero value is a TLS client that trusts the system's roots,
// presents no certificate and checks the name it dials.
type ClientFiles struct {
	// CAFile, when set, is the CA (PEM file) the server's certificate must
	// chain to, in place of the system's roots.
	CAFile string
	// CertFile and KeyFile, both or neither, are the certificate chain the
	// client presents (mutual TLS) and its private key.
	CertFile, KeyFile string
	// ServerName, when set, is the name the server's certificate must
	// carry, in place of the host dialed.
	ServerName string
}

// ClientConfig loads f's files once and returns the client's TLS
// configuration. Errors name probe's flags (--tls-ca, --tls-cert,
// --tls-key), which give each file.
func ClientConfig(f ClientFiles) (*tls.Config, error) {
	switch {
	case f.CertFile != "" && f.KeyFile == "":
		return nil, errors.New("--tls-cert needs --tls-key (its private key)")
	case f.CertFile == "" && f.KeyFile != "":
		return nil, errors.New("--tls-key needs --tls-cert (its certificate chain)")
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", f.CAFile)
		}
		c.RootCAs = pool
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert %s and --tls-key %s: %v", f.CertFile, f.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
