package model

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// TestAbstractionMatchesConcrete checks the key's abstraction (key.go)
// against a naive search that keys states on every concrete value: to a
// depth bound, the states the abstract search keeps are, key for key,
// the abstractions of the concrete states reachable in as many steps. A
// key that merged states with different futures would miss some, or reach
// some at another depth.
func TestAbstractionMatchesConcrete(t *testing.T) {
	for _, tc := range []struct {
		c     Config
		depth int
	}{
		{Config{Nodes: 2, Global: 2, Flight: 2, Handoff: true}, 13},
		{Config{Nodes: 2, Global: 2, Flight: 2}, 13},
		{Config{Nodes: 2, Global: 2, Flight: 1, Handoff: true, Torn: true, Lossy: true}, 17},
		{Config{Nodes: 3, Global: 2, Flight: 1, Handoff: true}, 14},
		{Config{Nodes: 2, Global: 2, Flight: 1, Handoff: true, Mutation: ReserveIgnoresHigh}, 16},
	} {
		t.Run(fmt.Sprintf("%s/depth=%d", space{c: tc.c}.name(), tc.depth), func(t *testing.T) {
			c := tc.c
			abstract := map[string]int{}
			var buf []byte
			sp, err := Explore(c.Graph(), tc.depth, func(i int, s State) bool {
				buf = c.key(buf[:0], s)
				abstract[string(buf)] = i
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			naive := c.Graph()
			naive.Key = c.concreteKey
			concrete := map[string]bool{}
			nsp, err := Explore(naive, tc.depth, func(i int, s State) bool {
				buf = c.key(buf[:0], s)
				concrete[string(buf)] = true
				if _, ok := abstract[string(buf)]; !ok {
					t.Fatalf("a concrete state has no abstract counterpart:\n%v", s)
				}
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(concrete) != len(abstract) {
				t.Fatalf("%d abstract states, the concrete ones have %d keys", len(abstract), len(concrete))
			}
			t.Logf("%d concrete states, %d abstract", nsp.States(), sp.States())
		})
	}
}

// TestFenceAbstractionMatchesConcrete is TestAbstractionMatchesConcrete for
// the self-fencing model's key, which encodes times relative to the clocks
// and clamps what has passed: the concrete search keys on every value,
// the readings and the peer's record included.
func TestFenceAbstractionMatchesConcrete(t *testing.T) {
	for _, tc := range []struct {
		c     FenceConfig
		depth int
	}{
		{FenceConfig{TTL: 5, Drift: 1, Offset: 1, Hold: 1, Margin: 1, Beats: 2}, 11},
		{FenceConfig{TTL: 5, Drift: 2, Offset: 1, Margin: 1, Beats: 2, Absolute: true}, 11},
	} {
		t.Run(fmt.Sprintf("%s/depth=%d", fenceCase{c: tc.c}.name(), tc.depth), func(t *testing.T) {
			c := tc.c
			abstract := map[string]bool{}
			var buf []byte
			sp, err := Explore(c.Graph(), tc.depth, func(i int, s FenceState) bool {
				abstract[string(c.key(buf[:0], s))] = true
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			naive := c.Graph()
			naive.Key = concreteFenceKey
			concrete := map[string]bool{}
			nsp, err := Explore(naive, tc.depth, func(i int, s FenceState) bool {
				k := string(c.key(buf[:0], s))
				concrete[k] = true
				if !abstract[k] {
					t.Fatalf("a concrete state has no abstract counterpart: %v", s)
				}
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(concrete) != len(abstract) {
				t.Fatalf("%d abstract states, the concrete ones have %d keys", len(abstract), len(concrete))
			}
			t.Logf("%d concrete states, %d abstract", nsp.States(), sp.States())
		})
	}
}

// concreteFenceKey encodes every field of s, the records whole.
func concreteFenceKey(b []byte, s FenceState) []byte {
	v := func(xs ...int64) {
		for _, x := range xs {
			b = binary.AppendVarint(b, x)
		}
	}
	v(int64(s.C), int64(s.N), int64(s.Lo), int64(s.Hi), int64(bit(s.Started)), int64(bit(s.Reclaimed)),
		int64(s.Sent), int64(s.PeerSeq), int64(s.Gen), int64(s.LeaseEnd), int64(s.Busy), int64(len(s.Records)))
	for _, r := range s.Records {
		b = append(b, r.Node...)
		b = append(b, r.Instance...)
		v(int64(r.Seq), int64(r.Local), int64(r.Inflight), int64(r.Demand), int64(r.AppliedGen), r.ExpiresAt,
			int64(r.Share), int64(r.Gen), int64(r.High))
	}
	v(int64(len(s.Reports)))
	for _, r := range s.Reports {
		v(int64(r.Seq), int64(r.SentAt))
	}
	v(int64(len(s.Grants)))
	for _, g := range s.Grants {
		v(int64(g.Gen), int64(g.LeaseEnd))
	}
	return b
}
