package model

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// The region model explores federation below the region's boundary, which
// the federated model (federated.go) abstracts as one process per region:
// K regions of P processes each, every process a real gale.Machine, every
// region's decisions the real federation.RegionMachine (the ask, a grant's
// split between the process and the escrow with the escrow's clock rule,
// the regional-budget accounting), over an abstract regional escrow (L2:
// Take, Refill, Release as the federation.Escrow contract states them), an
// abstract regional budget, and an abstract coordinator (L3: a count per
// window; reconciles applied once per token, expired once their window
// has ended).
//
// What is new is latency and outage. A lease to L3 is granted when it is
// sent, on L3's clock, and its reply lands at any later step — after one
// or more window boundaries included — where the region splits it and
// refills the escrow. The coordinator can become unreachable for a region
// and reachable again at any step; a lease sent while it is unreachable
// fails and marks the region down (federation.HealthState), after which
// leases answer by the outage mode (fail_closed, or regional_only from the
// regional budget) until a probe finds the coordinator again. Reconciles
// (drains, dead escrow balances released, surpluses the escrow would not
// take) are in flight on a network that delivers them once, twice (a lost
// answer) or never, at any later step.
//
// Time: every step of window w happens at its middle instant, as in the
// other models; grants name the window they were granted in and are
// stamped with its middle instant (L3's clock), so a grant's time to live
// is half a period, and a reply that lands a window later has outlived its
// window.

// RegionConfig is a region model instance. Validate says what is accepted;
// it is a small value: pass it by value.
type RegionConfig struct {
	// Regions is K, 1..3; Processes is P, the processes per region sharing
	// its escrow, 1..2.
	Regions, Processes int
	// Limit is L3's limit per window, 1..8; Batch the region's least ask
	// of L3 (RegionMachine.Batch), 1..Limit; ProcessBatch a process's lease
	// from its region (gale.Machine.Batch), 1..Batch.
	Limit, Batch, ProcessBatch int
	// Windows bounds the exploration, 2..3.
	Windows int
	// Outage is what a region does while it is down; RegionalLimit, with
	// RegionalOnly, its regional budget per window, 1..Limit.
	Outage        federation.Outage
	RegionalLimit int
	// Reconciles is how many reconciles a region may have in flight, 0..2.
	Reconciles int
	// Outages lets the coordinator become unreachable for a region, and
	// reachable again, at any step.
	Outages bool

	// Fault breaks every region's machine (tests only).
	Fault federation.RegionFault
}

// Validate reports whether c can be explored.
func (c RegionConfig) Validate() error {
	switch {
	case c.Regions < 1 || c.Regions > 3 || c.Processes < 1 || c.Processes > 2:
		return fmt.Errorf("%w: %d regions of %d processes: want 1..3 of 1..2", ErrInvalidConfig, c.Regions, c.Processes)
	case c.Limit < 1 || c.Limit > 8 || c.Batch < 1 || c.Batch > c.Limit || c.ProcessBatch < 1 || c.ProcessBatch > c.Batch:
		return fmt.Errorf("%w: limit %d, batch %d, process batch %d: want 1 ≤ process batch ≤ batch ≤ limit ≤ 8", ErrInvalidConfig, c.Limit, c.Batch, c.ProcessBatch)
	case c.Windows < 2 || c.Windows > 3:
		return fmt.Errorf("%w: windows %d outside 2..3", ErrInvalidConfig, c.Windows)
	case c.Outage == federation.RegionalOnly && (c.RegionalLimit < 1 || c.RegionalLimit > c.Limit):
		return fmt.Errorf("%w: regional limit %d outside 1..limit", ErrInvalidConfig, c.RegionalLimit)
	case c.Reconciles < 0 || c.Reconciles > maxReconciles:
		return fmt.Errorf("%w: reconciles %d outside 0..%d", ErrInvalidConfig, c.Reconciles, maxReconciles)
	}
	return nil
}

// RegionState is one global state of the region model.
type RegionState struct {
	// Window is the current window's index; L3 what the coordinator can
	// still grant in it; Admitted the fleet's admissions in it.
	Window, L3, Admitted int
	Regions              []RegionNode
}

// RegionNode is one region: its escrow, regional budget, health and
// processes, and its reconciles in flight.
type RegionNode struct {
	// Escrow is the region's balance: Units of the L3 window ending at
	// End, alive until Deadline (the escrow's clock: the model's one).
	Escrow struct {
		Units         int
		End, Deadline time.Time
	}
	// RegionalLeft is what the regional budget can still grant this window.
	RegionalLeft int
	// Health is what the region believes of L3 (federation.HealthState;
	// the probe's timing is left to the interleaving: a probe is a step).
	Health federation.HealthState
	// InOutage: the region was down at some point of this window.
	InOutage bool
	// Admitted is the region's admissions this window.
	Admitted   int
	Reconciles [maxReconciles]Reconcile
	Procs      []RegionProc
}

// RegionProc is one process: its machine's state for the key, its lease
// to L3 whose reply has not landed, and its regional-budget record.
type RegionProc struct {
	Key      gale.KeyState
	Reply    *LeaseReply
	Regional federation.RegionalHeld
}

// LeaseReply is a lease L3 granted whose reply has not landed.
type LeaseReply struct {
	Grant    gale.Grant
	Hi       int64
	Took     time.Time // the escrow's clock at the take before the lease
	Sent     time.Time
	Lease    uint64
	ForCheck bool // the check that sent it waits to be served from it
}

func (s RegionState) clone() RegionState {
	t := s
	t.Regions = make([]RegionNode, len(s.Regions))
	for i, r := range s.Regions {
		r.Procs = append([]RegionProc(nil), r.Procs...)
		t.Regions[i] = r
	}
	return t
}

// RegionStep is one transition of the region model.
type RegionStep struct {
	Kind         string
	Region, Proc int
	Granted      int
}

func (s RegionStep) String() string {
	if s.Kind == "roll" {
		return "the window rolls"
	}
	return fmt.Sprintf("region %d process %d: %s %d", s.Region, s.Proc, s.Kind, s.Granted)
}

// Initial is the state before anything happens.
func (c RegionConfig) Initial() RegionState {
	s := RegionState{L3: c.Limit, Regions: make([]RegionNode, c.Regions)}
	for i := range s.Regions {
		s.Regions[i].RegionalLeft = c.RegionalLimit
		s.Regions[i].Procs = make([]RegionProc, c.Processes)
	}
	return s
}

func (c RegionConfig) machine() *gale.Machine {
	return &gale.Machine{Rule: gale.Rule{Algorithm: gale.FixedWindow, Limit: int64(c.Limit), Period: period}, Batch: int64(c.ProcessBatch)}
}

func (c RegionConfig) region() *federation.RegionMachine {
	return &federation.RegionMachine{Batch: int64(c.Batch), Escrow: true, Fault: c.Fault}
}

// grant is L3's (or the regional budget's) answer to [lo, hi] in window w
// from left units: as many as remain up to hi, none below lo.
func grant(left *int, lo, hi int64, w int) gale.Grant {
	end, now := windowEnd(w), instant(w)
	if int64(*left) < lo || hi < lo {
		return gale.Grant{Now: now, Decision: gale.Decision{ResetAt: end, RetryAfter: end.Sub(now)}}
	}
	g := min(hi, int64(*left))
	*left -= int(g)
	return gale.Grant{Granted: g, WindowEnd: end, Now: now, Decision: gale.Decision{Allowed: true, ResetAt: end}}
}

// reconcile puts n units of the window ending at end in flight from
// region r; with no slot free the network has lost one (the driver drops
// its oldest): the new one is dropped, which the interleaving covers.
func (c RegionConfig) reconcile(s *RegionState, r int, n int64, end time.Time) {
	if n <= 0 || c.Reconciles == 0 {
		return
	}
	reg := &s.Regions[r]
	for j := range reg.Reconciles {
		if reg.Reconciles[j].Leftover == 0 {
			reg.Reconciles[j] = Reconcile{Leftover: int(n), Ended: !end.Equal(windowEnd(s.Window))}
			return
		}
	}
}

// serve admits one at region r, process p, when its key can serve it at
// now without leasing; it reports whether it did.
func (c RegionConfig) serve(s *RegionState, r, p int) bool {
	k := s.Regions[r].Procs[p].Key
	var d gale.Decision
	if st := c.machine().Check(&k, instant(s.Window), 1, &d); st.Kind != gale.Served {
		return false
	}
	s.Regions[r].Procs[p].Key = k
	s.Admitted++
	s.Regions[r].Admitted++
	return true
}

// giveBack is Region.Return of credits of window end from process p of
// region r: regional units lost, the rest joining the
// escrow's live balance of that window or reconciled.
func (c RegionConfig) giveBack(s *RegionState, r, p int, credits int64, end time.Time) {
	reg := &s.Regions[r]
	// Regional units are lost to the paced budget (Region.Return): never
	// given back to it, never to L3.
	_, rest := c.region().SplitReturn(&reg.Procs[p].Regional, credits, end)
	if rest <= 0 {
		return
	}
	if e := &reg.Escrow; instant(s.Window).Before(e.Deadline) && e.End.Equal(end) {
		e.Units += int(rest) // joins the live balance of its window
		return
	}
	c.reconcile(s, r, rest, end)
}

// Next returns every transition enabled in s. s is not modified.
func (c RegionConfig) Next(s RegionState) []RegionTransition {
	var out []RegionTransition
	add := func(kind string, r, p, g int, t RegionState) {
		out = append(out, RegionTransition{RegionStep{Kind: kind, Region: r, Proc: p, Granted: g}, t})
	}
	m, rm := c.machine(), c.region()
	now := instant(s.Window)
	for r := range s.Regions {
		reg := s.Regions[r]
		for p, pr := range reg.Procs {
			// A check: served from the key's credits, or a lease through
			// the region (Region.Lease).
			if pr.Reply == nil {
				t := s.clone()
				if c.serve(&t, r, p) {
					add("serves", r, p, 0, t)
				} else {
					out = append(out, c.lease(s, r, p)...)
				}
			}
			// The reply of a lease to L3 lands (Region.Lease after the
			// coordinator answered): the region splits it, refills the
			// escrow, and the process lands its part; the check that
			// waited is served from it if it can be.
			if pr.Reply != nil {
				t := s.clone()
				tp := &t.Regions[r].Procs[p]
				rep := *pr.Reply
				tp.Reply = nil
				g, surplus, w := rm.Split(rep.Grant, rep.Hi, rep.Took)
				if surplus > 0 {
					c.refill(&t, r, surplus, w, rep.Grant.WindowEnd)
				}
				m.Landed(&tp.Key, rep.Lease, rep.Sent, g)
				if rep.ForCheck {
					c.serve(&t, r, p)
				}
				add("reply lands", r, p, int(g.Granted), t)
			}
			// A drain (idle return, eviction, reload, shutdown): the
			// credits go back through the region.
			if pr.Reply == nil && pr.Key.Lease == 0 && !forgotten(pr.Key) {
				t := s.clone()
				tp := &t.Regions[r].Procs[p]
				ret, _ := m.Drain(&tp.Key, now)
				tp.Key = gale.KeyState{}
				c.giveBack(&t, r, p, ret.Credits, ret.WindowEnd)
				add("drains", r, p, int(ret.Credits), t)
			}
		}
		// A probe of a region that is down finds L3 answering (one that
		// does not answer changes nothing).
		if !reg.Health.DownUntil.IsZero() {
			t := s.clone()
			t.Regions[r].Health.Answered()
			add("probes L3, which answers", r, 0, 0, t)
		}
		out = append(out, c.network(s, r)...)
	}
	if s.Window+1 < c.Windows {
		t := s.clone()
		t.Window++
		t.L3, t.Admitted = c.Limit, 0
		next := instant(t.Window)
		for r := range t.Regions {
			reg := &t.Regions[r]
			reg.RegionalLeft, reg.Admitted = c.RegionalLimit, 0
			reg.InOutage = !reg.Health.DownUntil.IsZero()
			for j := range reg.Reconciles {
				if reg.Reconciles[j].Leftover > 0 {
					reg.Reconciles[j] = Reconcile{Leftover: reg.Reconciles[j].Leftover, Ended: true}
				}
			}
			for p := range reg.Procs {
				m.Expire(&reg.Procs[p].Key, next)
			}
		}
		add("roll", 0, 0, 0, t)
	}
	return out
}

// RegionTransition is a step and the state it leads to.
type RegionTransition struct {
	Step  RegionStep
	After RegionState
}

// lease is a check on process p of region r that must lease: from the
// escrow, from L3 (its reply in flight), or by the outage mode — also when
// the lease to L3 fails (Config.Outages: L3 unreachable), which marks the
// region down.
func (c RegionConfig) lease(s RegionState, r, p int) []RegionTransition {
	t := s.clone()
	m, rm := c.machine(), c.region()
	now := instant(t.Window)
	reg := &t.Regions[r]
	k := &reg.Procs[p].Key
	var d gale.Decision
	st := m.Check(k, now, 1, &d)
	if st.Kind == gale.MustReturn {
		c.giveBack(&t, r, p, st.Credits, k.WindowEnd)
		return []RegionTransition{{RegionStep{Kind: "returns its credits to ask again", Region: r, Proc: p, Granted: int(st.Credits)}, t}}
	}
	if st.Kind != gale.MustLease {
		return nil // denied (remembered), or waiting
	}
	// The escrow: a live balance serves; a dead one is released.
	e := &reg.Escrow
	if e.Units > 0 && !now.Before(e.Deadline) {
		c.reconcile(&t, r, int64(e.Units), e.End)
		e.Units, e.End, e.Deadline = 0, time.Time{}, time.Time{}
	}
	if e.Units >= int(st.Min) {
		g := min(int64(e.Units), st.Max)
		e.Units -= int(g)
		ttl := e.Deadline.Sub(now)
		m.Landed(k, st.Lease, now, gale.Grant{Granted: g, WindowEnd: e.End, Now: e.End.Add(-ttl), Decision: gale.Decision{Allowed: true, ResetAt: e.End}})
		c.serve(&t, r, p)
		return []RegionTransition{{RegionStep{Kind: "takes from the escrow", Region: r, Proc: p, Granted: int(g)}, t}}
	}
	var out []RegionTransition
	if reg.Health.DownUntil.IsZero() {
		u := t.clone()
		ureg := &u.Regions[r]
		g := grant(&u.L3, st.Min, rm.Ask(st.Min, st.Max), u.Window)
		ureg.Procs[p].Reply = &LeaseReply{Grant: g, Hi: st.Max, Took: now, Sent: now, Lease: st.Lease, ForCheck: true}
		out = append(out, RegionTransition{RegionStep{Kind: "leases from L3", Region: r, Proc: p, Granted: int(g.Granted)}, u})
		if !c.Outages {
			return out
		}
		// The lease fails: L3 is unreachable, the region is down from now.
		reg.Health.Failed(now, period/4)
		reg.InOutage = true
	}
	if c.Outage != federation.RegionalOnly {
		m.Failed(k, st.Lease)
		kind := "fails closed (down)"
		if len(out) > 0 {
			kind = "L3 unreachable: fails closed"
		}
		return append(out, RegionTransition{RegionStep{Kind: kind, Region: r, Proc: p}, t})
	}
	// The regional budget is paced (Region's GCRA of RegionalLimit per
	// period, burst one): one unit per lease, none to a lease asking more,
	// at most RegionalLimit in any span of a period. The model counts it
	// per coordinator window, which that span bound implies whatever the
	// region's clock reads: the window here abstracts the clocks, and the
	// pacing is what makes the abstraction sound (issue 40, item 4).
	g := grant(&reg.RegionalLeft, st.Min, min(st.Max, 1), t.Window)
	rm.TookRegional(&reg.Procs[p].Regional, g)
	m.Landed(k, st.Lease, now, g)
	c.serve(&t, r, p)
	kind := "leases from its regional budget"
	if len(out) > 0 {
		kind = "L3 unreachable: leases from its regional budget"
	}
	return append(out, RegionTransition{RegionStep{Kind: kind, Region: r, Proc: p, Granted: int(g.Granted)}, t})
}

// refill is Escrow.Refill of a grant's surplus n under window w (a zero
// w: the grant's window is over, reconcile it); what the escrow will not
// take is reconciled.
func (c RegionConfig) refill(s *RegionState, r int, n int64, w federation.Window, end time.Time) {
	now := instant(s.Window)
	e := &s.Regions[r].Escrow
	since := w.Since
	if since.IsZero() {
		since = now
	}
	deadline := since.Add(w.TTL)
	live := now.Before(e.Deadline)
	switch {
	case w.End.IsZero() || !now.Before(deadline): // over, or dead on arrival
	case live && e.End.After(w.End): // stale
	case live && e.End.Equal(w.End):
		e.Units += int(n)
		return
	default: // none, dead (its leftover lost) or older: replaced
		e.Units, e.End, e.Deadline = int(n), w.End, deadline
		return
	}
	c.reconcile(s, r, n, end)
}

// network is the network's steps on region r's reconciles: delivered
// (L3 answers: duplicate if marked, expired if its window ended, else
// applied to the window in place), delivered with the answer lost (marked,
// kept to retry), or dropped.
func (c RegionConfig) network(s RegionState, r int) []RegionTransition {
	var out []RegionTransition
	for j, rec := range s.Regions[r].Reconciles {
		if rec.Leftover == 0 {
			continue
		}
		for _, kind := range []string{"reconcile delivered", "reconcile delivered, answer lost", "reconcile lost"} {
			t := s.clone()
			back := 0
			if kind != "reconcile lost" && !rec.Applied && !rec.Ended {
				back = min(rec.Leftover, c.Limit-t.L3)
				t.L3 += back
			}
			if kind == "reconcile delivered, answer lost" {
				if rec.Applied || rec.Ended {
					continue // a self-loop
				}
				t.Regions[r].Reconciles[j].Applied = true
			} else {
				t.Regions[r].Reconciles[j] = Reconcile{}
			}
			out = append(out, RegionTransition{RegionStep{Kind: kind, Region: r, Granted: back}, t})
		}
	}
	return out
}

// key encodes s for the search: every field a later step can read, with
// times as half periods from the model's base (0 for none), each in a
// byte. Left out are what only words a decision and the driver's
// bookkeeping (lease names, LastUsed, Served, Remote, Reset, Deny), what
// nothing here reads (Used: no give-back of served units; Expires, which
// equals Until when coupled), and the reply's take (its grant's Now: a
// lease is granted when sent).
//
// Regions are symmetric, and so are a region's processes: nothing a step
// does depends on an index. So the key sorts them — each process's
// encoding within its region, each region's among the regions — and
// states alike up to renaming are one; the states themselves keep their
// order, so that a path to one is a concrete run.
func (c RegionConfig) key(s RegionState) string {
	h := func(t time.Time) byte {
		if t.IsZero() {
			return 0
		}
		return byte(1 + t.Sub(base)/(period/2))
	}
	regions := make([]string, len(s.Regions))
	for i, r := range s.Regions {
		procs := make([]string, len(r.Procs))
		for j, p := range r.Procs {
			k := p.Key
			b := []byte{byte(k.Credits), h(k.WindowEnd), byte(k.FromWindow), h(k.Until), byte(b2int(k.Lease != 0)), byte(k.LeaseMin), h(k.DenyUntil), byte(k.DenyNeed), h(p.Regional.WindowEnd), byte(p.Regional.Units)}
			if rep := p.Reply; rep != nil {
				b = append(b, 1, byte(rep.Grant.Granted), h(rep.Grant.WindowEnd), h(rep.Grant.Now), byte(rep.Hi), byte(b2int(rep.ForCheck)))
			}
			procs[j] = string(b)
		}
		slices.Sort(procs)
		b := []byte{byte(r.Escrow.Units), h(r.Escrow.End), h(r.Escrow.Deadline), byte(r.RegionalLeft), h(r.Health.DownUntil), byte(b2int(r.InOutage)), byte(r.Admitted)}
		recs := r.Reconciles
		slices.SortFunc(recs[:], func(x, y Reconcile) int {
			return cmp.Compare(x.Leftover*4+b2int(x.Ended)+2*b2int(x.Applied), y.Leftover*4+b2int(y.Ended)+2*b2int(y.Applied))
		})
		for _, rec := range recs {
			b = append(b, byte(rec.Leftover), byte(b2int(rec.Ended)|b2int(rec.Applied)<<1))
		}
		for _, p := range procs {
			b = append(b, byte(len(p)))
			b = append(b, p...)
		}
		regions[i] = string(b)
	}
	slices.Sort(regions)
	return string([]byte{byte(s.Window), byte(s.L3), byte(s.Admitted)}) + strings.Join(regions, "\x00")
}

func b2int(x bool) int {
	if x {
		return 1
	}
	return 0
}

// RegionSpace is the explored space of a RegionConfig.
type RegionSpace struct {
	*search[RegionState, RegionStep]
}

// ExploreRegions enumerates every state reachable from c.Initial(),
// breadth first, up to most states (ErrTooLarge past it), stopping at the
// first state for which stop (when not nil) is true.
func ExploreRegions(c RegionConfig, most int, stop func(RegionState) bool) (*RegionSpace, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	sp, err := searchFrom(c.Initial(), c.key, c.visit, most, stop)
	return &RegionSpace{sp}, err
}

// Find returns a shortest path to a state violating invariant, and false
// when none does.
func (sp *RegionSpace) Find(invariant func(RegionState) bool) ([]RegionStep, RegionState, bool) {
	return sp.first(func(s RegionState) bool { return !invariant(s) })
}

// Most returns the most a window admits in any state, and the most the
// regions never in outage in that window admit together.
func (sp *RegionSpace) Most() (admitted, healthy int) {
	for _, s := range sp.states {
		admitted = max(admitted, s.Admitted)
		healthy = max(healthy, s.HealthyAdmitted())
	}
	return admitted, healthy
}

// HealthyAdmitted is what the regions not in outage this window admitted.
func (s RegionState) HealthyAdmitted() int {
	n := 0
	for _, r := range s.Regions {
		if !r.InOutage {
			n += r.Admitted
		}
	}
	return n
}

// Bound is the most a window may admit in s: the limit, plus each region
// in outage this window's regional limit (RegionalOnly).
func (c RegionConfig) Bound(s RegionState) int {
	b := c.Limit
	if c.Outage == federation.RegionalOnly {
		for _, r := range s.Regions {
			if r.InOutage {
				b += c.RegionalLimit
			}
		}
	}
	return b
}

// Holds reports whether s keeps both region bounds: the window admits at
// most Bound, and the regions never in outage this window at most the
// limit (the coordinator's share is the coordinator's: no region gives it
// units it never granted).
func (c RegionConfig) Holds(s RegionState) bool {
	return s.Admitted <= c.Bound(s) && s.HealthyAdmitted() <= c.Limit && s.L3 >= 0 && s.L3 <= c.Limit
}

// visit hands each transition out of s to emit: Next as the search walks it.
func (c RegionConfig) visit(s RegionState, emit func(RegionStep, RegionState)) {
	for _, t := range c.Next(s) {
		emit(t.Step, t.After)
	}
}
