package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// validate loads each directory exactly as serve would and prints OK or
// every error as file:line: field: message. It reports whether all were
// valid.
func validate(dirs []string, stdout, stderr io.Writer) bool {
	if len(dirs) == 0 {
		fmt.Fprintln(stderr, "usage: throttlekit validate DIR...")
		return false
	}
	e, _ := engine.New(engine.Options{Store: memstore.New()})
	ok := true
	for _, dir := range dirs {
		set, err := policy.Load(dir)
		if err == nil {
			err = e.Check(set)
		}
		if err == nil {
			fmt.Fprintf(stdout, "%s: OK (%d domains)\n", dir, len(set.Domains))
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
