package source

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ClientTLS builds the TLS configuration to dial an xDS server with, from
// files as envoyproxy/ratelimit takes them: caFile verifies the server
// (empty: the system's roots); certFile and keyFile, both or neither, are
// this client's certificate for mutual TLS; san, when set, is the name the
// server's certificate must carry (instead of the target's host). The
// client certificate is read again at each connection, so a rotated one
// (a Kubernetes secret) is used from the next connection on. Errors name
// the file; the key's contents are never part of one.
func ClientTLS(certFile, keyFile, caFile, san string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: san}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("xDS server CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("xDS server CA %s: no PEM certificate in it", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		load := func() (*tls.Certificate, error) {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("xDS client certificate %s and key %s: %w", certFile, keyFile, err)
			}
			return &cert, nil
		}
		if _, err := load(); err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return load() }
	case certFile != "" || keyFile != "":
		return nil, errors.New("xDS client certificate and key go together: give both files or neither")
	}
	return cfg, nil
}
