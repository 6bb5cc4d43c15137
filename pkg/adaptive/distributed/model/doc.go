// Package model is an exhaustive, breadth-first state-space explorer for
// the distributed adaptive-concurrency protocol of pkg/adaptive/distributed
// (seed 06, "the distributed protocol"): the heartbeat protocol with its
// occupancy cap and acknowledged handoff, and a node's self-fencing.
//
// The heartbeat model (Config, Check) runs the real distributed.Beat as the
// coordinator's step: the model has no cap, reserve or generation logic of
// its own. Each node holds the share and generation it applied and its
// requests in flight; it admits while in flight < min(share, L_local) and
// releases at any time; it sends reports — an atomic snapshot of (seq,
// applied generation, in flight) taken at the send — which stay in flight
// until the coordinator processes them, in any order with every other
// step; the grants come back in flight, are delivered in any order, and are
// applied only when their generation is above the node's (node.go's rule).
// Every node has the
// same local limit, so L_global is constant. The clock stands still: no
// lease expires and no record is evicted. Check verifies Σ recorded share ≤
// L_global and Σ in flight ≤ L_global on every reachable state and measures
// the largest sums, and Mutation breaks the reserve — by rewriting the
// records handed to Beat, never Beat itself — to show each term is needed.
//
// The self-fencing model (FenceConfig, CheckFence) runs Beat for one node's
// lease and a peer whose beat evicts it once it expires on the
// coordinator's clock, with the node's clock offset and drifting within
// stated bounds, and finds the least fence margin with which the node has
// no request in flight after the reclaim.
//
// Explore, the search itself, is generic: a Graph is an initial state, a
// successor function and a key under which bisimilar states are one. The
// models' keys abstract what cannot change a future (key.go, fence.go), so
// that unbounded sequence numbers, generations and clocks still give finite
// spaces; the search keeps concrete states, so every trace is a run of the
// protocol with its real values.
//
// docs/PROOFS.md has the results and the commands that re-check them.
package model
