// Command throttlekit is the rate-limit sidecar. Until the Envoy-facing server
// lands, it runs a demonstration of the engine on the embedded (in-memory)
// store: a fleet of nodes in leased mode sharing one limit, with the
// admissions of every window printed beside the limit they must respect.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

func main() {
	nodes := flag.Int("nodes", 4, "fleet size")
	limit := flag.Int64("limit", 100, "requests per second for the whole fleet")
	batch := flag.Int64("batch", 10, "credits per lease")
	uncoupled := flag.Bool("uncoupled", false, "let leased credits outlive their window")
	windows := flag.Int("windows", 5, "windows to simulate")
	flag.Parse()
	if err := demo(*nodes, *limit, *batch, *uncoupled, *windows); err != nil {
		fmt.Fprintln(os.Stderr, "throttlekit:", err)
		os.Exit(1)
	}
}

func demo(n int, limit, batch int64, uncoupled bool, windows int) error {
	store := memstore.New()
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: limit, Period: time.Second}
	fleet := make([]*gale.Limiter, n)
	for i := range fleet {
		l, err := gale.New(store, gale.Config{Rule: rule, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: batch, Uncoupled: uncoupled}})
		if err != nil {
			return err
		}
		defer l.Close(context.Background())
		fleet[i] = l
	}
	fmt.Printf("%d nodes, leased (window-coupled: %v), batch %d, limit %d per 1s window, 3× oversubscribed\n", n, !uncoupled, batch, limit)
	fmt.Printf("%-8s %9s %9s\n", "window", "admitted", "limit")
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(1_800_000_000, 0)
	for w := 0; w < windows; w++ {
		var admitted int64
		for i := int64(0); i < 3*limit; i++ {
			at := now.Add(time.Duration(i) * time.Second / time.Duration(3*limit))
			d, err := fleet[rng.IntN(n)].Check(context.Background(), "demo-client", 1, at)
			if err != nil {
				return err
			}
			if d.Allowed {
				admitted++
			}
		}
		fmt.Printf("%-8d %9d %9d\n", w, admitted, limit)
		now = now.Add(time.Second)
	}
	var st gale.Stats
	for _, l := range fleet {
		s := l.Stats()
		st.LocalHits += s.LocalHits
		st.LeasesGranted += s.LeasesGranted
		st.CreditsStranded += s.CreditsStranded
	}
	fmt.Printf("local hits %d, leases granted %d (store round trips), credits stranded at window ends %d\n", st.LocalHits, st.LeasesGranted, st.CreditsStranded)
	return nil
}
