// Package testreport turns `go test -json` events into what a person
// watching `make test` needs: a line as each package ends (its stage, the
// stage's elapsed time, the package's own time), a line naming what is still
// running when nothing has been said for a while, the whole output of every
// failing test as it fails, and at the end a recap of every failure and the
// counts.
//
// A Reporter is a pure machine: it is handed each event and the time it was
// read, and it returns the lines to print. It starts no goroutine and reads
// no clock; cmd/testreport drives it. It is not safe for concurrent use.
package testreport

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Event is one line of `go test -json` (cmd/test2json's TestEvent).
type Event struct {
	Time    time.Time `json:"Time"`
	Action  string    `json:"Action"`
	Package string    `json:"Package"`
	Test    string    `json:"Test"`
	Elapsed float64   `json:"Elapsed"` // seconds
	Output  string    `json:"Output"`
}

// ParseEvent decodes one line of `go test -json`. A line that is not a JSON
// event (go vet's or the linker's text, which `go test -json` can pass
// through) is returned as an "output" event of no package, so nothing a
// failing build says is lost.
func ParseEvent(line []byte) Event {
	var e Event
	if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
		return Event{Action: "output", Output: string(line) + "\n"}
	}
	return e
}

// Failure is one failing test, or a package that failed with no failing
// test (a build error, a panic outside a test, a timeout).
type Failure struct {
	Stage   string
	Package string
	Test    string // empty: the package itself
	Output  []string
}

// Counts are the tests that ended, by outcome. Subtests count as tests.
type Counts struct {
	Passed, Failed, Skipped int
}

// pkgState is what a Reporter holds of a running package.
type pkgState struct {
	start   time.Time
	output  []string            // the package's own lines (no test)
	tests   map[string][]string // a running test's output, dropped when it passes
	started map[string]time.Time
	failed  bool // a test of it failed
}

// Reporter holds a stage's running packages, its counts and its failures.
// The zero value is not usable: call New.
type Reporter struct {
	stage    string
	start    time.Time
	quiet    time.Duration
	lastSaid time.Time
	pkgs     map[string]*pkgState
	loose    []string // output of no package (build errors)
	counts   Counts
	failures []Failure
}

// New returns a Reporter for the stage named stage, started at start, that
// names what is still running after quiet with nothing said.
func New(stage string, start time.Time, quiet time.Duration) *Reporter {
	return &Reporter{stage: stage, start: start, quiet: quiet, lastSaid: start, pkgs: map[string]*pkgState{}}
}

// keepLines bounds what a package's own output keeps (its tail), so a
// package that logs without end cannot grow the reporter without bound.
const keepLines = 400

// stamp is the prefix of every line: the stage and its elapsed time.
func (r *Reporter) stamp(now time.Time) string {
	d := now.Sub(r.start).Round(time.Second)
	return fmt.Sprintf("[%s %02d:%02d]", r.stage, int(d.Minutes()), int(d.Seconds())%60)
}

func (r *Reporter) pkg(name string, now time.Time) *pkgState {
	p := r.pkgs[name]
	if p == nil {
		p = &pkgState{start: now, tests: map[string][]string{}, started: map[string]time.Time{}}
		r.pkgs[name] = p
	}
	return p
}

// Event takes one event read at now and returns the lines to print.
func (r *Reporter) Event(e Event, now time.Time) []string {
	var out []string
	if e.Package == "" {
		r.loose = append(r.loose, strings.TrimRight(e.Output, "\n"))
		// Text outside any package is a build's complaint: print it as it comes.
		out = append(out, strings.TrimRight(e.Output, "\n"))
		r.lastSaid = now
		return out
	}
	p := r.pkg(e.Package, now)
	switch {
	case e.Test == "" && (e.Action == "output" || e.Action == "build-output"):
		p.output = appendTail(p.output, strings.TrimRight(e.Output, "\n"))
	case e.Test != "" && (e.Action == "run" || e.Action == "cont"):
		p.started[e.Test] = now
	case e.Test != "" && e.Action == "pause":
		// A parallel test waits for the serial ones: it is not running.
		delete(p.started, e.Test)
	case e.Test != "" && e.Action == "output":
		p.tests[e.Test] = append(p.tests[e.Test], strings.TrimRight(e.Output, "\n"))
	case e.Test != "" && (e.Action == "pass" || e.Action == "skip"):
		if e.Action == "pass" {
			r.counts.Passed++
		} else {
			r.counts.Skipped++
		}
		delete(p.tests, e.Test)
		delete(p.started, e.Test)
	case e.Test != "" && e.Action == "fail":
		r.counts.Failed++
		p.failed = true
		f := Failure{Stage: r.stage, Package: e.Package, Test: e.Test, Output: p.tests[e.Test]}
		r.failures = append(r.failures, f)
		delete(p.tests, e.Test)
		delete(p.started, e.Test)
		out = append(out, fmt.Sprintf("%s --- FAIL: %s (%.2fs) in %s", r.stamp(now), e.Test, e.Elapsed, e.Package))
		out = append(out, indent(f.Output)...)
	case e.Test == "" && (e.Action == "pass" || e.Action == "skip"):
		out = append(out, fmt.Sprintf("%s ok   %s %.1fs", r.stamp(now), e.Package, e.Elapsed))
		delete(r.pkgs, e.Package)
	case e.Test == "" && e.Action == "fail":
		out = append(out, fmt.Sprintf("%s FAIL %s %.1fs", r.stamp(now), e.Package, e.Elapsed))
		if !p.failed {
			// No test failed: the package's own output says why (a build
			// error, a panic, a timeout). A panic or a timeout inside a test
			// leaves that test running: its output belongs here too.
			lines := append([]string(nil), p.output...)
			if len(lines) == 0 {
				// go test -json names a failed build by import path, not
				// package: its lines came with no package.
				lines = append(lines, r.loose...)
			}
			for _, name := range sortedKeys(p.tests) {
				lines = append(lines, fmt.Sprintf("(%s, still running:)", name))
				lines = append(lines, p.tests[name]...)
			}
			r.counts.Failed++
			r.failures = append(r.failures, Failure{Stage: r.stage, Package: e.Package, Output: lines})
			out = append(out, indent(lines)...)
		}
		delete(r.pkgs, e.Package)
	}
	if len(out) > 0 {
		r.lastSaid = now
	}
	return out
}

// Tick returns a line naming what is still running when nothing has been
// said for the Reporter's quiet time, and nothing otherwise.
func (r *Reporter) Tick(now time.Time) []string {
	if now.Sub(r.lastSaid) < r.quiet || len(r.pkgs) == 0 {
		return nil
	}
	r.lastSaid = now
	var running []string
	for _, name := range sortedKeys(r.pkgs) {
		p := r.pkgs[name]
		s := fmt.Sprintf("%s (%s", shortName(name), now.Sub(p.start).Round(time.Second))
		// The longest-running test is the one a person wants named.
		var longest string
		for test, at := range p.started {
			if longest == "" || at.Before(p.started[longest]) || (at.Equal(p.started[longest]) && test < longest) {
				longest = test
			}
		}
		if longest != "" {
			s += fmt.Sprintf(": %s %s", longest, now.Sub(p.started[longest]).Round(time.Second))
		}
		running = append(running, s+")")
	}
	return []string{fmt.Sprintf("%s running: %s", r.stamp(now), strings.Join(running, ", "))}
}

// Finish ends the stage at now: a package that never said it ended (go test
// was killed, or its build failed before it ran) is a failure with its
// output. It returns the lines to print.
func (r *Reporter) Finish(now time.Time) []string {
	var out []string
	for _, name := range sortedKeys(r.pkgs) {
		p := r.pkgs[name]
		if len(p.output) == 0 && len(p.tests) == 0 {
			continue // a package that only said it started
		}
		lines := append([]string(nil), p.output...)
		for _, test := range sortedKeys(p.tests) {
			lines = append(lines, fmt.Sprintf("(%s, did not end:)", test))
			lines = append(lines, p.tests[test]...)
		}
		r.counts.Failed++
		r.failures = append(r.failures, Failure{Stage: r.stage, Package: name, Output: lines})
		out = append(out, fmt.Sprintf("%s FAIL %s (did not end)", r.stamp(now), name))
		out = append(out, indent(lines)...)
	}
	r.pkgs = map[string]*pkgState{}
	c := r.counts
	out = append(out, fmt.Sprintf("%s stage %s: %d passed, %d failed, %d skipped in %s",
		r.stamp(now), r.stage, c.Passed, c.Failed, c.Skipped, now.Sub(r.start).Round(time.Second)))
	return out
}

// Counts returns the tests counted so far.
func (r *Reporter) Counts() Counts { return r.counts }

// Failures returns the failures so far, in the order they happened.
func (r *Reporter) Failures() []Failure { return r.failures }

// Loose returns the output that came with no package.
func (r *Reporter) Loose() []string { return r.loose }

func appendTail(lines []string, line string) []string {
	lines = append(lines, line)
	if len(lines) > keepLines {
		lines = append(lines[:0], lines[len(lines)-keepLines:]...)
	}
	return lines
}

func indent(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = "    " + l
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// shortName is a package path less the module's, which every package shares.
func shortName(pkg string) string {
	return strings.TrimPrefix(pkg, "github.com/throttlekit/throttlekit/")
}
