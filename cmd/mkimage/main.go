// Command mkimage builds throttlekit's OCI image without a container daemon
// (go-containerregistry): one layer on nothing (FROM scratch) holding the
// static lean binary (-tags lean) as /throttlekit, /bin/ratelimit linked to
// it (envoyproxy/ratelimit's entrypoint), the example policies under
// /etc/throttlekit/policy, the system's CA bundle (Redis and OTLP over TLS
// verify against it), and a nonroot user; run as that user (65532), the
// entrypoint `throttlekit serve`, listening on all interfaces by default
// (THROTTLEKIT_DEFAULT_*, which any other setting wins over). Every file's
// time is the Unix epoch and the entries are in order: the same inputs
// make the same digest. It writes a tarball `docker load`, `podman load`
// and crane take, tagged throttlekit:VERSION.
//
//	go run ./cmd/mkimage --binary bin/throttlekit-lean --version "$(cat VERSION)" --out out/image/throttlekit.tar
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Options is what an image is built from.
type Options struct {
	Binary   string // the static lean binary
	Version  string // the release (VERSION): the tag and a label
	Policy   string // the directory of example policies (config/)
	CABundle string // the CA bundle (PEM) to ship as /etc/ssl/certs/ca-certificates.crt
	Arch     string // the binary's GOARCH
}

// nonroot is distroless's nonroot user, which the earlier image ran as.
const nonroot = 65532

// Env is the image's environment: listen on all interfaces (a container's
// loopback is its own), the policy where the image puts it.
var Env = []string{
	"PATH=/bin",
	"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
	"THROTTLEKIT_DEFAULT_POLICY=/etc/throttlekit/policy",
	"THROTTLEKIT_DEFAULT_GRPC_ADDR=0.0.0.0:8081",
	"THROTTLEKIT_DEFAULT_HTTP_ADDR=0.0.0.0:8080",
}

// Build makes the image o describes.
func Build(o Options) (v1.Image, error) {
	layer, err := files(o)
	if err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer)), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = o.Arch, "linux"
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config = v1.Config{
		Entrypoint:   []string{"/throttlekit", "serve"},
		User:         fmt.Sprintf("%d:%d", nonroot, nonroot),
		Env:          Env,
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{"8081/tcp": {}, "8080/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "throttlekit",
			"org.opencontainers.image.description": "Rate limiting and adaptive concurrency for Envoy: RateLimitService, RLQS and ext_proc",
			"org.opencontainers.image.version":     o.Version,
			"org.opencontainers.image.licenses":    "Apache-2.0",
			"org.opencontainers.image.source":      "https://github.com/throttlekit/throttlekit",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// entry is one file of the layer.
type entry struct {
	name string
	mode int64
	body []byte
	link string // a symlink's target
	dir  bool
}

// files is the layer's tar: directories, the binary, the link, the
// policies, the CA bundle and the user, in name order, owned by root
// (writable by nobody else), every time the epoch.
func files(o Options) ([]byte, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("--binary: %w", err)
	}
	ca, err := os.ReadFile(o.CABundle)
	if err != nil {
		return nil, fmt.Errorf("--ca-bundle: %w", err)
	}
	es := []entry{
		{name: "bin/", dir: true, mode: 0o755},
		{name: "bin/ratelimit", link: "/throttlekit", mode: 0o777},
		{name: "etc/", dir: true, mode: 0o755},
		{name: "etc/group", body: fmt.Appendf(nil, "root:x:0:\nnonroot:x:%d:\n", nonroot), mode: 0o644},
		{name: "etc/passwd", body: fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot, nonroot), mode: 0o644},
		{name: "etc/ssl/", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", body: ca, mode: 0o644},
		{name: "etc/throttlekit/", dir: true, mode: 0o755},
		{name: "etc/throttlekit/policy/", dir: true, mode: 0o755},
		{name: "throttlekit", body: bin, mode: 0o755},
		{name: "tmp/", dir: true, mode: 0o1777},
	}
	err = filepath.WalkDir(o.Policy, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(o.Policy, p)
		if rel == "." {
			return nil
		}
		n := path.Join("etc/throttlekit/policy", filepath.ToSlash(rel))
		if d.IsDir() {
			es = append(es, entry{name: n + "/", dir: true, mode: 0o755})
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		es = append(es, entry{name: n, body: b, mode: 0o644})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("--policy: %w", err)
	}
	slices.SortFunc(es, func(a, b entry) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case e.dir:
			h.Typeflag = tar.TypeDir
		case e.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.body); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func main() {
	var o Options
	var out string
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fs.StringVar(&o.Binary, "binary", "bin/throttlekit-lean", "the static lean binary (CGO_ENABLED=0 go build -tags lean ./cmd/sidecar)")
	fs.StringVar(&o.Version, "version", "", "the release version (VERSION): the image's tag and label")
	fs.StringVar(&o.Policy, "policy", "config", "the example policies, shipped under /etc/throttlekit/policy")
	fs.StringVar(&o.CABundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle (PEM) shipped as /etc/ssl/certs/ca-certificates.crt")
	fs.StringVar(&o.Arch, "arch", runtime.GOARCH, "the binary's architecture")
	fs.StringVar(&out, "out", "out/image/throttlekit.tar", "where to write the image tarball")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if err := run(o, out); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

// run builds o's image and writes it to out, tagged throttlekit:VERSION.
func run(o Options, out string) error {
	if o.Version == "" {
		return errors.New("--version is required (the VERSION file's)")
	}
	tag, err := name.NewTag("throttlekit:" + o.Version)
	if err != nil {
		return fmt.Errorf("--version %q: not a valid tag: %w", o.Version, err)
	}
	img, err := Build(o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, tag, img); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s %s\n", out, tag, d)
	return nil
}
