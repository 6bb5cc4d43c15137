// Package redisstore is the Redis gale.Store: the shared tier (L2) a fleet of
// sidecars asks. Each operation is one Lua script run atomically by Redis;
// the scripts perform the arithmetic of gale.Rule.Take and gale.Rule.Give
// operation for operation, so the Redis store and the memory store give the
// same decisions step for step (a differential test holds them to it).
//
// # What it stores
//
// The state of one key under one rule is one Redis hash with the fields of
// gale.State — w (Window), c (Used), p (Prev), t (TAT), r (Rate), k (Tokens),
// u (Refilled) — plus x, the ExpireAt of the last Take, from which on the
// state counts as the zero State (as the memory store forgets it). Numbers are
// written with %.17g, so floats round-trip exactly; a missing field is 0. A
// denial writes nothing, nor does a Return that changes nothing. After a Take
// writes, the key expires (PEXPIREAT) at ExpireAt rounded up to the
// millisecond, so memory follows the live key set.
//
// # Key layout and Redis Cluster
//
// The hash of key k is Prefix + "{" + k + "}". The braces are a Redis Cluster
// hash tag: every Redis key derived from one limit key hashes to one slot. A
// key may hold any bytes, braces included; then the hash tag is only a prefix
// of k, which still maps each k to one deterministic slot. Keys are not
// escaped: the caller (the engine) encodes them unambiguously.
//
// ReturnOnce (a give-back applied at most once, for federation's Reconcile)
// also writes a marker, Prefix{k}:once:<window end µs>:<hex marker>, that
// lapses at the window's end. Its name starts with the state hash's, so its
// hash tag, and its slot, are the state's (see Store.OnceKey).
//
// # Time
//
// By default the scripts use the now each call passes, so tests can drive
// the store with a fake clock and compare it with the memory store. With
// Options.ServerTime they read Redis's own clock (TIME) instead: the
// production setting, so that every node of a fleet agrees on window
// boundaries whatever its own clock says. Grant.Now then carries Redis's
// time, and Grant.WindowEnd − Grant.Now is how long leased credits live.
// Without ServerTime, Redis still expires keys by its own clock: callers'
// clocks must not run behind Redis's by more than the shortest time a key
// lives (a state expired early answers as a fresh one).
//
// # Pipelining
//
// Concurrent operations share round trips. A call queues a small request and
// waits; Options.Pipelines dispatcher goroutines each take a request, drain
// whatever else is queued (up to Options.MaxBatch) without waiting, and send
// the lot in one pipeline of EVALSHAs. Under load a round trip carries many
// operations; a lone caller pays one round trip and no batching delay. A
// NOSCRIPT reply (after SCRIPT FLUSH, a restart or a failover) is answered by
// sending the script source with EVAL, which also caches it again. Stats
// counts operations and round trips.
//
// Checks of fixed windows (envoyproxy/ratelimit's algorithm, so most
// checks) have a script of their own, check_fixed.lua, and the fixed-window
// checks of one round trip travel in one call of it: what Redis spends on a
// script call and on reading its clock (most of a check's cost) is paid once
// a batch. On one server, or the primary Sentinel names, a call carries up
// to 128 checks; on a Cluster or Ring client, whose keys live on several
// servers, one. A key in a state that script does not read (not a hash, a
// field that is not an integer) is asked again of the composed check script,
// whose error says what is wrong. Concurrent checks of one batch are
// answered in some order, as a pipeline of single checks would be.
//
// The scripts need Redis 5 or later (effects replication, which lets a script
// write after reading TIME); they are tested on Redis 7.
//
// # Restarts
//
// A server restarted without persistence forgets every count, and a window
// in place admits again what it had admitted. A Watch on the client's
// OnConnect asks each new connection's server its run_id (INFO server):
// one that changed is a new server, counted before the connection carries
// anything. A Store given the watch (Options.Watch) reports the count as
// Forgot, which makes it a gale.Forgetful store: strict limiters over it
// keep the denials they were given across the restart.
//
// No operation is sent twice: every command the store sends refuses
// go-redis's retries (a resend after a lost reply could apply it twice), on
// any client — a Cluster client would otherwise resend a node's pipeline
// after a network error up to MaxRedirects times, whatever its MaxRetries.
// MOVED and ASK redirections, which say the operation did not run, are
// followed. A lost reply is an error for the caller, never a second write.
package redisstore
