package testreport

import (
	"fmt"
	"io"
	"regexp"
	"time"
)

// Summary is one stage's outcome, written by a stage and read by the recap.
type Summary struct {
	Stage    string
	Seconds  float64
	Counts   Counts
	Failures []Failure
}

// recapLines bounds how much of a failure's output the recap repeats: the
// whole output was printed when it failed; the recap names it and shows its
// end, where a test says what it wanted.
const recapLines = 40

// Recap writes every stage's failures, then a closing line of the counts
// over all stages in the form CI and people read ("tests: N passed, N
// failed, N skipped"), and returns those counts.
func Recap(w io.Writer, stages []Summary) Counts {
	var total Counts
	var failures []Failure
	for _, s := range stages {
		total.Passed += s.Counts.Passed
		total.Failed += s.Counts.Failed
		total.Skipped += s.Counts.Skipped
		failures = append(failures, s.Failures...)
	}
	if len(failures) > 0 {
		fmt.Fprintf(w, "\n%d failed:\n", len(failures))
		for _, f := range failures {
			name := f.Test
			if name == "" {
				name = "(the package itself)"
			}
			fmt.Fprintf(w, "\n--- %s: %s %s\n", f.Stage, shortName(f.Package), name)
			out := said(f.Output)
			if len(out) > recapLines {
				fmt.Fprintf(w, "    ... (%d lines above: see the stage's output)\n", len(out)-recapLines)
				out = out[len(out)-recapLines:]
			}
			for _, l := range indent(out) {
				fmt.Fprintln(w, l)
			}
		}
		fmt.Fprintln(w)
	}
	for _, s := range stages {
		fmt.Fprintf(w, "stage %-8s %4d passed, %d failed, %d skipped in %s\n", s.Stage,
			s.Counts.Passed, s.Counts.Failed, s.Counts.Skipped, time.Duration(s.Seconds*float64(time.Second)).Round(time.Second))
	}
	fmt.Fprintf(w, "tests: %d passed, %d failed, %d skipped\n", total.Passed, total.Failed, total.Skipped)
	return total
}

// testSaid is the start of a line a test said itself (t.Log, t.Error,
// t.Fatal): go test prefixes it with the file and line.
var testSaid = regexp.MustCompile(`^\s*[\w.-]+_test\.go:\d+: `)

// said returns the lines of a failure's output that its test said itself,
// when there are any: what it wanted and what it got, without the logs it
// dumps after (a serve process's output can run to hundreds of lines, and
// the recap would show only their end). Otherwise it returns all of out.
func said(out []string) []string {
	var lines []string
	for _, l := range out {
		if testSaid.MatchString(l) {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return out
	}
	return lines
}
