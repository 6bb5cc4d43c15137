//go:build lean

package main

import (
	"errors"
	"io"
)

// The lean build (-tags lean, as the image is built) leaves simulate out:
// its charts link plotting, LaTeX and fonts, more than half the binary,
// which a serving sidecar never uses.

// errLean is what simulate says in the lean build.
var errLean = errors.New("simulate is not in this build (built with -tags lean, as the image is, to keep the serving binary small): run the full binary (make build: bin/throttlekit simulate)")

type simulateConfig struct{}

func parseSimulate(args []string, stderr io.Writer) (*simulateConfig, error) { return nil, errLean }

func simulate(*simulateConfig, io.Writer) error { return errLean }
