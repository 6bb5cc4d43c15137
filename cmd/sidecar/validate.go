package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

const validateUsage = "usage: throttlekit validate [serve's flags] [DIR...]\n\n" +
	"Loads each policy directory (--policy when none is given) exactly as serve would\n" +
	"with the same flags and environment — every *.yaml and *.yml file in it, every file\n" +
	"below it with --policy-tree — and builds it as serve would (federated rules against\n" +
	"--region and --federation-url, distributed gates against --store redis and\n" +
	"--postgres-url), without connecting to anything. Prints DIR: OK (N domains, M gates),\n" +
	"or every problem as file:line: field: message. Exits 1 when a directory is invalid,\n" +
	"holds no policy file, or would be refused by serve. With --rlqs it also lists, as\n" +
	"DIR: rlqs: ..., every rule the quota service would answer DENY_ALL for (an Envoy's\n" +
	"rate_limit_quota filter denies every request of their buckets; RLS still serves\n" +
	"them), and exits 1 when there is one.\n\n"

// validateArgs is validate's command line: serve's configuration, and the
// policy directories to check.
type validateArgs struct {
	c    *serveConfig
	dirs []string
}

// parseValidate reads validate's command line: serve's flags (and
// environment), then policy directories.
func parseValidate(args []string, getenv func(string) string, stderr io.Writer) (validateArgs, error) {
	c, dirs, err := parseServeFor("validate", args, getenv, stderr)
	if err != nil {
		return validateArgs{}, err
	}
	if c.xds.enabled() && len(dirs) == 0 {
		return validateArgs{}, errors.New("with --config-xds-url the policy comes over xDS: give validate the directory to check (validate DIR)")
	}
	if len(dirs) == 0 {
		dirs = []string{c.policyDir}
	}
	return validateArgs{c: c, dirs: dirs}, nil
}

// validate loads and builds each directory as serve would with the same
// configuration, and prints OK or every error as file:line: field:
// message. It reports whether all were valid.
func validate(args validateArgs, stdout, stderr io.Writer) bool {
	ok := true
	for _, dir := range args.dirs {
		set, err := policy.Load(dir)
		if args.c.policyTree {
			set, _, err = policy.LoadTree(dir)
		} else if note := belowNote(dir); note != "" {
			fmt.Fprintf(stderr, "%s: note: %s\n", dir, note)
		}
		var refused []error
		if err == nil {
			refused, err = build(args.c, set)
		}
		if err == nil {
			fmt.Fprintf(stdout, "%s: OK (%s, %s)\n", dir, count(len(set.Domains), "domain"), count(len(set.Gates), "gate"))
			for _, r := range refused {
				fmt.Fprintf(stdout, "%s: rlqs: %s\n", dir, strings.TrimPrefix(r.Error(), "rlqs: "))
			}
			if len(refused) > 0 {
				// Over RLQS a refused rule's buckets get a blanket
				// DENY_ALL: every request of theirs is denied.
				ok = false
				fmt.Fprintf(stderr, "%s: %s the quota service (--rlqs) would answer DENY_ALL for, denying every request of their buckets at the Envoys: serve them over RLS only (drop --rlqs here), or give them a window of 2s or more (fixed_window, sliding_window, quota)\n",
					dir, count(len(refused), "rule"))
			}
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

// build loads set into an engine wired as serve wires it for c (the same
// engineOptions, federation and fleet parts), whose stores and
// coordinators are in memory: every refusal serve's wiring makes, without
// connecting to anything. With --rlqs it returns the rules the quota
// service would refuse (engine.QuotaRefusals).
func build(c *serveConfig, set *policy.Set) ([]error, error) {
	log := slog.New(slog.DiscardHandler)
	fleet := &fleetParts{nodeID: c.nodeID, log: log}
	if c.store == "redis" {
		fleet.redis = distributed.NewMemory()
	}
	if c.postgresURL != "" {
		fleet.pg = distributed.NewMemory()
	}
	var fed *federationParts
	if c.region != "" {
		fed = newFederationParts(c)
		fed.coord = federation.NewMemoryCoordinator(nil)
		if c.store == "redis" { // serve's escrow and regional budget are on --redis-url
			fed.escrow, fed.fallback = federation.NewMemoryEscrow(), memstore.New()
		}
		defer fed.close()
	}
	e, err := engine.New(engineOptions(c, memstore.New(), fed, fleet, log))
	if err != nil {
		return nil, err
	}
	defer e.Close(context.Background()) //nolint:errcheck // a throwaway engine
	if err := e.Load(context.Background(), set); err != nil {
		return nil, err
	}
	if c.rlqs.enabled {
		return e.QuotaRefusals(), nil
	}
	return nil, nil
}

// count is "1 gate", "2 gates", "0 gates".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// belowNote says which files below dir serve and validate do not read
// without --policy-tree, or "" when there is none: a directory laid out as
// envoyproxy/ratelimit's runtime tree (sub/api.yaml) lost them without a
// word.
func belowNote(dir string) string {
	files, total := policy.Below(dir, 3)
	if total == 0 {
		return ""
	}
	more := ""
	if total > len(files) {
		more = fmt.Sprintf(" and %d more", total-len(files))
	}
	return fmt.Sprintf("%s%s below %s %s not read: only the files directly in it are, unless --policy-tree reads every file below it (envoyproxy/ratelimit's runtime layout)",
		strings.Join(files, ", "), more, dir, map[bool]string{true: "is", false: "are"}[total == 1])
}
