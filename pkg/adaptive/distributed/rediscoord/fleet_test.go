package rediscoord_test

import (
	"testing"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/distributedtest"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/rediscoord"
)

// TestRandomFleets runs real Nodes on the Redis coordinator through random
// fleets — joins, leaves, crashes, slow and lost heartbeats, replies out of
// order — keeping distributedtest.RunFleet's invariants at every step, and
// holds every answer and the stored records to distributed.Memory's, step
// for step.
func TestRandomFleets(t *testing.T) {
	c, _ := newCoordinator(t, rediscoord.Options{})
	distributedtest.RunFleets(t, c, 100, func(gate string) ([]distributed.Record, error) {
		return c.Records(ctx, gate)
	})
}
