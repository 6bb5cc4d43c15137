package engine_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// TestDomainLength: a domain longer than MaxDomainBytes is an invalid
// request whose error names the bound, whether or not a descriptor carries
// its own limit (which would otherwise write a counter keyed by the domain);
// a domain of exactly MaxDomainBytes is answered.
func TestDomainLength(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"edge.yaml": edge})
	withOverride := func(domain string) *engine.Request {
		r := req(domain, "custom=1")
		r.Descriptors[0].Override = &engine.Override{RequestsPerUnit: 5, Unit: policy.Minute}
		return r
	}
	for _, tc := range []struct {
		name string
		req  *engine.Request
		ok   bool
	}{
		{"at the bound", req(strings.Repeat("d", engine.MaxDomainBytes), "remote_address=10.0.0.1"), true},
		{"at the bound, override", withOverride(strings.Repeat("d", engine.MaxDomainBytes)), true},
		{"one byte over", req(strings.Repeat("d", engine.MaxDomainBytes+1), "remote_address=10.0.0.1"), false},
		{"1 MiB", req(strings.Repeat("d", 1<<20), "remote_address=10.0.0.1"), false},
		{"1 MiB, override", withOverride(strings.Repeat("d", 1<<20)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := e.Decide(bg, tc.req, t0)
			if tc.ok {
				if err != nil || resp.Code != engine.CodeOK {
					t.Fatalf("Decide = %v, %v; want OK", resp, err)
				}
				return
			}
			if !errors.Is(err, engine.ErrInvalidRequest) {
				t.Fatalf("err = %v, want ErrInvalidRequest", err)
			}
			if want := "at most 256 bytes"; !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %q, want it to name the bound (%q)", err, want)
			}
		})
	}
}
