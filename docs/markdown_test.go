package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// documents are the Markdown files whose blocks, links and paths are
// checked, relative to the module root.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(moduleRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md", "deploy/README.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(moduleRoot, d)
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

// block is one fenced code block of a document.
type block struct {
	file string // relative to the module root
	line int    // of the opening fence, 1-based
	lang string // the fence's info string: sh, console, text, yaml, json
	text string // the lines between the fences
	// before is the last non-blank line above the opening fence.
	before string
	// firstTenMinutes: between the README's first-ten-minutes markers
	// (TestFirstTenMinutes runs it, from the module root).
	firstTenMinutes bool
}

func (b block) where() string { return b.file + ":" + strconv.Itoa(b.line) }

// document is one Markdown file, split into its fenced blocks and its prose
// (every line outside a fence).
type document struct {
	file   string
	blocks []block
	prose  []proseLine
}

type proseLine struct {
	line int
	text string
}

func readDocument(t *testing.T, file string) document {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(moduleRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	d := document{file: file}
	var open *block
	var body []string
	before, inFirst := "", false
	for i, l := range strings.Split(string(raw), "\n") {
		if open == nil && strings.HasPrefix(l, "```") {
			open = &block{file: file, line: i + 1, lang: strings.TrimSpace(l[3:]), before: before, firstTenMinutes: inFirst}
			body = nil
			continue
		}
		if open != nil {
			if strings.TrimSpace(l) == "```" {
				open.text = strings.Join(body, "\n") + "\n"
				d.blocks = append(d.blocks, *open)
				open = nil
				before = ""
				continue
			}
			body = append(body, l)
			continue
		}
		switch strings.TrimSpace(l) {
		case "<!-- first-ten-minutes:start -->":
			inFirst = true
		case "<!-- first-ten-minutes:end -->":
			inFirst = false
		}
		if strings.TrimSpace(l) != "" {
			before = strings.TrimSpace(l)
		}
		d.prose = append(d.prose, proseLine{i + 1, l})
	}
	if open != nil {
		t.Errorf("%s: the block opened here is never closed", open.where())
	}
	return d
}

// headingSlugs are the anchors GitHub gives a document's headings.
func headingSlugs(d document) map[string]bool {
	slugs := map[string]bool{}
	for _, p := range d.prose {
		if m := headingRE.FindStringSubmatch(p.text); m != nil {
			slugs[slug(m[1])] = true
		}
	}
	return slugs
}

var (
	headingRE = regexp.MustCompile(`^#{1,6} (.+)$`)
	slugDrop  = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan  = regexp.MustCompile("`[^`]*`")
	namedPath = regexp.MustCompile("`((?:config|deploy|envoy)/[^`\\s]*)`")
	// blockPath is a path a code block names: a command's argument, a
	// comment's file name.
	blockPath = regexp.MustCompile(`(?:^|[\s"'=(])((?:config|deploy|envoy)/[\w./*-]*)`)
)

// slug is GitHub's anchor for a heading: lower case, punctuation dropped
// (hyphens and underscores kept), spaces turned to hyphens.
func slug(heading string) string {
	h := strings.ToLower(strings.TrimSpace(heading))
	h = slugDrop.ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// TestDocLinks: every relative link of the documents resolves to a file or
// directory of the repository, and every anchor to a heading of the page it
// names.
func TestDocLinks(t *testing.T) {
	pages := map[string]document{}
	for _, f := range documents(t) {
		pages[f] = readDocument(t, f)
	}
	slugsOf := func(file string) map[string]bool {
		d, ok := pages[file]
		if !ok {
			d = readDocument(t, file)
			pages[file] = d
		}
		return headingSlugs(d)
	}
	links := 0
	for _, f := range documents(t) {
		for _, p := range pages[f].prose {
			for _, m := range linkRE.FindAllStringSubmatch(codeSpan.ReplaceAllString(p.text, ""), -1) {
				target := m[1]
				if regexp.MustCompile(`^[a-z]+:`).MatchString(target) {
					continue
				}
				links++
				path, anchor, _ := strings.Cut(target, "#")
				file := f
				if path != "" {
					file = filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
					if _, err := os.Stat(filepath.Join(moduleRoot, file)); err != nil {
						t.Errorf("%s:%d: link to %s: no such file in the repository (%s)", f, p.line, target, file)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(file, ".md") {
					t.Errorf("%s:%d: link to %s: an anchor on a file that is not Markdown", f, p.line, target)
					continue
				}
				if !slugsOf(file)[anchor] {
					t.Errorf("%s:%d: link to %s: %s has no heading whose anchor is #%s", f, p.line, target, file, anchor)
				}
			}
		}
	}
	if links < 20 {
		t.Errorf("only %d relative links found: is the link pattern still right?", links)
	}
}

// hypothetical are paths the documents name that are examples of a
// reader's own layout, not files of this repository, each with why.
var hypothetical = map[string]string{
	"config/team-a/api.yaml": "an example of envoyproxy/ratelimit's runtime layout, in the reader's RUNTIME_ROOT",
	"config/mongo.conf":      "an example of envoyproxy/ratelimit's runtime layout, in the reader's RUNTIME_ROOT",
}

// namedPaths are the config/, deploy/ and envoy/ paths the documents name,
// in backquotes in their prose or anywhere in a code block, each with where
// it was first named.
func namedPaths(t *testing.T) map[string]string {
	t.Helper()
	named := map[string]string{}
	for _, f := range documents(t) {
		d := readDocument(t, f)
		for _, b := range d.blocks {
			for _, m := range blockPath.FindAllStringSubmatch(b.text, -1) {
				path := strings.TrimRight(m[1], ".,;:")
				if _, ok := named[path]; !ok {
					named[path] = b.where()
				}
			}
		}
		for _, p := range d.prose {
			for _, m := range namedPath.FindAllStringSubmatch(p.text, -1) {
				path := strings.TrimRight(m[1], ".,;:")
				if _, ok := named[path]; !ok {
					named[path] = f + ":" + strconv.Itoa(p.line)
				}
			}
		}
	}
	return named
}

// TestDocNamedPathsExist: every config/, deploy/ and envoy/ path named in
// backquotes exists (a glob matches at least one file).
func TestDocNamedPathsExist(t *testing.T) {
	named := namedPaths(t)
	if len(named) < 10 {
		t.Fatalf("only %d named paths found: is the pattern still right?", len(named))
	}
	for _, path := range sortedKeys(named) {
		if _, ok := hypothetical[path]; ok {
			continue
		}
		matches, err := filepath.Glob(filepath.Join(moduleRoot, path))
		if err != nil || len(matches) == 0 {
			t.Errorf("%s names `%s`, which is not in the repository", named[path], path)
		}
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestReadmeIsAFrontPage (issue 42, item 6): the README says what, why, how
// to try it, and links the rest. Measurement history (figures before and
// after an issue) lives in docs/: it had half of the front page, and its
// "Why" quoted live-gate figures its own table below had superseded.
func TestReadmeIsAFrontPage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(moduleRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?i)\bissues? \d+`).FindAllString(string(b), -1); len(m) > 0 {
		t.Errorf("README.md names issues %q: history belongs in docs/ (benchmarks.md, testing.md), the front page says what is", m)
	}
	if n := strings.Count(string(b), "\n"); n > 170 {
		t.Errorf("README.md has %d lines, want at most 170: what, why, how to try it, and links to the rest", n)
	}
}
