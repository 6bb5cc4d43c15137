package model

import (
	"slices"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// key encodes s with what cannot change the future of the caps left out, and
// each node's generations renamed by their rank, so that states with equal
// keys are bisimilar (every step of one is a step of the other, to states
// with equal keys again) and agree on Σ share and Σ in flight.
// TestAbstractionMatchesConcrete checks this against a search on the
// concrete states, to a depth bound.
//
// Dead values. A report whose seq is not above its record's will be Stale
// whenever it is processed (a record's Seq only grows), and a Stale beat
// reads only the record: such a report is encoded by its kind alone. So is a
// grant whose generation is not above the node's (a node's generation only
// grows): it will be ignored. Of the live reports only the order of their
// seqs matters (each is above the record's, and the node's next one above
// all), so seqs are ranked among the live reports. A report's applied
// generation acts as max(it, the record's AppliedGen) (Beat takes that max,
// and AppliedGen only grows), and not at all without Handoff, which is the
// only reader of AppliedGen and High (Config.readsAck); High is dead, too,
// while the record acknowledges its generation, as the next beat of the node
// overwrites it before anything reads it.
//
// Generations. They are never added, subtracted or compared across nodes:
// Beat compares and takes max and min of one node's, and issues the record's
// Gen+1, above every generation of the node in the state; a node compares a
// grant's with its own. So each node's generations are replaced by their
// ranks among its encoded ones: every comparison comes out the same in two
// states with equal keys, and Gen+1 takes the next rank in both.
//
// Constant in the model, and left out: a record's Node, Instance, Local
// (Global) and ExpiresAt (the clock stands still); its Demand equals its
// Inflight, and Split Equal does not read it.
func (c Config) key(b []byte, s State) []byte {
	for i, n := range s.Fleet() {
		rec, ok := record(s.Records, nodeNames[i])
		recSeq, recGen, recAck := uint32(rec.Seq), uint32(rec.Gen), uint32(rec.AppliedGen)
		live := func(m Msg) bool {
			if m.Grant {
				return m.Gen > n.Gen
			}
			return !ok || m.Seq > recSeq
		}
		// The generations and live report seqs to rank, with the report
		// generations as they act.
		var gens, seqs ranks
		gens.add(n.Gen)
		gens.add(recGen)
		if c.readsAck() {
			gens.add(recAck)
		}
		for _, m := range n.InFlight() {
			switch {
			case !live(m):
			case m.Grant:
				gens.add(m.Gen)
			default:
				seqs.add(m.Seq)
				if c.readsAck() {
					gens.add(max(m.Gen, recAck))
				}
			}
		}

		b = append(b, byte(n.Share), gens.of(n.Gen), byte(n.Inflight), byte(n.Sampled+1), n.Flights)
		var msgs [maxFlight][4]byte
		for k, m := range n.InFlight() {
			switch {
			case !live(m) && m.Grant:
				msgs[k] = [4]byte{3}
			case !live(m):
				msgs[k] = [4]byte{2}
			case m.Grant:
				msgs[k] = [4]byte{1, gens.of(m.Gen), byte(m.Share)}
			case c.readsAck():
				msgs[k] = [4]byte{0, seqs.of(m.Seq), byte(m.Inflight), gens.of(max(m.Gen, recAck))}
			default:
				msgs[k] = [4]byte{0, seqs.of(m.Seq), byte(m.Inflight)}
			}
		}
		mm := msgs[:n.Flights]
		slices.SortFunc(mm, func(x, y [4]byte) int {
			for j := range x {
				if x[j] != y[j] {
					return int(x[j]) - int(y[j])
				}
			}
			return 0
		})
		for _, m := range mm {
			b = append(b, m[:]...)
		}
		if !ok {
			b = append(b, 0)
			continue
		}
		b = append(b, 1, byte(rec.Inflight), byte(rec.Share), gens.of(recGen))
		if c.readsAck() {
			high := rec.High
			if recAck == recGen {
				high = 0
			}
			b = append(b, gens.of(recAck), byte(high))
		}
	}
	return b
}

// ranks is a small set of values, each known by its rank in the set.
type ranks struct {
	v [2 + 2*maxFlight]uint32
	n int
}

func (r *ranks) add(v uint32) {
	r.v[r.n] = v
	r.n++
}

// of is the number of distinct values in the set below v.
func (r *ranks) of(v uint32) byte {
	var below [len(ranks{}.v)]uint32
	k := 0
	for _, w := range r.v[:r.n] {
		if w < v && !slices.Contains(below[:k], w) {
			below[k] = w
			k++
		}
	}
	return byte(k)
}

// concreteKey encodes all of s, sequence numbers and generations as they
// are: the naive search TestAbstractionMatchesConcrete checks key against.
func (c Config) concreteKey(b []byte, s State) []byte {
	put := func(v uint32) { b = append(b, byte(v), byte(v>>8)) }
	for i, n := range s.Fleet() {
		b = append(b, byte(n.Share), byte(n.Inflight), byte(n.Sampled+1), n.Flights)
		put(n.Gen)
		put(n.Seq)
		for _, m := range n.InFlight() {
			kind := byte(0)
			if m.Grant {
				kind = 1
			}
			b = append(b, kind, byte(m.Inflight), byte(m.Share))
			put(m.Seq)
			put(m.Gen)
		}
		rec, ok := record(s.Records, nodeNames[i])
		if !ok {
			b = append(b, 0)
			continue
		}
		b = append(b, 1, byte(rec.Inflight), byte(rec.Share), byte(rec.High))
		put(uint32(rec.Seq))
		put(uint32(rec.AppliedGen))
		put(uint32(rec.Gen))
	}
	return b
}

func record(recs []distributed.Record, node string) (distributed.Record, bool) {
	for _, r := range recs {
		if r.Node == node {
			return r, true
		}
	}
	return distributed.Record{}, false
}
