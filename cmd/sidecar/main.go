// Command throttlekit is the rate-limit sidecar that runs beside Envoy.
//
//	throttlekit serve [flags]      serve Envoy's RateLimitService and ext_proc (the default)
//	throttlekit validate DIR...    check policy directories as serve would load them
//	throttlekit simulate [flags]   compare concurrency controllers in virtual time
//	throttlekit probe [flags]      ask a running sidecar one question and say the answer
//	throttlekit version            print the version, the commit and the Go version
//
// Every serve flag has an environment twin: --grpc-addr is
// THROTTLEKIT_GRPC_ADDR.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
)

func main() {
	os.Exit(run(context.Background(), commandLine(os.Args), os.Getenv, os.Stdout, os.Stderr)) // as `ratelimit`: commandLine
}

// Exit codes. A probe that gets an answer of OVER_LIMIT or a gate's
// rejection exits exitDenied, so that scripts can tell it from a failure.
const (
	exitOK     = 0
	exitFailed = 1 // the command ran and failed
	exitUsage  = 2 // the command line is wrong
	exitDenied = 3 // probe: the sidecar said no
)

// commands are the subcommands, in the order the usage lists them.
var commands = []struct{ name, summary string }{
	{"serve", "answer Envoy's RateLimitService and ext_proc from a policy directory (the default command)"},
	{"validate", "check policy directories exactly as serve would load them (throttlekit validate DIR...)"},
	{"simulate", "compare concurrency controllers on a scenario, in virtual time"},
	{"probe", "send one rate-limit request, or one request through a gate, and say what came back"},
	{"version", "print the version, the commit and the Go version"},
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 {
		switch a := args[0]; {
		case a == "-h" || a == "-help" || a == "--help":
			usage(stdout)
			return exitOK
		case a == "help" && len(args) > 1:
			return run(ctx, []string{args[1], "--help"}, getenv, stdout, stderr)
		case a == "help":
			usage(stdout)
			return exitOK
		case a == "-version" || a == "--version":
			cmd, args = "version", args[1:]
		case a != "" && a[0] != '-':
			cmd, args = a, args[1:]
		}
	}
	// parsed turns a command line's error into an exit code: help is 0.
	parsed := func(err error) (int, bool) {
		switch {
		case errors.Is(err, flag.ErrHelp):
			return exitOK, false
		case err != nil:
			fmt.Fprintf(stderr, "throttlekit %s: %v\n", cmd, err)
			return exitUsage, false
		}
		return 0, true
	}
	switch cmd {
	case "serve":
		c, err := parseServe(args, getenv, stderr)
		if code, ok := parsed(err); !ok {
			return code
		}
		if err := serve(ctx, c, stderr); err != nil {
			fmt.Fprintln(stderr, "throttlekit serve:", err)
			return exitFailed
		}
		return exitOK
	case "validate":
		v, err := parseValidate(args, getenv, stderr)
		if code, ok := parsed(err); !ok {
			return code
		}
		if !validate(v, stdout, stderr) {
			return exitFailed
		}
		return exitOK
	case "simulate":
		c, err := parseSimulate(args, stderr)
		if code, ok := parsed(err); !ok {
			return code
		}
		if err := simulate(c, stdout); err != nil {
			fmt.Fprintln(stderr, "throttlekit simulate:", err)
			return exitFailed
		}
		return exitOK
	case "probe":
		c, err := parseProbe(args, stdout)
		if code, ok := parsed(err); !ok {
			return code
		}
		return probeOnce(ctx, c, stdout, stderr)
	case "version":
		fs := flag.NewFlagSet("version", flag.ContinueOnError)
		fs.SetOutput(stdout)
		fs.Usage = func() {
			fmt.Fprintln(fs.Output(), "usage: throttlekit version\n\nPrints the module version, the VCS commit the binary was built from, and the Go version.")
		}
		err := parseFlags(fs, args)
		if err == nil && fs.NArg() > 0 {
			err = fmt.Errorf("version takes no arguments (got %q)", fs.Args())
		}
		if code, ok := parsed(err); !ok {
			return code
		}
		printVersion(stdout, debug.ReadBuildInfo)
		return exitOK
	}
	fmt.Fprintf(stderr, "throttlekit: unknown command %q\n\n", cmd)
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, "throttlekit: a rate-limit and adaptive-concurrency sidecar for Envoy.\n\nusage: throttlekit <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\n`throttlekit <command> --help` lists a command's flags. With no command the\n"+
		"flags are serve's: `throttlekit --policy ./config` is `throttlekit serve --policy ./config`.\n")
}

// version is the release's version (the repository's VERSION file), set
// at build time: go build -ldflags "-X main.version=$(cat VERSION)", as
// `make build` and the Dockerfile do. Empty in a plain go build.
var version string

// printVersion writes the release version (version, else the module's),
// the commit and the Go version that info (debug.ReadBuildInfo) reports.
func printVersion(w io.Writer, info func() (*debug.BuildInfo, bool)) {
	bi, ok := info()
	if !ok {
		v := "version unknown (built without module information)"
		if version != "" {
			v = version
		}
		fmt.Fprintf(w, "throttlekit %s\n%s\n", v, runtime.Version())
		return
	}
	version := releaseVersionOf(bi)
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	commit := "commit unknown (not built from a VCS checkout, or built with -buildvcs=false)"
	if rev := vcs["vcs.revision"]; rev != "" {
		commit = "commit " + rev
		var notes []string
		if t := vcs["vcs.time"]; t != "" {
			notes = append(notes, t)
		}
		if vcs["vcs.modified"] == "true" {
			notes = append(notes, "with uncommitted changes")
		}
		if len(notes) > 0 {
			commit += " (" + strings.Join(notes, ", ") + ")"
		}
	}
	fmt.Fprintf(w, "throttlekit %s\n%s\n%s\n", version, commit, bi.GoVersion)
}

// upstreamCommand is the name envoyproxy/ratelimit's image runs
// (/bin/ratelimit): manifests that set `command: [/bin/ratelimit]` run this
// binary under it.
const upstreamCommand = "ratelimit"

// commandLine is the arguments run gets for argv (os.Args). Run as
// `ratelimit` without a subcommand, the binary serves with upstream's
// defaults (--upstream-defaults), as upstream's does.
func commandLine(argv []string) []string {
	if len(argv) == 0 {
		return nil
	}
	args := argv[1:]
	if filepath.Base(argv[0]) != upstreamCommand || (len(args) > 0 && args[0] != "" && args[0][0] != '-') {
		return args
	}
	return append([]string{"serve", "--upstream-defaults"}, args...)
}
