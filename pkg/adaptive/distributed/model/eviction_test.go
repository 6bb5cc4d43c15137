package model

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// falseAckKnown records a defect of distributed.Beat this package found
// (PROOFS_SECTION.md, "Known defect"): a record evicted and recreated for
// the same instance starts its generations over, and Beat clips the node's
// echo of its old generation to the new record's Gen and counts it as an
// acknowledgement. While it is true, TestNoAckOfUnappliedGeneration logs
// the run and skips; once Beat is fixed the test fails, asking for this to
// be set false, and from then on it guards the fix.
const falseAckKnown = true

// evictedNode is node.go's grant rule (Node.Beat), transcribed: a grant
// is applied when its generation is above the one in force, or when a
// Granted answer is not above the generation its own report acknowledged
// — the coordinator recreated the record and numbers afresh — unless the
// report was sent before the last such renumbering.
type evictedNode struct {
	name               string
	seq, gen, epochSeq uint64
	share              int
}

func (n *evictedNode) report() distributed.Report {
	n.seq++
	return distributed.Report{Node: n.name, Instance: instance, Seq: n.seq, Local: 2, AppliedGen: n.gen}
}

// answer applies g, the answer to rep, and reports whether it did.
func (n *evictedNode) answer(rep distributed.Report, g distributed.Grant) bool {
	switch {
	case rep.Seq < n.epochSeq:
		return false
	case g.Status == distributed.Granted && g.Gen <= rep.AppliedGen:
		n.epochSeq = rep.Seq
		n.gen, n.share = g.Gen, g.Share
		return true
	case g.Gen > n.gen:
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
// records it as the acknowledgement of the new record's generation 1,
// which a never received: handoff's High, the reserve for shares issued
// and not acknowledged, is reset to the latest share while generation 1's
// answer may still arrive. Property: the coordinator records an
// acknowledgement only of a generation the node applied.
//
// (Before node.go renumbered on such answers, a ignored every grant of the
// new record until its generation passed 3: node_test.go's
// TestNodeFollowsARecreatedRecord now covers that.)
func TestNoAckOfUnappliedGeneration(t *testing.T) {
	cfg := distributed.Config{LeaseTTL: 10 * time.Microsecond, Handoff: true}
	a, b := &evictedNode{name: "a"}, &evictedNode{name: "b"}
	var recs []distributed.Record
	var log strings.Builder
	var violations []string
	appliedNew := map[uint64]bool{} // generations of a's new record a applied
	beat := func(n *evictedNode, now int64, lost bool) {
		rep := n.report()
		var g distributed.Grant
		var err error
		recs, g, err = distributed.Beat(recs, rep, cfg, now)
		if err != nil {
			t.Fatal(err)
		}
		outcome := "lost"
		if !lost {
			outcome = fmt.Sprintf("applied: %v", n.answer(rep, g))
			if n == a && now > 12 && n.gen == g.Gen {
				appliedNew[g.Gen] = true
			}
		}
		fmt.Fprintf(&log, "t=%-3d %s beats (seq %d, applied %d) → share %d gen %d, %s;", now, n.name, rep.Seq, rep.AppliedGen, g.Share, g.Gen, outcome)
		for _, r := range recs {
			fmt.Fprintf(&log, " %s{share %d high %d gen %d acked %d}", r.Node, r.Share, r.High, r.Gen, r.AppliedGen)
			if r.Node == "a" && now > 12 && r.AppliedGen > 0 && !appliedNew[r.AppliedGen] {
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
	switch {
	case len(violations) > 0 && falseAckKnown:
		t.Skipf("known defect of distributed.Beat (an old generation's echo acknowledges a recreated record's):\n%s\n%s", strings.Join(violations, "\n"), log.String())
	case len(violations) > 0:
		t.Fatalf("%s\n%s", strings.Join(violations, "\n"), log.String())
	case falseAckKnown:
		t.Fatalf("Beat no longer counts an old generation's echo as an acknowledgement: set falseAckKnown to false\n%s", log.String())
	}
}
