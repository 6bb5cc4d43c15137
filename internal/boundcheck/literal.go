package boundcheck

import (
	"fmt"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// Literal is sc as Go source, to keep in regress_test.go.
func (sc Schedule) Literal() string {
	var b strings.Builder
	fmt.Fprintf(&b, "{Seed: %d, Nodes: %d", sc.Seed, sc.Nodes)
	if sc.Steady {
		b.WriteString(", Steady: true")
	}
	if sc.Skew != nil {
		fmt.Fprintf(&b, ", Skew: %s", durations(sc.Skew))
	}
	fmt.Fprintf(&b, ", Spec: %s, Steps: []Step{\n", sc.Spec.literal())
	for _, st := range sc.Steps {
		fmt.Fprintf(&b, "\t{At: %d, Kind: %s", st.At, kindNames[st.Kind])
		if st.Kind == Check || st.Kind == Reserve || st.Kind == Kill || st.Kind == Stop {
			if st.Node != 0 {
				fmt.Fprintf(&b, ", Node: %d", st.Node)
			}
		}
		if st.Tenant != "" {
			fmt.Fprintf(&b, ", Tenant: %q", st.Tenant)
		}
		if st.Kind == Settle {
			fmt.Fprintf(&b, ", Node: %d, Ref: %d", st.Node, st.Ref)
		}
		if st.Kind == Check || st.Kind == Reserve || st.Kind == Settle {
			fmt.Fprintf(&b, ", Cost: %d", st.Cost)
		}
		if st.Policy != nil {
			fmt.Fprintf(&b, ", Policy: &%s", st.Policy.literal())
		}
		b.WriteString("},\n")
	}
	b.WriteString("}}")
	return b.String()
}

var kindNames = [...]string{"Check", "Reserve", "Settle", "Reload", "Kill", "Stop", "Restart"}

func (sp Spec) literal() string {
	var b strings.Builder
	b.WriteString("Spec{")
	if sp.Fair {
		b.WriteString("Fair: true, ")
		if sp.MaxTenants > 0 {
			fmt.Fprintf(&b, "MaxTenants: %d, ", sp.MaxTenants)
		}
	}
	fmt.Fprintf(&b, "Mode: %s, Batch: %d, Limits: []Limit{", map[Mode]string{Strict: "Strict", CachedDeny: "CachedDeny", Leased: "Leased"}[sp.Mode], sp.Batch)
	for i, l := range sp.Limits {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "{")
		if l.Name != "" {
			fmt.Fprintf(&b, "Name: %q, ", l.Name)
		}
		fmt.Fprintf(&b, "Algorithm: %s, Period: %s, Count: %d", algorithmNames[l.Algorithm], duration(l.Period), l.Count)
		if l.Burst > 0 {
			fmt.Fprintf(&b, ", Burst: %d", l.Burst)
		}
		b.WriteString("}")
	}
	b.WriteString("}}")
	return b.String()
}

var algorithmNames = map[policy.Algorithm]string{FixedWindow: "FixedWindow", SlidingWindow: "SlidingWindow", GCRA: "GCRA", TokenBucket: "TokenBucket"}

func duration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%d * time.Second", d/time.Second)
	}
	return fmt.Sprintf("%d", int64(d))
}

func durations(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%d", int64(d)))
	}
	return "[]time.Duration{" + strings.Join(s, ", ") + "}"
}
