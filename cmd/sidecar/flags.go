package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// parseFlags parses args into fs the way every subcommand does: a mistake
// is one line saying what to write (a duration without a unit shows one
// with it) and never dumps the usage; -h and --help print fs's usage to
// fs's output and return flag.ErrHelp.
//
// Every duration flag of fs gets durationValue's messages, on the command
// line and from environment twins (fs.Set) alike.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.VisitAll(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, ok := g.Get().(time.Duration); ok {
				f.Value = newDurationValue(f.Value, f.DefValue)
			}
		}
	})
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		// PrintDefaults names the flag package's own duration type
		// "duration" and shows its default: give it back for the usage.
		fs.VisitAll(func(f *flag.Flag) {
			if d, ok := f.Value.(*durationValue); ok {
				f.Value = d.Value
			}
		})
		fs.Usage()
		return err
	}
	if err != nil {
		return flagError(fs.Name(), err)
	}
	return nil
}

var (
	badValue   = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-([^:]+): (.*)$`)
	undefined  = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	needsValue = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
)

// flagError rewrites the flag package's messages in our form:
// "--store-timeout 50: missing unit; ...".
func flagError(cmd string, err error) error {
	msg := err.Error()
	help := fmt.Sprintf("(`throttlekit %s --help` lists the flags)", cmd)
	switch {
	case badValue.MatchString(msg):
		m := badValue.FindStringSubmatch(msg)
		if m[3] == "parse error" {
			return fmt.Errorf("--%s %s: not a valid value %s", m[2], m[1], help)
		}
		return fmt.Errorf("--%s %s: %s", m[2], m[1], m[3])
	case undefined.MatchString(msg):
		return fmt.Errorf("unknown flag --%s %s", undefined.FindStringSubmatch(msg)[1], help)
	case needsValue.MatchString(msg):
		return fmt.Errorf("--%s needs a value %s", needsValue.FindStringSubmatch(msg)[1], help)
	}
	return err
}

// durationValue is a duration flag whose errors say how to write one.
type durationValue struct {
	flag.Value        // the flag package's own duration
	unit       string // the unit of the flag's default: ms, s or m
	example    string // a duration to show: the default, or 1s
}

// newDurationValue wraps v, a duration flag whose default is def.
func newDurationValue(v flag.Value, def string) *durationValue {
	d, _ := time.ParseDuration(def)
	dv := &durationValue{Value: v, unit: "ms", example: "1s"}
	switch {
	case d >= time.Minute:
		dv.unit = "m"
	case d >= time.Second, d == 0: // no default: seconds suit most
		dv.unit = "s"
	}
	if d > 0 {
		dv.example = prettyDuration(d)
	}
	return dv
}

// prettyDuration writes d as people do: 1m, not 1m0s; 2h, not 2h0m0s.
func prettyDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// String is the duration; "0s" for the zero durationValue (which
// PrintDefaults makes to learn the zero value's text).
func (d *durationValue) String() string {
	if d == nil || d.Value == nil {
		return "0s"
	}
	return d.Value.String()
}

// Set parses s as a duration, with an example when it is not one.
func (d *durationValue) Set(s string) error {
	if _, err := time.ParseDuration(s); err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return fmt.Errorf("missing unit; write a duration such as %s%s", s, d.unit)
		}
		return fmt.Errorf("not a duration; write one such as %s", d.example)
	}
	return d.Value.Set(s)
}

// stringsFlag is a repeatable string flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, " ") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }
