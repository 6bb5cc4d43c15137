package model

import (
	"fmt"
	"slices"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// The rate model explores leased mode under the rules without windows (GCRA
// and the token bucket), whose credits cannot die at a boundary: N nodes,
// each a real gale.Machine, leasing from one store that is the real pure
// strategy (gale.Rule.Take and Give, what the memory store runs and the
// Redis scripts mirror), at a rate of one unit per tick with a burst of
// Burst. Steps happen at whole ticks; a Tick step moves time on. Every
// admission is also fed, at its instant, to one more bucket of the same
// rule (the reference): the fleet keeps the bound — at most Burst + rate·t
// over any interval, as one bucket admits — exactly when the reference
// admits every admission. States are keyed by their instants relative to
// now, so the space is finite though time runs on without end.

// RateConfig is a rate model instance; pass it by value.
type RateConfig struct {
	// Nodes is N, 1..4; Burst the bucket's capacity, 1..6; Batch a node's
	// lease, 1..Burst.
	Nodes, Burst, Batch int
	// Algorithm is gale.GCRA or gale.TokenBucket.
	Algorithm gale.Algorithm
	// Uncoupled lets credits carry whole (LeaseConfig.Uncoupled); the
	// default decays them as the store's bucket drains.
	Uncoupled bool
	// Returns lets a node give its credits back and forget the key.
	Returns bool

	fault gale.Fault
}

// rateTick is the model's tick: the rule admits one unit per tick.
const rateTick = time.Second

func (c RateConfig) rule() gale.Rule {
	return gale.Rule{Algorithm: c.Algorithm, Limit: 1, Period: rateTick, Burst: int64(c.Burst)}
}

func (c RateConfig) machine() *gale.Machine {
	return &gale.Machine{Rule: c.rule(), Batch: int64(c.Batch), Uncoupled: c.Uncoupled, Fault: c.fault}
}

// Validate reports whether c can be explored.
func (c RateConfig) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 4 || c.Burst < 1 || c.Burst > 6 || c.Batch < 1 || c.Batch > c.Burst:
		return fmt.Errorf("%w: %d nodes, burst %d, batch %d: want 1..4, 1..6, 1..burst", ErrInvalidConfig, c.Nodes, c.Burst, c.Batch)
	case c.Algorithm != gale.GCRA && c.Algorithm != gale.TokenBucket:
		return fmt.Errorf("%w: algorithm %v: want gcra or token_bucket", ErrInvalidConfig, c.Algorithm)
	}
	return c.rule().Validate()
}

// RateState is one global state of the rate model.
type RateState struct {
	// Now is the instant of the steps until the next Tick.
	Now time.Time
	// Store is the store's state of the key; Reference the reference
	// bucket's, fed every admission.
	Store, Reference gale.State
	// Over is set once an admission the reference refuses was made: the
	// bound is broken (the state is not explored further).
	Over  bool
	Nodes []gale.KeyState
}

// RateStep is one transition.
type RateStep struct {
	Kind    string
	Node    int
	Granted int
}

func (s RateStep) String() string {
	if s.Kind == "tick" {
		return "a tick passes"
	}
	return fmt.Sprintf("node %d %s %d", s.Node, s.Kind, s.Granted)
}

// RateTransition is a step and the state it leads to.
type RateTransition struct {
	Step  RateStep
	After RateState
}

// Initial is the state before anything happens: full buckets, no credits.
func (c RateConfig) Initial() RateState {
	return RateState{Now: base, Nodes: make([]gale.KeyState, c.Nodes)}
}

func (s RateState) clone() RateState {
	s.Nodes = append([]gale.KeyState(nil), s.Nodes...)
	return s
}

// admit feeds one admission at s.Now to the reference.
func (c RateConfig) admit(s *RateState) {
	var o gale.Outcome
	s.Reference, o = c.rule().Take(s.Reference, s.Now.UnixMicro(), 1, 1)
	if o.Granted != 1 {
		s.Over = true
	}
}

// Next returns every transition enabled in s (none once s is Over).
func (c RateConfig) Next(s RateState) []RateTransition {
	if s.Over {
		return nil
	}
	var out []RateTransition
	m, r := c.machine(), c.rule()
	now := s.Now.UnixMicro()
	for i := range s.Nodes {
		// A check: served, or a lease from the store (landed at once), or
		// credits given back to ask again for the whole cost.
		t := s.clone()
		k := &t.Nodes[i]
		var d gale.Decision
		st := m.Check(k, t.Now, 1, &d)
		granted := 0
		switch st.Kind {
		case gale.MustReturn:
			t.Store, _ = r.Give(t.Store, now, st.Credits, 0)
			out = append(out, RateTransition{RateStep{"gives back to ask again", i, int(st.Credits)}, t})
			continue
		case gale.MustLease:
			var o gale.Outcome
			t.Store, o = r.Take(t.Store, now, st.Min, st.Max)
			g := gale.Grant{Granted: o.Granted, Now: t.Now, Decision: gale.Decision{Allowed: o.Granted > 0, ResetAt: time.UnixMicro(o.ResetAt), RetryAfter: time.Duration(o.RetryAfter) * time.Microsecond}}
			m.Landed(k, st.Lease, t.Now, g)
			granted = int(o.Granted)
			st = m.Check(k, t.Now, 1, &d)
		}
		if st.Kind == gale.Served {
			c.admit(&t)
			kind := "serves"
			if granted > 0 {
				kind = "leases and serves"
			}
			out = append(out, RateTransition{RateStep{kind, i, granted}, t})
		} else if granted > 0 || !c.sameNode(s.Nodes[i], t.Nodes[i], s.Now) {
			out = append(out, RateTransition{RateStep{"is denied", i, granted}, t})
		}
		// A drain: the credits that may go back do; the key is forgotten.
		if c.Returns && s.Nodes[i].Lease == 0 && !forgotten(s.Nodes[i]) {
			t := s.clone()
			ret, _ := m.Drain(&t.Nodes[i], t.Now)
			if ret.Credits > 0 {
				t.Store, _ = r.Give(t.Store, now, ret.Credits, 0)
			}
			t.Nodes[i] = gale.KeyState{}
			out = append(out, RateTransition{RateStep{"drains", i, int(ret.Credits)}, t})
		}
	}
	t := s.clone()
	t.Now = t.Now.Add(rateTick)
	return append(out, RateTransition{RateStep{Kind: "tick"}, t})
}

// sameNode reports whether two states of a node are alike to every later
// step (see key).
func (c RateConfig) sameNode(a, b gale.KeyState, now time.Time) bool {
	return string(nodeRel(nil, a, now)) == string(nodeRel(nil, b, now))
}

// rel places t relative to now in ticks: 0 for none or past, else 1 +
// whole ticks ahead, with the sub-tick part (µs) apart.
func rel(b []byte, t, now time.Time) []byte {
	if t.IsZero() || !t.After(now) {
		return append(b, 0, 0, 0, 0)
	}
	d := t.Sub(now)
	us := int32(d % rateTick / time.Microsecond)
	return append(b, byte(1+d/rateTick), byte(us), byte(us>>8), byte(us>>16))
}

// nodeRel encodes what of a node's key a later step reads: its credits,
// what of them a drain gives back (min(Credits, FromWindow): FromWindow
// itself grows without end where no window resets it), the lease in
// flight, the denial it remembers, and the instants relative to now (the
// grant's span included). Used only a give-back reads, which this model
// has not.
func nodeRel(b []byte, k gale.KeyState, now time.Time) []byte {
	lease := byte(0)
	if k.Lease != 0 {
		lease = 1 + byte(k.LeaseMin)
	}
	b = append(b, byte(k.Credits), byte(min(k.FromWindow, k.Credits)), lease, byte(k.DenyNeed))
	b = rel(b, k.Until, now)
	b = rel(b, k.Expires, now)
	if k.Span != 0 {
		b = rel(b, time.UnixMicro(k.Span), now)
	}
	return rel(b, k.DenyUntil, now)
}

// key encodes s relative to its now: the buckets as what they hold at now,
// the nodes as nodeRel, sorted (nodes are symmetric).
func (c RateConfig) key(s RateState) string {
	r, now := c.rule(), s.Now.UnixMicro()
	bucket := func(st gale.State) []byte {
		if c.Algorithm == gale.GCRA {
			return rel(nil, time.UnixMicro(st.TAT), s.Now)
		}
		_, o := r.Take(st, now, int64(c.Burst)+1, int64(c.Burst)+1) // a denial: reads the bucket, takes nothing
		return rel([]byte{byte(o.Remaining)}, time.UnixMicro(o.ResetAt), s.Now)
	}
	b := append(bucket(s.Store), bucket(s.Reference)...)
	nodes := make([]string, len(s.Nodes))
	for i, k := range s.Nodes {
		nodes[i] = string(nodeRel(nil, k, s.Now))
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		b = append(b, n...)
	}
	if s.Over {
		b = append(b, 1)
	}
	return string(b)
}

// RateSpace is the explored space of a RateConfig: states up to node
// symmetry and the passing of time.
type RateSpace struct {
	*search[RateState, RateStep]
}

// ExploreRate enumerates every state reachable from c.Initial(), breadth
// first, up to most states (ErrTooLarge past it).
func ExploreRate(c RateConfig, most int) (*RateSpace, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	sp, err := searchFrom(c.Initial(), c.key, c.visit, most, nil)
	return &RateSpace{sp}, err
}

// Over returns a shortest path to a state that broke the bound, and false
// when none did.
func (sp *RateSpace) Over() ([]RateStep, bool) {
	path, _, found := sp.first(func(s RateState) bool { return s.Over })
	return path, found
}

// visit hands each transition out of s to emit: Next as the search walks it.
func (c RateConfig) visit(s RateState, emit func(RateStep, RateState)) {
	for _, t := range c.Next(s) {
		emit(t.Step, t.After)
	}
}
