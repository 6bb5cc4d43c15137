package policy

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// maxFileSize bounds one policy file; real ones are a few kilobytes.
const maxFileSize = 8 << 20

// ErrEmpty is wrapped by the error Load and LoadFiles return for a set with
// no policy file: no domain and no gate. Such a set would admit every
// request, so it is refused rather than loaded (envoyproxy/ratelimit can
// report a config without domains as unhealthy, with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED). A file holding only gates is
// not empty.
var ErrEmpty = errors.New("policy: no policy file")

// Load reads the policy in dir: every *.yaml and *.yml file directly in it
// (not in subdirectories), one domain per file. Names starting with "." are
// skipped, so the ..data and ..<timestamp> entries of a Kubernetes ConfigMap
// volume are ignored while its top-level symlinks to the files are followed.
// A directory with no policy file is refused with an error wrapping
// ErrEmpty that names the entries it skipped.
//
// When dir cannot be read Load returns an error wrapping the os error (which
// names the path). Otherwise every problem in every file is reported at
// once, as an Errors sorted by file and line. Load never panics on bad
// input. It is safe for concurrent use.
func Load(dir string) (*Set, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("policy: cannot read the policy directory: %w", err)
	}
	var files, skipped []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !isPolicyName(name) {
			if !strings.HasPrefix(name, "..") { // a ConfigMap's own entries
				skipped = append(skipped, name)
			}
			continue
		}
		path := filepath.Join(dir, name)
		// ReadDir does not follow symlinks: Stat does. A directory named
		// like a policy file is not one; skip it.
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			skipped = append(skipped, name+"/")
			continue
		}
		files = append(files, path)
	}
	if len(files) == 0 {
		return nil, emptyError(dir, skipped, "a policy file is a *.yaml or *.yml file directly in the directory, its name not starting with a dot")
	}
	set, err := LoadFiles(files...)
	if set != nil {
		set.Dir = dir
	}
	return set, err
}

// Below lists, relative to dir, up to most files in dir's subdirectories
// that LoadTree would read and Load does not (names starting with "." are
// skipped, as LoadTree skips them; symlinked directories are not
// followed), in walk order, and how many there are in all: a policy
// directory laid out as envoyproxy/ratelimit's runtime tree, read without
// the tree, loses them without a word otherwise.
func Below(dir string, most int) (files []string, total int) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !e.IsDir() {
			continue
		}
		_ = filepath.WalkDir(filepath.Join(dir, e.Name()), func(path string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return nil
			case strings.HasPrefix(d.Name(), "."):
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			case d.IsDir() || !d.Type().IsRegular():
				return nil
			}
			total++
			if len(files) < most {
				rel, _ := filepath.Rel(dir, path)
				files = append(files, rel)
			}
			return nil
		})
	}
	return files, total
}

// LoadTree reads the policy below dir as envoyproxy/ratelimit reads its
// runtime directory: every file in it and in its subdirectories, whatever
// its name's extension (config/team-a/api.yaml, config/mongo.conf), one
// domain per file. Names starting with "." are skipped, files and
// directories alike (a ConfigMap volume's ..data is reached through its
// top-level symlinks, which are followed; symlinked directories are not,
// so no link can make a cycle). Problems and errors are as for Load, and
// a tree with no file at all wraps ErrEmpty. Dirs is every directory read,
// for a watcher.
func LoadTree(dir string) (set *Set, dirs []string, err error) {
	var files, skipped []string
	walkErr := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := e.Name()
		if path != dir && strings.HasPrefix(name, ".") {
			if !strings.HasPrefix(name, "..") {
				skipped = append(skipped, name)
			}
			if e.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			dirs = append(dirs, path)
			return nil
		}
		// WalkDir does not follow symlinks: Stat does. A symlink to a
		// directory is not followed (a link could make a cycle).
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			skipped = append(skipped, name+"/")
			return nil
		}
		files = append(files, path)
		return nil
	})
	if walkErr != nil {
		return nil, dirs, fmt.Errorf("policy: cannot read the policy directory: %w", walkErr)
	}
	if len(files) == 0 {
		return nil, dirs, emptyError(dir, skipped, "every file below the directory is a policy file, its name and its directories' not starting with a dot")
	}
	set, err = LoadFiles(files...)
	if set != nil {
		set.Dir = dir
	}
	return set, dirs, err
}

// emptyError explains a directory without policy files, naming (a few of)
// the entries that were skipped.
func emptyError(dir string, skipped []string, rule string) error {
	what := "it is empty"
	if len(skipped) > 0 {
		const most = 5
		names := skipped[:min(len(skipped), most)]
		what = "skipped " + strings.Join(names, ", ")
		if len(skipped) > most {
			what += fmt.Sprintf(" and %d more", len(skipped)-most)
		}
		what += ": " + rule
	}
	return fmt.Errorf("%w in %s (%s); an empty policy would admit every request, so none is loaded: add a file with domain: <name> and descriptors, or concurrency gates", ErrEmpty, dir, what)
}

// isPolicyName reports whether a file name is a policy file's.
func isPolicyName(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// LoadFiles reads exactly the given policy files, with Load's checks (a
// domain defined in two files is an error) and Load's Hash; the Set's Dir is
// empty. It serves tools that pick files themselves, such as a test runner
// that keeps its expectations beside the policy. Problems are reported as
// an Errors, every file's at once; no path at all is ErrEmpty.
func LoadFiles(paths ...string) (*Set, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no file given", ErrEmpty)
	}
	files := make([]file, 0, len(paths))
	var errs Errors
	for _, p := range paths {
		data, err := readFile(p)
		if err != nil {
			errs = append(errs, &Error{Pos: Pos{File: p}, Msg: err.Error()})
			continue
		}
		files = append(files, file{path: p, base: filepath.Base(p), data: data})
	}
	return assemble(files, errs)
}

// file is one policy file's contents: path names it in errors and
// Domain.File, base orders the set and enters its Hash.
type file struct {
	path, base string
	data       []byte
}

// assemble parses files into a Set with Load's cross-file checks, adding
// errs (problems met while reading) to the Errors it returns.
func assemble(files []file, errs Errors) (*Set, error) {
	slices.SortStableFunc(files, func(a, b file) int {
		return cmp.Or(cmp.Compare(a.base, b.base), cmp.Compare(a.path, b.path))
	})

	h := sha256.New()
	set := &Set{Domains: []*Domain{}}
	type origin struct {
		file string
		pos  Pos
	}
	seen := map[string]origin{}
	for _, f := range files {
		h.Write([]byte(f.base))
		h.Write([]byte{0})
		h.Write(f.data)
		h.Write([]byte{0})

		d, namePos, ferrs := parseFile(f.path, f.data)
		errs = append(errs, ferrs...)
		if d != nil && len(ferrs) == 0 {
			set.Gates = append(set.Gates, d.Gates...)
			set.Files = append(set.Files, d)
		}
		if d == nil || d.Name == "" {
			continue
		}
		if first, dup := seen[d.Name]; dup {
			errs = append(errs, &Error{Pos: namePos, Field: "domain", Msg: fmt.Sprintf(
				"domain %s is already defined in %s (line %d); one domain per file: merge the two files or rename one domain",
				quote(d.Name), first.file, first.pos.Line)})
			continue
		}
		seen[d.Name] = origin{f.path, namePos}
		if len(ferrs) == 0 {
			set.Domains = append(set.Domains, d)
		}
	}
	errs = append(errs, checkGates(set.Gates)...)
	errs = append(errs, checkCosts(set.Domains)...)
	if len(errs) > 0 {
		sortErrors(errs)
		return nil, errs
	}
	slices.SortFunc(set.Domains, func(a, b *Domain) int { return cmp.Compare(a.Name, b.Name) })
	set.Hash = hex.EncodeToString(h.Sum(nil))
	return set, nil
}

// readFile reads one policy file, following symlinks, refusing what is not
// a regular file (a FIFO would block) and what is implausibly large.
func readFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read this file (%v); check that it exists and is readable", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%v); a policy file is a plain YAML file", fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read this file (%v); check that it exists and is readable", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read this file (%v); check that it exists and is readable", err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("the file is larger than %d MiB; split the policy into one file per domain", maxFileSize>>20)
	}
	return data, nil
}
