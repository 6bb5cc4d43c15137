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
