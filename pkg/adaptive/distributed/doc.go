// Package distributed makes the adaptive gates of a fleet of sidecars in
// front of one backend respect one inferred ceiling for that backend, rather
// than each inferring a ceiling for the whole of it and together admitting N
// times what it can take.
//
// Each node keeps its own adaptive.Gate, whose controller infers the local
// limit L_local. Every heartbeat the node reports L_local, its requests in
// flight and the latest grant generation it applied to a coordinator, which
// folds the live nodes' local limits into a global ceiling L_global (their
// minimum or lower median, never their sum) and grants the node a share of
// it. The node admits while in flight < min(share, L_local).
//
// Beat is the heartbeat computation, one pure function that every
// coordinator runs (the in-memory and PostgreSQL ones call it; the Redis one
// is a Lua transcription held to it step for step). Its cap reserves for
// every other node the larger of its share and its reported in-flight
// requests, so Σ share ≤ L_global after every beat; with acknowledged
// handoff the reserve of a node that has not echoed its latest grant is the
// highest share issued to it since, which makes Σ in flight ≤ L_global hold
// under reporting lag and out-of-order replies as well.
package distributed
