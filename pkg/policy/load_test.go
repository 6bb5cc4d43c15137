package policy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

const (
	edgeSrc = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
	apiSrc  = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
)

// writeFiles writes name → contents under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, src := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func domainNames(s *policy.Set) string {
	var names []string
	for _, d := range s.Domains {
		names = append(names, d.Name)
	}
	return strings.Join(names, ",")
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"z-edge.yaml":      edgeSrc,
		"a-api.yml":        apiSrc,
		"notes.txt":        "not a policy",
		".hidden.yaml":     "this is not even YAML: [",
		"sub/nested.yaml":  "domain: nested\n",
		"dir.yaml/x.yaml":  "domain: indir\n",
		"README.md":        "# docs",
		"backup.yaml.orig": "domain: old\n",
	})
	set, err := policy.Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := domainNames(set); got != "api,edge" {
		t.Errorf("domains %s, want api,edge (sorted; hidden, nested and other files skipped)", got)
	}
	if set.Dir != dir {
		t.Errorf("Dir = %q", set.Dir)
	}
	if f := set.Domains[0].File; f != filepath.Join(dir, "a-api.yml") {
		t.Errorf("File = %q", f)
	}
	// The hash is over (base name, 0, contents, 0) in name order.
	h := sha256.New()
	for _, f := range []struct{ name, src string }{{"a-api.yml", apiSrc}, {"z-edge.yaml", edgeSrc}} {
		h.Write([]byte(f.name + "\x00" + f.src + "\x00"))
	}
	if want := hex.EncodeToString(h.Sum(nil)); set.Hash != want {
		t.Errorf("Hash = %s, want %s", set.Hash, want)
	}
}

func TestLoadHash(t *testing.T) {
	load := func(files map[string]string) string {
		t.Helper()
		dir := t.TempDir()
		writeFiles(t, dir, files)
		set, err := policy.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		return set.Hash
	}
	base := load(map[string]string{"edge.yaml": edgeSrc, "api.yaml": apiSrc})
	cases := []struct {
		name  string
		files map[string]string
		same  bool
	}{
		{"same files elsewhere", map[string]string{"api.yaml": apiSrc, "edge.yaml": edgeSrc}, true},
		{"ignored file added", map[string]string{"edge.yaml": edgeSrc, "api.yaml": apiSrc, "x.txt": "x", ".h.yaml": "x"}, true},
		{"contents changed", map[string]string{"edge.yaml": edgeSrc + "# a comment\n", "api.yaml": apiSrc}, false},
		{"file renamed", map[string]string{"edge2.yaml": edgeSrc, "api.yaml": apiSrc}, false},
		{"file removed", map[string]string{"edge.yaml": edgeSrc}, false},
		// Without the separators these two would hash the same bytes.
		{"bytes moved across the boundary", map[string]string{"edge.yaml": edgeSrc, "api.yaml": apiSrc[:len(apiSrc)-1]}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := load(tc.files); (got == base) != tc.same {
				t.Errorf("hash %s vs %s: same = %v, want %v", got, base, got == base, tc.same)
			}
		})
	}
}

// TestLoadConfigMap: a Kubernetes ConfigMap volume holds a timestamped
// directory, a ..data symlink to it, and top-level symlinks through ..data.
func TestLoadConfigMap(t *testing.T) {
	dir := t.TempDir()
	ts := "..2024_05_01_12_00_00.123456789"
	writeFiles(t, dir, map[string]string{
		ts + "/edge.yaml": edgeSrc,
		ts + "/api.yaml":  apiSrc,
	})
	mustSymlink(t, ts, filepath.Join(dir, "..data"))
	for _, name := range []string{"edge.yaml", "api.yaml"} {
		mustSymlink(t, filepath.Join("..data", name), filepath.Join(dir, name))
	}
	set, err := policy.Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := domainNames(set); got != "api,edge" {
		t.Errorf("domains %s, want api,edge", got)
	}

	// A dangling link is reported, naming the file.
	mustSymlink(t, filepath.Join("..data", "gone.yaml"), filepath.Join(dir, "gone.yaml"))
	_, err = policy.Load(dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "gone.yaml")+": cannot read this file") {
		t.Errorf("dangling link: err = %v", err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("symlinks unavailable: %v", err)
	}
}

// TestLoadRefusesAnEmptySet: a directory with no policy file is an error
// naming the directory and what was skipped, so that deleting the only file
// (or pointing --policy at the wrong place) never loads a policy that admits
// everything. A file holding only gates is a policy.
func TestLoadRefusesAnEmptySet(t *testing.T) {
	empty := t.TempDir()
	_, err := policy.Load(empty)
	if !errors.Is(err, policy.ErrEmpty) || !strings.Contains(err.Error(), empty) || !strings.Contains(err.Error(), "no policy file") {
		t.Errorf("empty directory: err = %v, want one naming %s and saying it holds no policy file", err, empty)
	}

	other := t.TempDir()
	writeFiles(t, other, map[string]string{"edge.yaml.bak": edgeSrc, "notes.txt": "x", ".hidden.yaml": edgeSrc})
	_, err = policy.Load(other)
	if err == nil || !strings.Contains(err.Error(), "edge.yaml.bak") || !strings.Contains(err.Error(), ".hidden.yaml") {
		t.Errorf("only other files: err = %v, want it to name the files it skipped", err)
	}

	if _, err := policy.LoadFiles(); !errors.Is(err, policy.ErrEmpty) {
		t.Error("LoadFiles of no file: no error")
	}

	gates := t.TempDir()
	writeFiles(t, gates, map[string]string{"g.yaml": "concurrency:\n  - name: c\n    match: {path_prefix: /c}\n"})
	set, err := policy.Load(gates)
	if err != nil || len(set.Domains) != 0 || len(set.Gates) != 1 || set.Hash == "" {
		t.Errorf("a file of gates only: set %+v, err %v; want 0 domains, 1 gate", set, err)
	}
}

func TestLoadMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nope")
	_, err := policy.Load(dir)
	if err == nil || !strings.Contains(err.Error(), dir) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err = %v, want one naming %s and wrapping fs.ErrNotExist", err, dir)
	}
}

// TestLoadReportsEveryFile: every problem of every file comes back at once,
// sorted by file and line, and a domain defined twice names both files.
func TestLoadReportsEveryFile(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"a.yaml": "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour}\n    extra: 1\n",
		"b.yaml": "domain: edge\ndescriptors:\n  - key: \"\"\n",
		"c.yaml": "domain: api\ndescriptors: oops\n",
		"d.yaml": apiSrc,
	})
	_, err := policy.Load(dir)
	var errs policy.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("err = %v", err)
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	want := []string{
		p("a.yaml") + ":5: descriptors[0].extra: unknown key \"extra\"",
		p("b.yaml") + ":1: domain: domain \"edge\" is already defined in " + p("a.yaml") + " (line 1)",
		p("b.yaml") + ":3: descriptors[0].key: descriptor key is empty",
		p("c.yaml") + ":2: descriptors: descriptors must be a list",
		p("d.yaml") + ":1: domain: domain \"api\" is already defined in " + p("c.yaml") + " (line 1)",
	}
	if len(errs) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(errs), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("errors[%d] = %s\nwant prefix  %s", i, errs[i], w)
		}
	}
}

func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"edge.yaml": edgeSrc, "expect.yaml": "cases: []\n"})
	set, err := policy.LoadFiles(filepath.Join(dir, "edge.yaml"))
	if err != nil || domainNames(set) != "edge" || set.Dir != "" {
		t.Fatalf("LoadFiles = %+v, %v", set, err)
	}
	if _, err := policy.LoadFiles(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: err = %v", err)
	}
}

// TestBelow: the files below a directory's subdirectories, as LoadTree
// would read them: hidden names skipped (a ConfigMap's ..data), at most
// most named, all counted.
func TestBelow(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"top.yaml", "a/one.yaml", "a/b/two.conf", "c/three.yml", ".hidden/x.yaml", "a/.y.yaml", "..data/z.yaml"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("domain: x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, total := policy.Below(dir, 2)
	if total != 3 || len(files) != 2 || files[0] != filepath.Join("a", "b", "two.conf") || files[1] != filepath.Join("a", "one.yaml") {
		t.Errorf("Below: %v of %d, want a/b/two.conf and a/one.yaml of 3", files, total)
	}
	if files, total := policy.Below(filepath.Join(dir, "missing"), 2); files != nil || total != 0 {
		t.Errorf("a missing directory: %v, %d", files, total)
	}
}
