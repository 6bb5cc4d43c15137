package policy_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// FuzzParse: Parse never panics; on success the domain is whole (a name,
// keys, defaults filled) and Format writes it back as a file that parses to
// the same domain; on failure every error is a located *Error of the file.
func FuzzParse(f *testing.F) {
	err := filepath.WalkDir("../../config", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		data, err := os.ReadFile(path)
		if err == nil {
			f.Add(data)
		}
		return err
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("domain: d\ndescriptors: &a [{key: k, descriptors: *a}]\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: k, rate_limit: {<<: [{unit: day}], requests_per_unit: 1}}\n"))
	f.Add([]byte(costPolicy)) // the costs section
	f.Add([]byte("domain: d\ncosts:\n  - {name: c, match: {path_prefix: /}, descriptor: [{key: k, header: h}], reserve: {header: m, max: 9}, cost: {response_trailer: t}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := policy.Parse("fuzz.yaml", data)
		if err != nil {
			if d != nil {
				t.Fatal("a domain with an error")
			}
			var errs policy.Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %T %v is not a non-empty policy.Errors", err, err)
			}
			for _, e := range errs {
				if e == nil || e.Pos.File != "fuzz.yaml" || e.Msg == "" || e.Pos.Line < 0 {
					t.Fatalf("bad error %#v", e)
				}
			}
			return
		}
		if d == nil || d.Name == "" && len(d.Gates) == 0 { // a file may hold only gates
			t.Fatalf("domain %+v without a name", d)
		}
		checkTree(t, d.Descriptors, 0)
		roundTrip(t, d)
	})
}

func checkTree(t *testing.T, ds []*policy.Descriptor, depth int) {
	t.Helper()
	if depth > 64 {
		t.Fatal("deeper than 64")
	}
	for _, d := range ds {
		if d.Key == "" || d.Mode == "" || d.OnStoreError == "" {
			t.Fatalf("descriptor %+v: empty key or default", *d)
		}
		if d.Lease != (policy.Lease{WindowCoupled: d.Lease.WindowCoupled}) && d.Mode != policy.Leased {
			t.Fatalf("lease %+v without mode leased", d.Lease)
		}
		for _, l := range d.Limits {
			if l.Algorithm == "" || l.UnitMultiplier == 0 {
				t.Fatalf("limit %+v: defaults not filled", *l)
			}
			if l.Unlimited != (l.Unit == "") || (!l.Unlimited && l.Unit.Duration() == 0) {
				t.Fatalf("limit %+v: unit and unlimited disagree", *l)
			}
			if l.Burst != 0 && l.Algorithm != policy.GCRA && l.Algorithm != policy.TokenBucket {
				t.Fatalf("limit %+v: burst without a bucket", *l)
			}
		}
		checkTree(t, d.Descriptors, depth+1)
	}
}
