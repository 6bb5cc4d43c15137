package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/internal/certs"
)

// redisTLS is what serve dials a rediss:// --redis-url with beyond Go's
// defaults: a private CA, a client certificate (mutual TLS), and
// envoyproxy/ratelimit's hostname switch (REDIS_TLS_CACERT,
// REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY,
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: what Envoy Gateway sets when its
// Redis uses TLS). The files are reloaded when they change
// (internal/certs), for new connections, as the gRPC listener's are.
type redisTLS struct {
	ca, cert, key string
	skipHostname  bool
}

func (t *redisTLS) define(fs *flag.FlagSet) {
	fs.StringVar(&t.ca, "redis-tls-ca", "", "with a rediss:// --redis-url: a CA (PEM file) Redis's certificate may chain to, besides the system's roots; reloaded when the file changes")
	fs.StringVar(&t.cert, "redis-tls-cert", "", "with a rediss:// --redis-url: the certificate chain (PEM file) to present to Redis (its tls-auth-clients); needs --redis-tls-key; reloaded when the file changes")
	fs.StringVar(&t.key, "redis-tls-key", "", "the private key of --redis-tls-cert (PEM file)")
	fs.BoolVar(&t.skipHostname, "redis-tls-skip-hostname-verification", false, "with a rediss:// --redis-url: verify Redis's certificate chain but not that it names the host dialed (envoyproxy/ratelimit's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION)")
}

func (t *redisTLS) set() bool {
	return t.ca != "" || t.cert != "" || t.key != "" || t.skipHostname
}

// validate says what is wrong with t for a store at redisURL.
func (t *redisTLS) validate(store, redisURL string) error {
	switch {
	case !t.set():
		return nil
	case t.cert != "" && t.key == "":
		return fmt.Errorf("--redis-tls-cert needs --redis-tls-key (its private key)")
	case t.cert == "" && t.key != "":
		return fmt.Errorf("--redis-tls-key needs --redis-tls-cert (the certificate chain it goes with)")
	case store != "redis" || !strings.HasPrefix(redisURL, "rediss"):
		return fmt.Errorf("--redis-tls-ca, --redis-tls-cert, --redis-tls-key and --redis-tls-skip-hostname-verification are for Redis over TLS: they need --store redis and a rediss:// (or rediss+cluster://) --redis-url, not %s", Redact(redisURL))
	}
	return nil
}

// dialer loads t's files: what every connection to Redis dials with, or
// nil for go-redis's own TLS (the system's roots, the URL's host name).
func (t *redisTLS) dialer(log *slog.Logger) (*redisTLSDialer, error) {
	if !t.set() {
		return nil, nil
	}
	s, err := certs.LoadDial(certs.DialFiles{CAFile: t.ca, CertFile: t.cert, KeyFile: t.key,
		Flags: [3]string{"--redis-tls-ca", "--redis-tls-cert", "--redis-tls-key"}}, log)
	if err != nil {
		return nil, err
	}
	return &redisTLSDialer{src: s, skipHostname: t.skipHostname}, nil
}

// redisTLSDialer dials Redis over TLS with --redis-tls-*'s files.
type redisTLSDialer struct {
	src          *certs.DialSource
	skipHostname bool
}

// dial is a go-redis Dialer: each connection verifies the name given
// (the URL's host), or, with none (Sentinel, Cluster: whichever node is
// dialed), the host of the address dialed.
func (d *redisTLSDialer) dial(name string, timeout time.Duration) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host := name
		if host == "" {
			host, _, _ = net.SplitHostPort(addr)
		}
		td := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}, Config: d.src.Config(host, d.skipHostname)}
		return td.DialContext(ctx, network, addr)
	}
}
