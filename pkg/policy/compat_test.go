package policy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

const compatDir = "../../config/compat"

// TestTopLevelConfigLoads loads the example policies the sidecar serves by
// default.
func TestTopLevelConfigLoads(t *testing.T) {
	set, err := policy.Load("../../config")
	if err != nil {
		t.Fatalf("Load(config): %v", err)
	}
	var names []string
	for _, d := range set.Domains {
		names = append(names, d.Name)
	}
	if want := []string{"api", "edge"}; !slices.Equal(names, want) {
		t.Errorf("domains = %v, want %v", names, want)
	}
}

// acceptFiles returns the policy files of an accept directory: every YAML
// file but expect.yaml.
func acceptFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"*.yaml", "*.yml"} {
		m, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == "expect.yaml" })
	if len(files) == 0 {
		t.Fatalf("%s holds no policy file", dir)
	}
	return files
}

// TestCompatAccept loads every accept sample, checks its expect.yaml is well
// formed, and replays its cases against the reference model.
func TestCompatAccept(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(compatDir, "accept", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no accept samples (%v)", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			set, err := policy.LoadFiles(acceptFiles(t, dir)...)
			if err != nil {
				t.Fatalf("must load:\n%v", err)
			}
			cases := readExpect(t, filepath.Join(dir, "expect.yaml"), set)
			replay(t, set, cases)
		})
	}
}

// TestCompatReject loads every reject sample and checks the error holds the
// text its first line wants.
func TestCompatReject(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join(compatDir, "reject"))
	if err != nil || len(entries) == 0 {
		t.Fatalf("no reject samples (%v)", err)
	}
	for _, e := range entries {
		path := filepath.Join(compatDir, "reject", e.Name())
		t.Run(strings.TrimSuffix(e.Name(), ".yaml"), func(t *testing.T) {
			var err error
			first := path
			if e.IsDir() {
				var files []string
				if files, err = filepath.Glob(filepath.Join(path, "*.yaml")); err != nil || len(files) == 0 {
					t.Fatalf("empty reject directory (%v)", err)
				}
				first = files[0]
				_, err = policy.Load(path)
			} else {
				_, err = policy.LoadFiles(path)
			}
			want := wantLine(t, first)
			if err == nil {
				t.Fatalf("loaded; want an error containing %q", want)
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error:\n%v\nwant it to contain %q", err, want)
			}
		})
	}
}

// wantLine reads the "# want: " first line of a reject sample.
func wantLine(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	line, ok := strings.CutPrefix(sc.Text(), "# want: ")
	if !ok || line == "" {
		t.Fatalf("%s: first line must be \"# want: <text>\", is %q", path, sc.Text())
	}
	return line
}

// The expect.yaml format; config/compat/README.md documents it.
type (
	expectFile struct {
		Cases []expectCase `yaml:"cases"`
	}
	expectCase struct {
		Name        string             `yaml:"name"`
		Domain      string             `yaml:"domain"`
		Descriptors []expectDescriptor `yaml:"descriptors"`
		HitsAddend  uint32             `yaml:"hits_addend"`
		Repeat      int                `yaml:"repeat"`
		Advance     string             `yaml:"advance"`
		Want        struct {
			Overall  string         `yaml:"overall"`
			Statuses []expectStatus `yaml:"statuses"`
		} `yaml:"want"`

		advance time.Duration
	}
	entry struct {
		Key   string `yaml:"key"`
		Value string `yaml:"value"`
	}
	expectDescriptor struct {
		Entries    []entry `yaml:"entries"`
		HitsAddend *uint64 `yaml:"hits_addend"` // nil: none; set (0 too): a charge
	}
	expectStatus struct {
		Code      *string   `yaml:"code"`
		Remaining *uint32   `yaml:"remaining"`
		Limit     yaml.Node `yaml:"limit"` // Kind 0: absent; !!null: no limit
		Reset     *string   `yaml:"duration_until_reset"`
	}
	expectLimit struct {
		RequestsPerUnit *uint32 `yaml:"requests_per_unit"`
		Unit            string  `yaml:"unit"`
		Name            *string `yaml:"name"`
	}
)

// UnmarshalYAML takes a descriptor in its short form (a list of entries) or
// its long form ({entries, hits_addend}).
func (d *expectDescriptor) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		return strictDecode(n, &d.Entries)
	}
	type long expectDescriptor // without this method
	return strictDecode(n, (*long)(d))
}

// strictDecode decodes n into v, refusing unknown fields (Node.Decode alone
// would not).
func strictDecode(n *yaml.Node, v any) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// readExpect reads and checks an expect.yaml against the loaded set.
func readExpect(t *testing.T, path string, set *policy.Set) []expectCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ef expectFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&ef); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(ef.Cases) == 0 {
		t.Fatalf("%s: no cases", path)
	}
	domains := map[string]bool{}
	for _, d := range set.Domains {
		domains[d.Name] = true
	}
	names := map[string]bool{}
	for i := range ef.Cases {
		c := &ef.Cases[i]
		bad := func(format string, args ...any) {
			t.Errorf("%s: case %d %q: %s", path, i, c.Name, fmt.Sprintf(format, args...))
		}
		switch {
		case c.Name == "":
			bad("no name")
		case names[c.Name]:
			bad("name used twice")
		}
		names[c.Name] = true
		if !domains[c.Domain] && !strings.Contains(c.Name, "unknown domain") {
			bad("domain %q is not loaded (name the case \"... unknown domain ...\" if that is the point)", c.Domain)
		}
		if len(c.Descriptors) == 0 {
			bad("no descriptors")
		}
		for _, d := range c.Descriptors {
			if len(d.Entries) == 0 {
				bad("a descriptor without entries")
			}
			for _, e := range d.Entries {
				if e.Key == "" {
					bad("an entry without a key")
				}
			}
		}
		if c.Repeat < 0 {
			bad("repeat %d", c.Repeat)
		}
		if c.Advance != "" {
			if c.advance, err = time.ParseDuration(c.Advance); err != nil || c.advance < 0 {
				bad("advance %q is not a duration >= 0", c.Advance)
			}
		}
		if c.Want.Overall != "OK" && c.Want.Overall != "OVER_LIMIT" {
			bad("want.overall %q (want OK or OVER_LIMIT)", c.Want.Overall)
		}
		if st := c.Want.Statuses; st != nil && len(st) != len(c.Descriptors) {
			bad("%d statuses for %d descriptors", len(st), len(c.Descriptors))
		}
		for _, s := range c.Want.Statuses {
			if s.Code != nil && *s.Code != "OK" && *s.Code != "OVER_LIMIT" {
				bad("status code %q", *s.Code)
			}
			if s.Reset != nil {
				if _, err := time.ParseDuration(*s.Reset); err != nil {
					bad("duration_until_reset %q", *s.Reset)
				}
			}
			if s.Limit.Kind == yaml.MappingNode {
				var l expectLimit
				if err := strictDecode(&s.Limit, &l); err != nil {
					bad("limit: %v", err)
				} else if _, ok := unitOf(l.Unit); !ok || l.RequestsPerUnit == nil {
					bad("limit needs requests_per_unit and a lower-case unit")
				}
			} else if s.Limit.Kind != 0 && s.Limit.ShortTag() != "!!null" {
				bad("limit must be a mapping or null")
			}
		}
	}
	return ef.Cases
}

func unitOf(s string) (policy.Unit, bool) {
	for _, u := range policy.Units {
		if string(u) == s {
			return u, true
		}
	}
	return "", false
}

// replay runs the cases against the reference model and compares.
func replay(t *testing.T, set *policy.Set, cases []expectCase) {
	t.Helper()
	m := newModel(set)
	for i, c := range cases {
		m.now = m.now.Add(c.advance)
		var got answer
		for range max(c.Repeat, 1) {
			got = m.decide(c)
		}
		where := fmt.Sprintf("case %d %q", i, c.Name)
		if got.overall != c.Want.Overall {
			t.Errorf("%s: overall %s, want %s", where, got.overall, c.Want.Overall)
		}
		for j, w := range c.Want.Statuses {
			g := got.statuses[j]
			if w.Code != nil && g.code != *w.Code {
				t.Errorf("%s: statuses[%d].code %s, want %s", where, j, g.code, *w.Code)
			}
			if w.Remaining != nil && g.remaining != *w.Remaining {
				t.Errorf("%s: statuses[%d].remaining %d, want %d", where, j, g.remaining, *w.Remaining)
			}
			if w.Reset != nil {
				if d, _ := time.ParseDuration(*w.Reset); g.reset != d {
					t.Errorf("%s: statuses[%d].duration_until_reset %v, want %v", where, j, g.reset, d)
				}
			}
			switch {
			case w.Limit.Kind == 0:
			case w.Limit.ShortTag() == "!!null":
				if g.limit != nil {
					t.Errorf("%s: statuses[%d].limit %+v, want null", where, j, *g.limit)
				}
			default:
				var l expectLimit
				_ = strictDecode(&w.Limit, &l)
				switch {
				case g.limit == nil:
					t.Errorf("%s: statuses[%d].limit null, want %d/%s", where, j, *l.RequestsPerUnit, l.Unit)
				case g.limit.RequestsPerUnit != *l.RequestsPerUnit || string(g.limit.Unit) != l.Unit:
					t.Errorf("%s: statuses[%d].limit %d/%s, want %d/%s", where, j, g.limit.RequestsPerUnit, g.limit.Unit, *l.RequestsPerUnit, l.Unit)
				case l.Name != nil && g.limit.Name != *l.Name:
					t.Errorf("%s: statuses[%d].limit.name %q, want %q", where, j, g.limit.Name, *l.Name)
				}
			}
		}
	}
}
