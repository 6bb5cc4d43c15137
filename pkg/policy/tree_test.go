package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree writes files (relative path → contents) below a fresh
// directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func domainFile(name string) string {
	return "domain: " + name + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
}

// TestLoadTreeReadsWhatUpstreamReads (issue 32, item 4): envoyproxy/
// ratelimit loads every file under its runtime config directory, in
// subdirectories too, whatever the extension, and a trailing "---" is
// fine. Load (the native layout) refused all three.
func TestLoadTreeReadsWhatUpstreamReads(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"top.yaml":             domainFile("top"),
		"team-a/example.yaml":  domainFile("team_a"),
		"team-b/deep/api.yml":  domainFile("team_b"),
		"mongo.conf":           domainFile("mongo"),
		"trailing.yaml":        domainFile("trailing") + "---\n",
		".hidden.yaml":         "not: a policy\n",
		".git/config":          "[core]\n",
		"..2027_01_01/ignored": "not: a policy\n",
	})
	set, dirs, err := LoadTree(dir)
	if err != nil {
		t.Fatalf("LoadTree: %v", err)
	}
	var names []string
	for _, d := range set.Domains {
		names = append(names, d.Name)
	}
	if got := strings.Join(names, ","); got != "mongo,team_a,team_b,top,trailing" {
		t.Fatalf("domains %s, want mongo,team_a,team_b,top,trailing", got)
	}
	if len(dirs) != 4 { // dir, team-a, team-b, team-b/deep
		t.Fatalf("directories read: %v, want the root and its three subdirectories", dirs)
	}
	// The native layout reads only *.yaml and *.yml directly in dir.
	if set, err := Load(dir); err != nil || len(set.Domains) != 2 {
		t.Fatalf("Load of the same directory: %v, %v; want top and trailing only", set, err)
	}
}

// TestLoadTreeRefuses: a second non-empty document, one domain in two
// files of different subdirectories, and a tree with no file at all.
func TestLoadTreeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"second document", map[string]string{"a.yaml": domainFile("a") + "---\n" + domainFile("b")}, "a second YAML document"},
		{"one domain twice", map[string]string{"x/a.yaml": domainFile("a"), "y/a.conf": domainFile("a")}, "is already defined in"},
		{"nothing but dot files", map[string]string{".a.yaml": domainFile("a"), ".d/b.yaml": domainFile("b")}, "every file below the directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := LoadTree(writeTree(t, tc.files))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadTree: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if _, _, err := LoadTree(filepath.Join(t.TempDir(), "missing")); err == nil || errors.Is(err, ErrEmpty) {
		t.Fatalf("a missing directory: %v, want the read error", err)
	}
}

// TestLoadTreeFollowsFileLinksNotDirLinks: a ConfigMap volume's top-level
// symlinks to files are followed; a symlink to a directory is not (a link
// could make a cycle).
func TestLoadTreeFollowsFileLinksNotDirLinks(t *testing.T) {
	dir := writeTree(t, map[string]string{"..data/a.yaml": domainFile("a"), "sub/b.yaml": domainFile("b")})
	if err := os.Symlink(filepath.Join("..data", "a.yaml"), filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(dir, "sub", "loop")); err != nil {
		t.Fatal(err)
	}
	set, _, err := LoadTree(dir)
	if err != nil || len(set.Domains) != 2 {
		t.Fatalf("LoadTree: %v, %v; want a (through its link) and b", set, err)
	}
}
