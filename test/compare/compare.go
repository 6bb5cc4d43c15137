package compare

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/throttlekit/throttlekit/internal/sim"
)

// Role is what a controller is in a comparison.
type Role uint8

const (
	// RoleStatic is a scenario's static limit: the yardstick, set at the best
	// value its backend allows.
	RoleStatic Role = iota
	// RoleOurs is one of throttlekit's adaptive controllers at its defaults.
	RoleOurs
	// RoleTuned is one of a scenario's adaptive controllers with tuned
	// parameters, shown beside RoleOurs and never judged.
	RoleTuned
	// RolePeer is one of the peer's algorithms behind a Peer.
	RolePeer
)

var roleNames = [...]string{RoleStatic: "static", RoleOurs: "ours", RoleTuned: "tuned", RolePeer: "peer"}

// String returns "static", "ours", "tuned" or "peer".
func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// Entry is one controller's run through a comparison's scenario.
type Entry struct {
	Role   Role
	Result *sim.Result
}

// Comparison is every controller's run through one scenario, on the same
// inputs: the scenario's static limits, our adaptive controllers at their
// defaults, the scenario's tuned ones if it has any, and the peer's
// algorithms, windowed and then per sample, in that order.
type Comparison struct {
	Scenario *sim.Scenario
	Entries  []Entry
}

// LoadDir loads every scenario (*.yaml) in dir, in file-name order.
func LoadDir(dir string) ([]*sim.Scenario, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("compare: no scenarios (*.yaml) in %s: %w", dir, os.ErrNotExist)
	}
	out := make([]*sim.Scenario, 0, len(files))
	for _, f := range files {
		sc, err := sim.Load(f)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

// Compare runs every controller of the comparison (see Comparison) through
// sc, which must be valid.
func Compare(sc *sim.Scenario) (*Comparison, error) {
	c := &Comparison{Scenario: sc}
	ours, tuned := OursAtDefaults(sc)
	static := slices.DeleteFunc(slices.Clone(sc.Controllers), func(s sim.ControllerSpec) bool { return s.Kind != sim.KindStatic })
	groups := []struct {
		role  Role
		specs []sim.ControllerSpec
	}{{RoleStatic, static}, {RoleOurs, ours}, {RoleTuned, tuned}}
	for _, g := range groups {
		for _, spec := range g.specs {
			res, err := sim.Run(sc, spec)
			if err != nil {
				return nil, err
			}
			if g.role == RoleTuned {
				res.Controller += " (tuned)"
			}
			c.Entries = append(c.Entries, Entry{Role: g.role, Result: res})
		}
	}
	for _, f := range feedings {
		for _, a := range Algorithms() {
			res, err := RunPeer(sc, a, f)
			if err != nil {
				return nil, err
			}
			c.Entries = append(c.Entries, Entry{Role: RolePeer, Result: res})
		}
	}
	return c, nil
}

// RunPeer runs a's algorithm behind a Peer fed by f through sc. Peer runs
// take turns: each reseeds math/rand's global source with sc's seed (see
// seedPeers), so the same scenario gives the same Result.
func RunPeer(sc *sim.Scenario, a Algorithm, f Feeding) (*sim.Result, error) {
	peerMu.Lock()
	defer peerMu.Unlock()
	if err := seedPeers(sc.Seed); err != nil {
		return nil, err
	}
	p := a.newPeer(f)
	return sim.RunWith(sc, p.Name(), p)
}

// OursAtDefaults returns sc's adaptive controllers at their defaults, and
// those of them that are tuned. A spec is at its defaults if it sets no
// parameter but p95's target, which has no default (it is the user's
// latency objective); its bounds (min_limit, max_limit, initial_limit) are
// kept, as capacity-drop-defaults.yaml keeps capacity-drop.yaml's. A tuned
// spec is returned at its defaults, named by its kind, and as it is in
// tuned (Compare labels its Result "NAME (tuned)").
func OursAtDefaults(sc *sim.Scenario) (ours, tuned []sim.ControllerSpec) {
	for _, spec := range sc.Controllers {
		if spec.Kind == sim.KindStatic {
			continue
		}
		def := spec
		def.Params = nil
		if t, ok := spec.Params["target"]; ok && spec.Kind == sim.KindP95 {
			def.Params = map[string]sim.Param{"target": t}
		}
		if len(def.Params) == len(spec.Params) {
			ours = append(ours, spec)
			continue
		}
		def.Name = spec.Kind
		ours = append(ours, def)
		tuned = append(tuned, spec)
	}
	return ours, tuned
}

// Failures is the measure the comparison judges a run by: the attempts
// answered with an error (a backend cap deferred them) plus those their
// client gave up on (Errors + Timeouts). In open loop nobody times out, so
// a request fails when it gets no good answer: the arrivals less the good
// ones (answered within sim.GoodFactor × base), which counts the requests
// the gate turned away (queue full, or timed out in the queue), those still
// waiting at the end, and those answered too late to be of use. Counting
// only the turned-away would reward admitting everything into a backend
// that then answers every request slowly.
func Failures(sc *sim.Scenario, st sim.Stats) int {
	if sc.Clients == nil {
		return st.Requests - st.Good
	}
	return st.Errors + st.Timeouts
}

func (c *Comparison) failures(i int) int { return Failures(c.Scenario, c.Entries[i].Result.Stats) }

// Results returns the results of the entries whose role is in roles, in
// order.
func (c *Comparison) Results(roles ...Role) []*sim.Result {
	var out []*sim.Result
	for _, e := range c.Entries {
		if slices.Contains(roles, e.Role) {
			out = append(out, e.Result)
		}
	}
	return out
}

// ParetoVerdict is one of our controllers (RoleOurs) on a scenario against
// the peer controllers of the same name (peer-NAME, windowed and per
// sample): the peers that are better on both goodput and Failures.
type ParetoVerdict struct {
	Controller string
	Goodput    float64 // good answers a second (sim.Stats.Goodput)
	Failures   int
	// Dominated names the same-named peers with more goodput and fewer
	// failures; empty when none.
	Dominated []string
}

// OK reports whether no same-named peer is better on both.
func (v ParetoVerdict) OK() bool { return len(v.Dominated) == 0 }

// SameName returns the name of our controller a peer's result stands
// beside: peer-gradient2 and peer-gradient2/sample beside gradient2, and so
// on; "" for a name that is no peer's. peer-gradient (Netflix's first
// gradient limit) has no namesake among ours.
func SameName(peer string) string {
	name, ok := strings.CutPrefix(peer, "peer-")
	if !ok {
		return ""
	}
	name, _ = strings.CutSuffix(name, "/sample")
	return name
}

// Pareto is the bar of issue 34 on one scenario: a ParetoVerdict for each
// of our controllers, in order, and the best goodput any adaptive
// controller of the comparison reaches (ours, tuned and the peers') and
// ours' best. The bar holds when every verdict is OK and ours' best is
// within ParetoGoodput of the best. The static limit is left out: it is
// the scenario's oracle, set where the backend is best, and no controller
// that has to find that level matches it on a cap it meets at once
// (defer-cap, drop-cap: ours reach 88% and 75% of it). It is Static's.
type Pareto struct {
	Verdicts                 []ParetoVerdict
	Best, OursBest           string // the controllers with the most goodput
	BestGoodput, OursGoodput float64
	// StaticGoodput is the best static limit\'s goodput, for reference.
	StaticGoodput float64
}

// ParetoGoodput is how close our best goodput must come to the best any
// controller reaches: within 10%.
const ParetoGoodput = 0.9

// OK reports whether the bar holds.
func (p Pareto) OK() bool {
	for _, v := range p.Verdicts {
		if !v.OK() {
			return false
		}
	}
	return p.OursGoodput >= ParetoGoodput*p.BestGoodput
}

// Pareto judges the comparison by the Pareto bar (see Pareto).
func (c *Comparison) Pareto() Pareto {
	var p Pareto
	for i, e := range c.Entries {
		gp := e.Result.Stats.Goodput
		if e.Role == RoleStatic {
			p.StaticGoodput = max(p.StaticGoodput, gp)
			continue
		}
		if p.Best == "" || gp > p.BestGoodput {
			p.Best, p.BestGoodput = e.Result.Controller, gp
		}
		if e.Role != RoleOurs {
			continue
		}
		if p.OursBest == "" || gp > p.OursGoodput {
			p.OursBest, p.OursGoodput = e.Result.Controller, gp
		}
		v := ParetoVerdict{Controller: e.Result.Controller, Goodput: gp, Failures: c.failures(i)}
		for j, peer := range c.Entries {
			if peer.Role == RolePeer && SameName(peer.Result.Controller) == e.Result.Controller &&
				peer.Result.Stats.Goodput > v.Goodput && c.failures(j) < v.Failures {
				v.Dominated = append(v.Dominated, peer.Result.Controller)
			}
		}
		p.Verdicts = append(p.Verdicts, v)
	}
	return p
}
