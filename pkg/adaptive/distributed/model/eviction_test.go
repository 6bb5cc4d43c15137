package model

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// evictedNode is node.go's grant rule (Node.Beat), transcribed: a grant is
// applied when its generation is above the one in force.
type evictedNode struct {
	name     string
	seq, gen uint64
	share    int
}

func (n *evictedNode) report() distributed.Report {
	n.seq++
	return distributed.Report{Node: n.name, Instance: instance, Seq: n.seq, Local: 2, AppliedGen: n.gen}
}

// answer applies g and reports whether it did.
func (n *evictedNode) answer(g distributed.Grant) bool {
	if g.Gen > n.gen {
		n.gen, n.share = g.Gen, g.Share
		return true
	}
	return false
}

// TestNoAckOfUnappliedGeneration drives the real Beat through an eviction
// and the node's way back, with node.go's rule for applying grants. Node
// a, alone, applies generation 3; it is cut off past its lease, b's beat
// evicts it, and a comes back — same instance. The answer to its first
// beat back is lost. Its second report still echoes generation 3, and Beat
// recorded it as the acknowledgement of the new record's generation 1,
// which a never received: handoff's High, the reserve for shares issued
// and not acknowledged, was reset to the latest share while generation 1's
// answer could still arrive. Beat now numbers a recreated record on above
// the echoed generation. Property: the coordinator records an
// acknowledgement of a generation the recreated record issued only once
// the node applied it; and the node applies the new record's grants.
func TestNoAckOfUnappliedGeneration(t *testing.T) {
	cfg := distributed.Config{LeaseTTL: 10 * time.Microsecond, Handoff: true}
	a, b := &evictedNode{name: "a"}, &evictedNode{name: "b"}
	var recs []distributed.Record
	var log strings.Builder
	var violations []string
	appliedNew := map[uint64]bool{} // generations of a's new record a applied
	var firstNew uint64             // the first generation a's new record issued
	beat := func(n *evictedNode, now int64, lost bool) {
		rep := n.report()
		var g distributed.Grant
		var err error
		recs, g, err = distributed.Beat(recs, rep, cfg, now)
		if err != nil {
			t.Fatal(err)
		}
		if n == a && now > 12 && firstNew == 0 {
			firstNew = g.Gen
		}
		outcome := "lost"
		if !lost {
			outcome = fmt.Sprintf("applied: %v", n.answer(g))
			if n == a && now > 12 && n.gen == g.Gen {
				appliedNew[g.Gen] = true
			}
		}
		fmt.Fprintf(&log, "t=%-3d %s beats (seq %d, applied %d) → share %d gen %d, %s;", now, n.name, rep.Seq, rep.AppliedGen, g.Share, g.Gen, outcome)
		for _, r := range recs {
			fmt.Fprintf(&log, " %s{share %d high %d gen %d acked %d}", r.Node, r.Share, r.High, r.Gen, r.AppliedGen)
			if r.Node == "a" && now > 12 && r.AppliedGen >= firstNew && !appliedNew[r.AppliedGen] {
				violations = append(violations, fmt.Sprintf("t=%d: a's record counts generation %d as applied; a applied none of the new record's", now, r.AppliedGen))
			}
		}
		fmt.Fprintf(&log, "  | a holds %d@%d\n", a.share, a.gen)
	}
	for now := int64(0); now < 3; now++ {
		beat(a, now, false) // generations 1, 2, 3 of share 2; a's lease ends at 12
	}
	beat(b, 13, false) // a has expired: evicted
	beat(a, 14, true)  // the recreated record's generation 1; the answer is lost
	beat(a, 15, false) // echoes 3: counted as acknowledging generation 1
	if len(violations) > 0 {
		t.Fatalf("%s\n%s", strings.Join(violations, "\n"), log.String())
	}
	if a.gen <= 3 || !appliedNew[a.gen] {
		t.Fatalf("a holds %d@%d: the new record's grant was not applied\n%s", a.share, a.gen, log.String())
	}
	t.Log(log.String())
}
