package compare

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

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

// Verdict is one of our controllers against the best peer controller on a
// scenario: the one with the fewest Failures (the first listed on a tie).
type Verdict struct {
	Controller       string
	Failures         int
	BestPeer         string
	BestPeerFailures int
}

// OK reports whether the controller failed no more requests than the best
// peer controller.
func (v Verdict) OK() bool { return v.Failures <= v.BestPeerFailures }

// Verdicts returns a Verdict for each of our controllers (RoleOurs), in
// order; none if the comparison ran no peer.
func (c *Comparison) Verdicts() []Verdict {
	best := -1
	for i, e := range c.Entries {
		if e.Role == RolePeer && (best < 0 || c.failures(i) < c.failures(best)) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	var out []Verdict
	for i, e := range c.Entries {
		if e.Role != RoleOurs {
			continue
		}
		out = append(out, Verdict{
			Controller: e.Result.Controller, Failures: c.failures(i),
			BestPeer: c.Entries[best].Result.Controller, BestPeerFailures: c.failures(best),
		})
	}
	return out
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
