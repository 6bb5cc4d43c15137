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

// validateArgs is validate's command line: policy directories, and how
// to read them.
type validateArgs struct {
	dirs []string
	tree bool // every file below each directory (--policy-tree)
}

// parseValidate reads validate's command line: policy directories.
func parseValidate(args []string, stdout io.Writer) (validateArgs, error) {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var v validateArgs
	fs.BoolVar(&v.tree, "policy-tree", false, "read every file below each directory, subdirectories included and whatever the extension (serve's --policy-tree)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: throttlekit validate [--policy-tree] DIR...\n\n"+
			"Loads each policy directory exactly as serve would (every *.yaml and *.yml file in it;\n"+
			"with --policy-tree every file below it) and prints DIR: OK (N domains, M gates), or\n"+
			"every problem as file:line: field: message.\n"+
			"Exits 1 when a directory is invalid, or holds no policy file.\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return v, err
	}
	if fs.NArg() == 0 {
		return v, errors.New("give at least one policy directory, e.g. throttlekit validate ./config")
	}
	v.dirs = fs.Args()
	return v, nil
}

// validate loads each directory exactly as serve would and prints OK or
// every error as file:line: field: message. It reports whether all were
// valid.
func validate(args validateArgs, stdout, stderr io.Writer) bool {
	e, _ := engine.New(engine.Options{Store: memstore.New()})
	ok := true
	for _, dir := range args.dirs {
		set, err := policy.Load(dir)
		if args.tree {
			set, _, err = policy.LoadTree(dir)
		}
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
