package engine_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/throttlekit/throttlekit/internal/xdstest"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/source"
)

// TestCompatSamplesOverXDS delivers every config/compat/accept sample over
// xDS instead of files: each policy file becomes a RateLimitConfig resource
// pushed by a real go-control-plane management server, with what the proto
// cannot carry (throttlekit's extensions, quota_mode, weeks...) in an
// overlay file keyed by domain. The set the xDS source builds must format
// exactly as the file set does, and the sample's expectations run against
// it on a fresh engine.
func TestCompatSamplesOverXDS(t *testing.T) {
	dirs, err := filepath.Glob("../../config/compat/accept/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no compat samples found (%v)", err)
	}
	srv := xdstest.Start(t, xdstest.Options{})
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			files := compatPolicyFiles(dir)
			fileSet, err := policy.LoadFiles(files...)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			overlay := t.TempDir()
			var cfgs []*rlsconfv3.RateLimitConfig
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				cfg, over, err := xdstest.Split(f, data)
				if err != nil {
					t.Fatal(err)
				}
				cfgs = append(cfgs, cfg)
				if over != nil {
					if err := os.WriteFile(filepath.Join(overlay, filepath.Base(f)), over, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			srv.Push(name, "v1", cfgs...)
			set := receiveSet(t, srv, source.XDSOptions{Target: srv.Addr, NodeID: name, OverlayDir: overlay, RetryInterval: 20 * time.Millisecond})

			if len(set.Domains) != len(fileSet.Domains) {
				t.Fatalf("%d domains over xDS, %d from files", len(set.Domains), len(fileSet.Domains))
			}
			for i, d := range fileSet.Domains {
				want, err := policy.Format(d, policy.Notes{})
				if err != nil {
					t.Fatal(err)
				}
				got, err := policy.Format(set.Domains[i], policy.Notes{})
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("domain %s over xDS differs from the file's:\n--- xDS\n%s--- file\n%s", d.Name, got, want)
				}
			}
			runCompatSet(t, dir, set, compatStart, engine.Options{Store: memstore.New()})
		})
	}
}

// receiveSet runs an xDS source with opts until it delivers a set, and
// returns that set; a NACK fails the test with its detail.
func receiveSet(t *testing.T, srv *xdstest.Server, opts source.XDSOptions) *policy.Set {
	t.Helper()
	src, err := source.NewXDS(opts)
	if err != nil {
		t.Fatal(err)
	}
	sets := make(chan *policy.Set, 1)
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, func(_ context.Context, set *policy.Set) error {
			select {
			case sets <- set:
			default:
			}
			return nil
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case set := <-sets:
			return set
		case <-deadline:
			t.Fatalf("no set delivered; NACKs: %q", srv.Nacks())
		case <-time.After(10 * time.Millisecond):
			if n := srv.Nacks(); len(n) > 0 {
				t.Fatalf("the push was NACKed: %s", n[0])
			}
		}
	}
}
