// Package redisfed is package federation on Redis: Coordinator, the
// cross-region authority (L3), on one global Redis, and Escrow, a region's
// shared balance (L2), on the region's Redis. Each operation is one Lua
// script run atomically by Redis, touching the keys of one limit key only,
// so both work on Redis Cluster. They answer as federation's
// MemoryCoordinator and MemoryEscrow do, step for step (the tests hold them
// to it on random schedules).
//
// # The coordinator
//
// Coordinator is a redisstore.Store used as the federation contract says:
// its Lease is the store's lease script, unchanged, so a key's budget is the
// store's state hash Prefix{key} and the strategy arithmetic is written once.
// What makes the coordinator window-coupled is what the store already does:
// a lease that grants writes the state with PEXPIREAT at the state's
// ExpireAt, which for a fixed window or a quota is the window's end (for a
// sliding window one period later, the previous window counting into the
// next). That expiry is load-bearing. Units granted in a window are counted
// only in that window's state, and the state is forgotten when the window
// ends, so no count, and no grant or give-back, is ever carried into the
// next window; with every region's credits dying at the same boundary
// (Grant.WindowEnd − Grant.Now is how long they live), no window admits more
// than the coordinator granted in it, which is at most the limit. A late
// give-back cannot resurrect capacity either: the scripts read a state at or
// past its ExpireAt as the zero state, and give only to the window named.
//
// Reconcile is redisstore's Store.ReturnOnce: one script that checks a
// marker, reports Expired when the window has ended, and otherwise sets the
// marker — PXAT the window's end, when it lapses — and gives the leftover
// back exactly as the store's return script does (gale.Rule.Give).
//
// # Key layout and Redis Cluster
//
// With the store's Prefix (redisstore.DefaultPrefix, "tk:") the coordinator
// writes, for limit key k:
//
//	tk:{k}                            the budget: the store's state hash
//	tk:{k}:once:<µs>:<hex token>      a reconcile marker of the window
//	                                  ending at <µs> (Unix µs), lapsing then
//
// Reconcile's one script touches both, so they must share a Cluster slot:
// Redis hashes only the hash tag, the part between the first "{" and the
// first "}" after it, and both braces lie in the budget's name, which the
// marker's name starts with. (A key whose hash tag is empty — "" or one
// starting with "}" — is hashed whole; its marker then lies in another slot,
// and Cluster refuses the reconcile with CROSSSLOT: an error, which loses a
// give-back but never admits more. The engine's keys start with a digit.)
// Tokens are arbitrary bytes, so they are hex-encoded: no token can end a
// marker's name in "}" or forge another key's or token's name
// (redisstore.Store.OnceKey).
//
// An escrow balance is one hash, Prefix{k} with EscrowOptions.Prefix
// (DefaultEscrowPrefix, "tk:escrow:"), of fields we (the window's end, Unix
// µs: the window's name), dl (the deadline, Unix µs, from which on the
// balance is dead) and n (units). Each escrow script touches that one key.
// A refill that starts a balance sets PEXPIRE to its TTL plus a grace of
// max(TTL, EscrowGrace): Redis forgets a dead balance some time after it
// dies, late enough for a slow releaser to capture it, so memory follows
// the live key set.
//
// Key names hold any key, however long (Redis takes names of up to 512
// MB; the engine's reach about 132 KiB), so a long descriptor value costs
// memory, never a refusal.
//
// # Errors
//
// A reply refusing one request for its key's stored value — WRONGTYPE (the
// name holds another type), CROSSSLOT, or an error raised while running the
// script (a malformed state) — wraps federation.ErrRefused beside Redis's
// reply: Redis is reachable, and a region must not count it as an outage.
// A network error, a timeout, or a reply refusing every request (LOADING,
// READONLY, CLUSTERDOWN, MASTERDOWN, TRYAGAIN, BUSY, OOM, ...) does not.
//
// # Clocks
//
// By default both read the now each call passes: deterministic tests on a
// fake clock, and the differential tests against the memory backends. With
// ServerTime (redisstore.Options.ServerTime for the coordinator,
// EscrowOptions.ServerTime for the escrow) the scripts read Redis's clock
// (TIME) and ignore the now passed in: the production setting, so every
// region agrees on window boundaries and every process of a region on when
// a balance dies. The coordinator then reports Redis's time in Grant.Now,
// and judges a reconcile's window ended on it; the escrow sets a balance's
// deadline to TIME + TTL at the refill and judges it dead against TIME,
// reporting the TTL left on that clock. Without ServerTime, Redis still
// expires keys by its own clock: callers' clocks must not run behind
// Redis's by more than the shortest time a key lives.
//
// # Retries
//
// The go-redis client sends a command again after some network errors, and
// a retry after a lost reply runs a script twice. For every operation but
// Escrow.Refill that only loses capacity, never admits more: a lease or a
// take counted twice, a second release capturing 0, a reconcile stopped by
// its own marker. A Refill run twice adds its units twice — units the
// coordinator never granted — so give the escrow a client whose MaxRetries
// is -1.
//
// Times are Unix microseconds in the scripts: window ends and deadlines are
// compared, and TTLs reported, at microsecond resolution. The escrow rounds
// now and a TTL down, so a balance never lives longer than its TTL.
package redisfed
