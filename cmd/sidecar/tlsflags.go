package main

import (
	"errors"
	"flag"

	"github.com/throttlekit/throttlekit/internal/certs"
)

// listenerTLS is TLS on serve's listeners: the gRPC listener always when
// CertFile is set, the HTTP listener too with httpToo. internal/certs
// loads the files and reloads them when they change.
type listenerTLS struct {
	certs.Files
	httpToo bool
}

func (t *listenerTLS) define(fs *flag.FlagSet) {
	fs.StringVar(&t.CertFile, "grpc-tls-cert", "", "serve gRPC over TLS with this certificate chain (PEM file; needs --grpc-tls-key). Reloaded when the file changes (a Kubernetes secret rotation): new connections get the new certificate, open ones keep theirs")
	fs.StringVar(&t.KeyFile, "grpc-tls-key", "", "the private key of --grpc-tls-cert (PEM file)")
	fs.StringVar(&t.ClientCAFile, "grpc-tls-client-ca", "", "with --grpc-tls-cert: gRPC clients must present a certificate this CA (PEM file) signed (mutual TLS); reloaded like the certificate")
	fs.StringVar(&t.ClientSAN, "grpc-tls-client-san", "", "with --grpc-tls-client-ca: the client certificate must carry this subject alternative name (DNS name, IP address, URI such as a SPIFFE ID, or e-mail)")
	fs.BoolVar(&t.httpToo, "http-tls", false, "serve the HTTP listener over TLS too, with --grpc-tls-cert; with --grpc-tls-client-ca a client certificate is asked for, not required (probes and scrapers stay simple), and /json, which spends budgets, requires the one gRPC requires")
}

func (t *listenerTLS) enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

func (t *listenerTLS) validate() error {
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return errors.New("--grpc-tls-cert needs --grpc-tls-key (its private key)")
	case t.CertFile == "" && t.KeyFile != "":
		return errors.New("--grpc-tls-key needs --grpc-tls-cert (its certificate chain)")
	case t.CertFile == "" && (t.ClientCAFile != "" || t.httpToo):
		return errors.New("--grpc-tls-client-ca and --http-tls need --grpc-tls-cert and --grpc-tls-key: the server's certificate")
	case t.ClientSAN != "" && t.ClientCAFile == "":
		return errors.New("--grpc-tls-client-san needs --grpc-tls-client-ca: the CA that signs client certificates")
	}
	return nil
}
