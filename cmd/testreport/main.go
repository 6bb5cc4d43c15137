// Command testreport is what `make test` pipes `go test -json` through
// (scripts/test.sh): it prints each package as it ends, with its stage and
// the stage's elapsed time, names what is still running when a minute
// passes with nothing said, prints a failing test's whole output as it
// fails, and writes the stage's counts and failures to a summary file.
// `testreport recap` reads the summaries of every stage at the end and
// prints every failure again, then one closing line of counts.
//
//	go test -json ./... | testreport run -stage unit -summary out/test/unit.json
//	testreport exec -stage vet -summary out/test/vet.json -- go vet ./...
//	testreport recap out/test/*.json
//
// exec runs a step that is not a test (gofmt, go vet) as a stage of its
// own: its output is printed as it comes, and a non-zero exit is a failure
// the recap names.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/internal/testreport"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testreport run -stage NAME -summary FILE < go-test-json | testreport exec -stage NAME -summary FILE -- COMMAND... | testreport recap FILE...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2:], os.Stdin, os.Stdout)
	case "exec":
		err = execStage(os.Args[2:], os.Stdout)
	case "recap":
		err = recap(os.Args[2:], os.Stdout)
	default:
		err = fmt.Errorf("unknown subcommand %q: want run or recap", os.Args[1])
	}
	if errors.Is(err, errFailed) {
		os.Exit(1)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
}

// errFailed says a test or a package failed; what failed is already printed.
var errFailed = errors.New("tests failed")

// run reports one stage read from in and writes its summary.
func run(args []string, in io.Reader, w io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	stage := fs.String("stage", "test", "the stage's name, printed on every line")
	summary := fs.String("summary", "", "where to write the stage's counts and failures (JSON), for recap")
	quiet := fs.Duration("quiet", time.Minute, "name what is still running after this long with nothing said")
	if err := fs.Parse(args); err != nil {
		return err
	}
	start := time.Now()
	r := testreport.New(*stage, start, *quiet)
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			lines <- append([]byte(nil), sc.Bytes()...)
		}
		readErr <- sc.Err()
		close(lines)
	}()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	print := func(out []string) {
		for _, l := range out {
			fmt.Fprintln(w, l)
		}
	}
	for done := false; !done; {
		select {
		case line, ok := <-lines:
			if !ok {
				done = true
				break
			}
			print(r.Event(testreport.ParseEvent(line), time.Now()))
		case now := <-tick.C:
			print(r.Tick(now))
		}
	}
	if err := <-readErr; err != nil {
		return fmt.Errorf("reading go test's output: %w", err)
	}
	end := time.Now()
	print(r.Finish(end))
	s := testreport.Summary{Stage: *stage, Seconds: end.Sub(start).Seconds(), Counts: r.Counts(), Failures: r.Failures()}
	if err := writeSummary(*summary, s); err != nil {
		return err
	}
	if s.Counts.Failed > 0 {
		return errFailed
	}
	return nil
}

// execStage runs a command that is not a test as a stage: its output is
// printed as it comes, and a non-zero exit is the stage's one failure.
func execStage(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	stage := fs.String("stage", "step", "the stage's name")
	summary := fs.String("summary", "", "where to write the stage's outcome (JSON), for recap")
	if err := fs.Parse(args); err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return errors.New("exec: no command after the flags")
	}
	start := time.Now()
	var out strings.Builder
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = io.MultiWriter(w, &out)
	cmd.Stderr = cmd.Stdout
	// A step says nothing while it compiles (go vet on a cold cache takes
	// minutes): say it still runs, a line a minute.
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(time.Minute)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				fmt.Fprintf(w, "[%s] running (%s)\n", *stage, now.Sub(start).Round(time.Second))
			}
		}
	}()
	runErr := cmd.Run()
	close(done)
	s := testreport.Summary{Stage: *stage, Seconds: time.Since(start).Seconds()}
	if runErr != nil {
		lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
		lines = append(lines, fmt.Sprintf("%s: %v", strings.Join(argv, " "), runErr))
		s.Counts.Failed = 1
		s.Failures = []testreport.Failure{{Stage: *stage, Package: strings.Join(argv, " "), Output: lines}}
	}
	fmt.Fprintf(w, "[%s] %s in %s\n", *stage, map[bool]string{true: "ok", false: "FAIL"}[runErr == nil], time.Since(start).Round(time.Second))
	if err := writeSummary(*summary, s); err != nil {
		return err
	}
	if runErr != nil {
		return errFailed
	}
	return nil
}

// writeSummary writes a stage's summary to path (nothing when path is empty).
func writeSummary(path string, s testreport.Summary) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing the summary: %w", err)
	}
	return nil
}

// recap prints every stage's failures and the closing counts.
func recap(files []string, w io.Writer) error {
	var all []testreport.Summary
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("reading a stage's summary: %w", err)
		}
		var s testreport.Summary
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		all = append(all, s)
	}
	total := testreport.Recap(w, all)
	if total.Failed > 0 {
		return errFailed
	}
	return nil
}
