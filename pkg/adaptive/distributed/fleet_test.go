package distributed_test

import (
	"testing"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/distributedtest"
)

// TestRandomFleets runs real Nodes on the Memory coordinator through random
// fleets — joins, leaves, crashes, slow and lost heartbeats, replies out of
// order — and keeps distributedtest.RunFleet's invariants at every step.
func TestRandomFleets(t *testing.T) {
	distributedtest.RunFleets(t, distributed.NewMemory(), 200, nil)
}
