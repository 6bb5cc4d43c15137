// Package cluster holds the tests that run the engine on a real Redis
// Cluster: 3 primaries created by redis-cli (internal/testenv.StartCluster),
// the Redis store over go-redis's ClusterClient configured as the sidecar
// configures it. They check that every mode answers as on one Redis, that a
// live reshard under traffic gives no wrong answer, and measure throughput
// for 1 and 3 primaries. The package holds no code of its own.
package cluster
