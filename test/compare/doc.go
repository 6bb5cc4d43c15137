// Package compare sets throttlekit's adaptive controllers beside the limit
// algorithms of github.com/platinummonkey/go-concurrency-limits v0.8.0 (the
// peer) on every scenario in config/scenarios, through the simulator
// (internal/sim), and reports their whole-run statistics as markdown tables
// and charts (cmd/report).
//
// It is a module of its own so that the peer library and its dependencies
// stay out of throttlekit's go.mod; its path lies under throttlekit's, which
// lets it import internal/sim. The peer algorithms run behind Peer, an
// adaptive.Controller that feeds them as the peer's own limiter does, in the
// simulator's virtual time.
//
// The comparison is the issue #15 bar: with defaults, none of our adaptive
// controllers fails more requests than the best peer controller on any
// scenario (see Failures and Comparison.Verdicts).
package compare
