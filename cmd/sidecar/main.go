// Command throttlekit is the rate-limit sidecar that runs beside Envoy.
//
//	throttlekit serve [flags]      serve Envoy's RateLimitService (the default)
//	throttlekit validate DIR...    check policy directories as serve would load them
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
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		c, err := parseServe(args, getenv, stderr)
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if err != nil {
			fmt.Fprintln(stderr, "throttlekit serve:", err)
			return 2
		}
		if err := serve(ctx, c, stderr); err != nil {
			fmt.Fprintln(stderr, "throttlekit serve:", err)
			return 1
		}
		return 0
	case "validate":
		if !validate(args, stdout, stderr) {
			return 1
		}
		return 0
	case "simulate":
		c, err := parseSimulate(args, stderr)
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if err != nil {
			fmt.Fprintln(stderr, "throttlekit simulate:", err)
			return 2
		}
		if err := simulate(c, stdout); err != nil {
			fmt.Fprintln(stderr, "throttlekit simulate:", err)
			return 1
		}
		return 0
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "throttlekit: unknown command %q\n", cmd)
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  throttlekit serve [flags]      serve Envoy's RateLimitService (the default command)
  throttlekit validate DIR...    check policy directories exactly as serve loads them
  throttlekit simulate --scenario FILE --out DIR   compare concurrency controllers in virtual time
  throttlekit serve -h           list serve's flags (each has a THROTTLEKIT_<NAME> twin)
`)
}
