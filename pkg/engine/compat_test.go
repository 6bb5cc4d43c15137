package engine_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// The expect.yaml format of config/compat/README.md.
type compatFile struct {
	Cases []compatCase `yaml:"cases"`
}

type compatCase struct {
	Name        string             `yaml:"name"`
	Domain      string             `yaml:"domain"`
	Descriptors []compatDescriptor `yaml:"descriptors"`
	HitsAddend  uint32             `yaml:"hits_addend"`
	Repeat      int                `yaml:"repeat"`
	Advance     string             `yaml:"advance"`
	Want        struct {
		Overall  string         `yaml:"overall"`
		Statuses []compatStatus `yaml:"statuses"`
	} `yaml:"want"`
}

type compatEntry struct {
	Key   string `yaml:"key"`
	Value string `yaml:"value"`
}

// compatDescriptor is either a list of entries or {entries, hits_addend}.
type compatDescriptor struct {
	Entries    []compatEntry
	HitsAddend *uint64
}

func (d *compatDescriptor) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		return n.Decode(&d.Entries)
	}
	var long struct {
		Entries    []compatEntry `yaml:"entries"`
		HitsAddend *uint64       `yaml:"hits_addend"`
	}
	if err := n.Decode(&long); err != nil {
		return err
	}
	d.Entries, d.HitsAddend = long.Entries, long.HitsAddend
	return nil
}

// compatStatus records which fields are present: an absent field is not
// checked, `limit: null` checks that no limit applied.
type compatStatus struct {
	Code       *string
	Remaining  *uint32
	LimitSet   bool
	Limit      *compatLimit
	UntilReset *string
}

type compatLimit struct {
	RequestsPerUnit *uint32 `yaml:"requests_per_unit"`
	Unit            *string `yaml:"unit"`
	Name            *string `yaml:"name"`
}

func (s *compatStatus) UnmarshalYAML(n *yaml.Node) error {
	var raw struct {
		Code       *string      `yaml:"code"`
		Remaining  *uint32      `yaml:"remaining"`
		Limit      *compatLimit `yaml:"limit"`
		UntilReset *string      `yaml:"duration_until_reset"`
	}
	if err := n.Decode(&raw); err != nil {
		return err
	}
	s.Code, s.Remaining, s.Limit, s.UntilReset = raw.Code, raw.Remaining, raw.Limit, raw.UntilReset
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "limit" {
			s.LimitSet = true
		}
	}
	return nil
}

// compatStart is where the samples' timeline starts: their expected
// durations until reset are written for it.
var compatStart = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// TestCompatSamples replays every config/compat/accept sample against the
// real engine on the in-memory store, from 2024-01-01T00:00:00Z on a fake
// clock, and checks every expected answer.
func TestCompatSamples(t *testing.T) {
	runCompatSamples(t, compatStart, func(*testing.T, string) engine.Options {
		return engine.Options{Store: memstore.New()}
	})
}

// runCompatSamples runs every sample, each on an engine built with the
// options newOptions returns for the sample's name, from start.
func runCompatSamples(t *testing.T, start time.Time, newOptions func(t *testing.T, sample string) engine.Options) {
	dirs, err := filepath.Glob("../../config/compat/accept/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no compat samples found (%v)", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			runCompat(t, dir, start, newOptions(t, filepath.Base(dir)))
		})
	}
}

func runCompat(t *testing.T, dir string, start time.Time, opts engine.Options) {
	files := compatPolicyFiles(dir)
	set, err := policy.LoadFiles(files...)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	runCompatSet(t, dir, set, start, opts)
}

// compatPolicyFiles are the policy files of the sample in dir: every
// *.yaml and *.yml but expect.yaml.
func compatPolicyFiles(dir string) []string {
	var files []string
	for _, pat := range []string{"*.yaml", "*.yml"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		for _, f := range m {
			if filepath.Base(f) != "expect.yaml" {
				files = append(files, f)
			}
		}
	}
	return files
}

// runCompatSet replays the expectations of the sample in dir against an
// engine built with opts running set, however the set was delivered.
func runCompatSet(t *testing.T, dir string, set *policy.Set, start time.Time, opts engine.Options) {
	raw, err := os.ReadFile(filepath.Join(dir, "expect.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var exp compatFile
	if err := yaml.Unmarshal(raw, &exp); err != nil {
		t.Fatalf("expect.yaml: %v", err)
	}
	e, err := engine.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(bg)
	if err := e.Load(bg, set); err != nil {
		t.Fatal(err)
	}
	now := start
	for _, c := range exp.Cases {
		if c.Advance != "" {
			d, err := time.ParseDuration(c.Advance)
			if err != nil {
				t.Fatalf("%s: advance: %v", c.Name, err)
			}
			now = now.Add(d)
		}
		r := &engine.Request{Domain: c.Domain, HitsAddend: c.HitsAddend}
		for _, d := range c.Descriptors {
			ed := engine.Descriptor{HitsAddend: d.HitsAddend}
			for _, en := range d.Entries {
				ed.Entries = append(ed.Entries, engine.Entry{Key: en.Key, Value: en.Value})
			}
			r.Descriptors = append(r.Descriptors, ed)
		}
		var resp *engine.Response
		for i := 0; i < max(c.Repeat, 1); i++ {
			if resp, err = e.Decide(bg, r, now); err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
		}
		if got := resp.Code.String(); got != c.Want.Overall {
			t.Errorf("%s: overall %s, want %s (%+v)", c.Name, got, c.Want.Overall, resp.Statuses)
		}
		if len(c.Want.Statuses) > 0 && len(c.Want.Statuses) != len(resp.Statuses) {
			t.Errorf("%s: %d statuses, want %d", c.Name, len(resp.Statuses), len(c.Want.Statuses))
			continue
		}
		for i, w := range c.Want.Statuses {
			if msg := checkStatus(resp.Statuses[i], w); msg != "" {
				t.Errorf("%s: status %d: %s (got %+v, limit %+v)", c.Name, i, msg, resp.Statuses[i], resp.Statuses[i].Limit)
			}
		}
	}
}

func checkStatus(got engine.Status, w compatStatus) string {
	var bad []string
	if w.Code != nil && got.Code.String() != *w.Code {
		bad = append(bad, fmt.Sprintf("code %s, want %s", got.Code, *w.Code))
	}
	if w.Remaining != nil && got.Remaining != *w.Remaining {
		bad = append(bad, fmt.Sprintf("remaining %d, want %d", got.Remaining, *w.Remaining))
	}
	if w.LimitSet {
		switch {
		case w.Limit == nil && got.Limit != nil:
			bad = append(bad, "a limit applied, want none")
		case w.Limit != nil && got.Limit == nil:
			bad = append(bad, "no limit applied")
		case w.Limit != nil:
			if w.Limit.RequestsPerUnit != nil && got.Limit.RequestsPerUnit != *w.Limit.RequestsPerUnit {
				bad = append(bad, fmt.Sprintf("requests_per_unit %d, want %d", got.Limit.RequestsPerUnit, *w.Limit.RequestsPerUnit))
			}
			if w.Limit.Unit != nil && !strings.EqualFold(string(got.Limit.Unit), *w.Limit.Unit) {
				bad = append(bad, fmt.Sprintf("unit %s, want %s", got.Limit.Unit, *w.Limit.Unit))
			}
			if w.Limit.Name != nil && got.Limit.Name != *w.Limit.Name {
				bad = append(bad, fmt.Sprintf("name %q, want %q", got.Limit.Name, *w.Limit.Name))
			}
		}
	}
	if w.UntilReset != nil {
		d, err := time.ParseDuration(*w.UntilReset)
		if err != nil || got.UntilReset != d {
			bad = append(bad, fmt.Sprintf("duration_until_reset %v, want %s", got.UntilReset, *w.UntilReset))
		}
	}
	return strings.Join(bad, "; ")
}
