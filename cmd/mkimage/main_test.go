package main

import (
	"archive/tar"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// leanBinary builds the serving binary as the image takes it: static,
// -tags lean.
func leanBinary(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "throttlekit-lean")
	cmd := exec.Command("go", "build", "-tags", "lean", "-trimpath", "-ldflags", "-s -w -X main.version=9.9.9-test", "-o", out, "./cmd/sidecar")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// TestImage (issue 42, item 5): the image mkimage writes loads as
// throttlekit:VERSION; its config runs `throttlekit serve` as nonroot with
// the listen defaults and OCI labels; its one layer holds the static lean
// binary (no interpreter, no shared library, no plotting linked: simulate
// says it is not in this build), /bin/ratelimit linked to it, the
// policies, the CA bundle and the user; the binary in it runs; and the
// same inputs make the same digest.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := leanBinary(t)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{Binary: bin, Version: "9.9.9-test", Policy: filepath.Join("..", "..", "config"), CABundle: ca, Arch: runtime.GOARCH}
	out := filepath.Join(t.TempDir(), "image.tar")
	if err := run(o, out); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("throttlekit:9.9.9-test")
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("the tarball does not load as %s: %v", tag, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	switch {
	case !slices.Equal(c.Entrypoint, []string{"/throttlekit", "serve"}):
		t.Errorf("entrypoint %q", c.Entrypoint)
	case c.User != "65532:65532":
		t.Errorf("user %q, want nonroot 65532:65532", c.User)
	case !slices.Contains(c.Env, "THROTTLEKIT_DEFAULT_GRPC_ADDR=0.0.0.0:8081") || !slices.Contains(c.Env, "THROTTLEKIT_DEFAULT_POLICY=/etc/throttlekit/policy"):
		t.Errorf("env %q", c.Env)
	case c.Labels["org.opencontainers.image.version"] != "9.9.9-test" || c.Labels["org.opencontainers.image.licenses"] != "Apache-2.0":
		t.Errorf("labels %v", c.Labels)
	case cf.OS != "linux" || cf.Architecture != runtime.GOARCH:
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	if _, ok := c.ExposedPorts["8081/tcp"]; !ok {
		t.Errorf("ports %v", c.ExposedPorts)
	}

	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v: want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]*tar.Header{}
	var binary []byte
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
		if h.Name == "throttlekit" {
			if binary, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
		if h.Uid != 0 || h.Mode&0o022 != 0 && h.Name != "tmp/" && h.Typeflag != tar.TypeSymlink {
			t.Errorf("%s: uid %d mode %o: want root's, writable by root only", h.Name, h.Uid, h.Mode)
		}
	}
	for _, want := range []string{"throttlekit", "bin/ratelimit", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "etc/throttlekit/policy/edge.yaml", "tmp/"} {
		if got[want] == nil {
			t.Errorf("the layer lacks %s", want)
		}
	}
	if h := got["bin/ratelimit"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/throttlekit" {
		t.Errorf("bin/ratelimit: %+v, want a symlink to /throttlekit", h)
	}
	if h := got["throttlekit"]; h == nil || h.Mode != 0o755 {
		t.Errorf("throttlekit: %+v, want mode 755", h)
	}

	// The binary: static, lean, and it runs.
	extracted := filepath.Join(t.TempDir(), "throttlekit")
	if err := os.WriteFile(extracted, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(extracted)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an interpreter: not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs %v: not static", libs)
	}
	f.Close()
	bi, err := buildinfo.ReadFile(extracted)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range bi.Deps {
		if strings.HasPrefix(d.Path, "gonum.org/v1/plot") || strings.Contains(d.Path, "go-latex") {
			t.Errorf("the serving binary links %s (simulate's charts): not lean", d.Path)
		}
	}
	if out, err := exec.Command(extracted, "version").CombinedOutput(); err != nil || !strings.Contains(string(out), "throttlekit 9.9.9-test") {
		t.Errorf("the image's binary: version: %v, %s", err, out)
	}
	if out, _ := exec.Command(extracted, "simulate", "--scenario", "x.yaml").CombinedOutput(); !strings.Contains(string(out), "not in this build") {
		t.Errorf("simulate in the lean binary: %s", out)
	}
	st, _ := os.Stat(extracted)
	t.Logf("lean binary %.1f MB stripped", float64(st.Size())/1e6)

	// Reproducible: the same inputs, the same digest.
	again, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds of the same inputs: %s and %s", d1, d2)
	}
}
