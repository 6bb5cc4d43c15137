// Package rediscoord is a distributed.Coordinator on Redis: the nodes of a
// fleet send their heartbeats to one Redis, which runs distributed.Beat on
// the gate's records in one Lua script, atomically. The script transcribes
// Beat step for step — upsert (duplicate, stale), eviction, the min or
// lower-median aggregate, the equal or demand split, the occupancy cap with
// the handoff reserve, generations and the high-water share — and a
// differential test holds it to distributed.Memory on random schedules,
// grant for grant and record for record.
//
// # Key layout and Redis Cluster
//
// A gate's records are one hash, Prefix + "{" + escaped gate + "}"
// (tk:conc:{checkout} with the DefaultPrefix): field a nodeId, value the
// node's record. The escape writes '%', '{' and '}' as %25, %7B and %7D,
// so no two gates share a hash whatever bytes they hold, and the hash tag —
// what Redis Cluster hashes, between the first "{" and the first "}" after
// it — is the whole escaped gate: one gate is one slot (see Coordinator.Key).
// The script touches that one key, so it runs on Redis Cluster unchanged.
//
// A record's value is nine decimal integers, each followed by a space, then
// the instance's bytes to the end of the value:
//
//	seq local inflight demand appliedGen expiresAt share gen high instance
//
// with expiresAt in Unix µs on the coordinator's clock; HGETALL shows a
// gate as its operators would read it.
//
// # Expiry
//
// A heartbeat that grants deletes the records it evicts (HDEL), writes the
// reporter's (HSET) and sets the hash to expire (PEXPIRE) in twice the
// longest lease left among its records: Redis forgets an abandoned gate as
// long after its last lease ends as that lease had left. Stale, duplicate
// and refused heartbeats write nothing. The one way this differs from
// distributed.Memory, which keeps a record until a heartbeat evicts it: a
// node that beats again after the whole hash expired — every lease ended
// long before — starts afresh at generation 1, as it would had another
// node's heartbeat evicted its record.
//
// # Clocks
//
// By default the script uses the now each heartbeat passes: deterministic
// tests on a fake clock, and the differential test against
// distributed.Memory (as redisstore and redisfed). With Options.ServerTime
// it reads Redis's clock (TIME) and ignores the now passed in: the
// production setting, so every node's lease is on one clock and a node
// whose clock runs ahead cannot evict its peers' live records (which would
// free their reserves). Grant.Now is then Redis's time, and Grant.ExpiresAt
// − Grant.Now the lease left. Without ServerTime, Redis still expires the
// hash by its own clock: callers' clocks must run at the rate Redis's does.
//
// # Numbers
//
// Redis's Lua numbers are doubles, exact for integers below 2^53. The
// script computes only with such integers: a report's Local, Inflight and
// Demand are at most MaxCount (2^26 − 1; a larger one is refused as a bad
// report), so every product it forms is below 2^52 and every sum over the
// nodes below 2^53 for fewer than 2^27 nodes, and a floored quotient is
// Go's integer division. Seq, any uint64, is compared as a decimal string;
// the applied generation is at most MaxGen (2^52), and a record's
// generation, the highest echoed plus the heartbeats since, stays below
// 2^53; now and the
// lease end must lie in 1970..2255 (ErrTimeRange). NodeIds are ordered byte
// by byte, as Go orders strings, not by Lua's < (strcoll, the server's
// locale).
//
// # Retries and cost
//
// The go-redis client sends a command again after some network errors, so
// a heartbeat can run twice; the second run has the first's seq and is
// answered Stale, with the share and generation the first recorded, and
// changes nothing. A heartbeat is one round trip (EVALSHA, or EVAL after a
// NOSCRIPT) and reads the whole gate (HGETALL): Redis's work grows with the
// nodes of a gate.
//
// The script needs Redis 5 or later (effects replication, which lets a
// script write after reading TIME); it is tested on Redis 7.
package rediscoord
