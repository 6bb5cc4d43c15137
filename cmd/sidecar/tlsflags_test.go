package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/internal/certtest"
)

// TestTLSFlagsSayWhatIsMissing: TLS flags given without the ones they need
// stop serve, naming what is missing. (Loading the files, mutual TLS and
// rotation: internal/certs.)
func TestTLSFlagsSayWhatIsMissing(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	srv := ca.Issue(t, true, nil, "")
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(crt, srv.CertPEM, 0o600)
	os.WriteFile(key, srv.KeyPEM, 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc-tls-cert", crt}, "--grpc-tls-cert needs --grpc-tls-key"},
		{[]string{"--grpc-tls-key", key}, "--grpc-tls-key needs --grpc-tls-cert"},
		{[]string{"--grpc-tls-client-ca", notPEM}, "need --grpc-tls-cert and --grpc-tls-key"},
		{[]string{"--grpc-tls-cert", crt, "--grpc-tls-key", key, "--grpc-tls-client-san", "x"}, "--grpc-tls-client-san needs --grpc-tls-client-ca"},
	} {
		if _, err := parseServe(tc.args, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestTLSErrorsNameTheVariableSet (issue 42, item 6): a TLS file given by a
// variable (THROTTLEKIT_GRPC_TLS_CERT, or envoyproxy/ratelimit's
// GRPC_SERVER_TLS_CERT) that does not load, or a flag that needs another,
// is named with that variable; they named the flag alone, which the
// person who set the variable never wrote.
func TestTLSErrorsNameTheVariableSet(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"THROTTLEKIT_GRPC_TLS_CERT": missing, "THROTTLEKIT_GRPC_TLS_KEY": missing}, "--grpc-tls-cert (THROTTLEKIT_GRPC_TLS_CERT)"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": missing, "GRPC_SERVER_TLS_KEY": missing}, "--grpc-tls-cert (from GRPC_SERVER_USE_TLS, GRPC_SERVER_TLS_CERT)"},
		{map[string]string{"THROTTLEKIT_REDIS_TLS_CERT": missing, "THROTTLEKIT_STORE": "redis", "THROTTLEKIT_REDIS_URL": "rediss://127.0.0.1:1/0"}, "--redis-tls-cert (THROTTLEKIT_REDIS_TLS_CERT) needs --redis-tls-key"},
	} {
		s := startServe(t, nil, tc.env)
		if s.grpcAddr != "" || !strings.Contains(s.stderr.String(), tc.want) {
			t.Errorf("%v: serve %q, output:\n%s\nwant it stopped, saying %q", tc.env, s.grpcAddr, s.stderr.String(), tc.want)
		}
	}
}
