package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// writePolicyView writes the policy e is using for /debug/policy: a header,
// then each file as a YAML document in the policy's own keys (it loads as a
// policy file), each limit followed by a comment saying what it compiled to
// (its rule name in metrics, mode, algorithm, lease batch, keys held) and
// each gate by its controller and state.
func writePolicyView(w io.Writer, e *engine.Engine) error {
	set := e.Policy()
	if set.Hash == "" {
		_, err := fmt.Fprintln(w, "# no policy loaded yet")
		return err
	}
	rules := map[engine.RuleRef]engine.RuleSnapshot{}
	for _, s := range e.Snapshot() {
		rules[s.Ref] = s
	}
	gates := map[string]adaptive.Snapshot{}
	for _, g := range e.GateSnapshots() {
		gates[g.Name] = g
	}
	limits := limitRules(set)
	notes := policy.Notes{
		Limit: func(l *policy.Limit) string {
			lr, ok := limits[l]
			if !ok {
				return ""
			}
			s, ok := rules[lr.ref]
			if !ok {
				return "rule " + lr.ref.Name
			}
			return "rule " + lr.ref.Name + ": " + compiledTo(s, lr.lease)
		},
		Gate: func(g *policy.Gate) string {
			s, ok := gates[g.Name]
			if !ok {
				return ""
			}
			return fmt.Sprintf("%s: limit %d, %d in flight, %d queued", s.Controller, s.Limit, s.Inflight, s.Queued)
		},
	}
	if _, err := fmt.Fprintf(w, "# the policy in use: %s (%s, %s), hash %s\n# each file as loaded; after each limit, what it compiled to; after each gate, its state\n",
		policySource(set), count(len(set.Domains), "domain"), count(len(set.Gates), "gate"), set.Hash); err != nil {
		return err
	}
	for _, f := range set.Files {
		out, err := policy.Format(f, notes)
		if err != nil {
			return fmt.Errorf("%s: %w", f.File, err)
		}
		if _, err := fmt.Fprintf(w, "---\n# %s\n%s", f.File, out); err != nil {
			return err
		}
	}
	return nil
}

// compiledTo says what one limit compiled to: "leased, gcra, batch 10, 3
// keys".
func compiledTo(s engine.RuleSnapshot, lease policy.Lease) string {
	switch s.Algorithm {
	case "unlimited":
		return "unlimited, never counted"
	case "blocked":
		return "blocked (requests_per_unit 0): every request is over"
	case "fair":
		return "fair share of one fixed window among tenants"
	}
	parts := []string{s.Mode.String(), s.Algorithm}
	switch s.Mode {
	case gale.Leased:
		batch := "batch " + strconv.FormatUint(uint64(lease.Batch), 10)
		switch {
		case lease.Auto:
			batch = "batch auto"
		case lease.Batch == 0:
			batch = "batch default"
		}
		if s.Limiter.LastBatch > 0 && (lease.Auto || lease.Batch == 0) {
			batch += fmt.Sprintf(" (last lease %d)", s.Limiter.LastBatch)
		}
		parts = append(parts, batch, count(int(s.Limiter.Keys), "key"))
	case gale.CachedDeny:
		parts = append(parts, count(int(s.Limiter.Keys), "key")+" cached")
	}
	return strings.Join(parts, ", ")
}

// limitRule is what the view needs of the rule a limit compiled to.
type limitRule struct {
	ref   engine.RuleRef
	lease policy.Lease // of the limit's descriptor
}

// limitRules names every limit of set as the engine names its rule (the
// domain and rule labels of the metrics): the limit's name, else its
// descriptor path (key, or key_value, joined by dots), with "#j" added
// when two unnamed limits of one descriptor would share a name. It walks
// the tree in the engine's order (pkg/engine compile), so that the "#j"
// suffixes agree.
func limitRules(set *policy.Set) map[*policy.Limit]limitRule {
	out := map[*policy.Limit]limitRule{}
	seen := map[engine.RuleRef]bool{}
	var walk func(domain string, ds []*policy.Descriptor, path []string)
	walk = func(domain string, ds []*policy.Descriptor, path []string) {
		for _, d := range ds {
			step := d.Key
			if d.Value != "" {
				step += "_" + d.Value
			}
			here := append(append([]string(nil), path...), step)
			for j, l := range d.Limits {
				ref := engine.RuleRef{Domain: domain, Name: l.Name}
				if ref.Name == "" {
					ref.Name = strings.Join(here, ".")
				}
				if seen[ref] {
					ref.Name += "#" + strconv.Itoa(j)
				}
				seen[ref] = true
				out[l] = limitRule{ref: ref, lease: d.Lease}
			}
			walk(domain, d.Descriptors, here)
		}
	}
	for _, d := range set.Domains {
		walk(d.Name, d.Descriptors, nil)
	}
	return out
}

// policySource says where set came from: its directory, or, with none, an
// xDS server (serve's only other source: each file is named after its
// resource).
func policySource(set *policy.Set) string {
	if set.Dir != "" {
		return set.Dir
	}
	return "pushed over xDS (each file below named after its resource)"
}
