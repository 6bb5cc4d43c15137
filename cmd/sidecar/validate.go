package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// parseValidate reads validate's command line: policy directories.
func parseValidate(args []string, stdout io.Writer) ([]string, error) {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: throttlekit validate DIR...\n\n"+
			"Loads each policy directory exactly as serve would (every *.yaml and *.yml file in it)\n"+
			"and prints DIR: OK (N domains, M gates), or every problem as file:line: field: message.\n"+
			"Exits 1 when a directory is invalid, or holds no policy file.\n")
	}
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() == 0 {
		return nil, errors.New("give at least one policy directory, e.g. throttlekit validate ./config")
	}
	return fs.Args(), nil
}

// validate loads each directory exactly as serve would and prints OK or
// every error as file:line: field: message. It reports whether all were
// valid.
func validate(dirs []string, stdout, stderr io.Writer) bool {
	e, _ := engine.New(engine.Options{Store: memstore.New()})
	ok := true
	for _, dir := range dirs {
		set, err := policy.Load(dir)
		if err == nil {
			err = e.Check(set)
		}
		if err == nil {
			fmt.Fprintf(stdout, "%s: OK (%s, %s)\n", dir, count(len(set.Domains), "domain"), count(len(set.Gates), "gate"))
			continue
		}
		ok = false
		var perrs policy.Errors
		if errors.As(err, &perrs) {
			for _, pe := range perrs {
				fmt.Fprintln(stderr, pe.Error())
			}
			continue
		}
		fmt.Fprintf(stderr, "%s: %v\n", dir, err)
	}
	return ok
}

// count is "1 gate", "2 gates", "0 gates".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
