// Package failover tests throttlekit's decisions across a Redis Sentinel
// failover: a real redis-server primary and replica and three
// redis-sentinels (internal/testenv), two engines (nodes) each on its own
// Sentinel-managed client configured as the sidecar configures it, one rule
// per mode under concurrent traffic, and the primary killed mid-window. It
// measures, per mode, how long answers stay store errors (on_store_error
// decides), how long they take, and how far a window's admissions exceed
// its limit because counts the old primary acknowledged never reached the
// replica — and that strict mode with redisstore's WaitReplicas loses none.
//
// Everything lives in the _test files; this file only names the package.
package failover
