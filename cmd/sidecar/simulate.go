//go:build !lean

package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/throttlekit/throttlekit/internal/sim"
)

// simulateConfig is the simulate command's flags.
type simulateConfig struct {
	scenario string
	out      string
	seed     uint64
	rows     bool
}

func parseSimulate(args []string, stderr io.Writer) (*simulateConfig, error) {
	c := &simulateConfig{}
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.scenario, "scenario", "", "scenario YAML file (see config/scenarios/README.md); required")
	fs.StringVar(&c.out, "out", "out/sim", "directory for the CSVs, the summary and the chart (created if missing)")
	fs.Uint64Var(&c.seed, "seed", 0, "seed for arrivals and jitter; 0 keeps the scenario's")
	fs.BoolVar(&c.rows, "rows", false, "also print every controller's once-a-second rows")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: throttlekit simulate --scenario FILE [--out DIR] [--seed N] [--rows]\n\n"+
			"Runs the scenario's controllers in virtual time and writes DIR/NAME-CONTROLLER.csv,\n"+
			"DIR/NAME-summary.txt, DIR/NAME.svg and DIR/NAME.png.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil { // one-line errors, durations with an example (flags.go)
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("simulate takes no arguments (got %q): did you mean --scenario %s?", fs.Args(), fs.Arg(0))
	case c.scenario == "":
		return nil, errors.New("--scenario FILE is required, e.g. --scenario config/scenarios/capacity-drop.yaml")
	case c.out == "":
		return nil, errors.New("--out DIR must not be empty")
	}
	return c, nil
}

// simulate runs every controller of a scenario and writes their rows, a
// summary and a chart; the summary also goes to stdout.
func simulate(c *simulateConfig, stdout io.Writer) error {
	sc, err := sim.Load(c.scenario)
	if err != nil {
		return err
	}
	if c.seed != 0 {
		sc.Seed = c.seed
	}
	results, err := sim.RunAll(sc)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	var summary bytes.Buffer
	if err := sim.WriteSummary(&summary, sc, results); err != nil {
		return err
	}
	var written []string
	write := func(name string, f func(io.Writer) error) error {
		path := filepath.Join(c.out, name)
		var buf bytes.Buffer
		if err := f(&buf); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return err
		}
		written = append(written, path)
		return nil
	}
	for _, res := range results {
		if err := write(sc.Name+"-"+res.Controller+".csv", func(w io.Writer) error { return sim.WriteCSV(w, res) }); err != nil {
			return err
		}
	}
	steps := []struct {
		name string
		f    func(io.Writer) error
	}{
		{sc.Name + "-summary.txt", func(w io.Writer) error { _, err := w.Write(summary.Bytes()); return err }},
		{sc.Name + ".svg", func(w io.Writer) error { return sim.WriteSVG(w, sc, results) }},
		{sc.Name + ".png", func(w io.Writer) error { return sim.WritePNG(w, sc, results) }},
	}
	for _, s := range steps {
		if err := write(s.name, s.f); err != nil {
			return err
		}
	}
	if c.rows {
		for _, res := range results {
			if err := sim.WriteRows(stdout, res); err != nil {
				return err
			}
			fmt.Fprintln(stdout)
		}
	}
	stdout.Write(summary.Bytes())
	fmt.Fprintln(stdout, "\nwrote:")
	for _, p := range written {
		fmt.Fprintln(stdout, "  "+p)
	}
	return nil
}
