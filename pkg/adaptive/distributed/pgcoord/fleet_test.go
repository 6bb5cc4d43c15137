package pgcoord_test

import (
	"context"
	"testing"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/distributedtest"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/pgcoord"
)

// TestRandomFleets runs real Nodes on the PostgreSQL coordinator through
// random fleets — joins, leaves, crashes, slow and lost heartbeats, replies
// out of order — keeping distributedtest.RunFleet's invariants at every
// step, and holds every answer and the stored records to
// distributed.Memory's, step for step.
func TestRandomFleets(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	c := newCoordinator(t, newPool(t, pg, nil), pgcoord.Options{Table: "fleets"})
	distributedtest.RunFleets(t, c, 40, func(gate string) ([]distributed.Record, error) {
		return c.Records(context.Background(), gate)
	})
}
