package cluster

import (
	"testing"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/distributedtest"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/rediscoord"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/federationtest"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// TestCoordinatorsOnCluster: the other Redis backends on a 3-primary
// cluster, as on one Redis — federation's coordinator (the L3) and
// regional escrow (the L2), and a distributed gate's heartbeat
// coordinator. Each passes its backend's conformance suite, and the two
// coordinators agree with the memory ones step for step on random
// schedules (whose keys and gates spread over the slots). They judge
// answers, not latency: no deadline a loaded machine can miss
// (testenv.StoreDeadline).
func TestCoordinatorsOnCluster(t *testing.T) {
	c := testenv.StartCluster(t, 3)
	client := c.PatientClient()
	t.Run("federation coordinator", func(t *testing.T) {
		coord, err := redisfed.NewCoordinator(client, redisstore.Options{Timeout: testenv.StoreDeadline})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = coord.Close() })
		federationtest.RunCoordinator(t, func(*testing.T) federation.Coordinator { return coord })
		for seed := range uint64(2) {
			federationtest.DifferentialCoordinator(t, seed, 1000, federation.NewMemoryCoordinator(nil), coord)
		}
	})
	t.Run("federation escrow", func(t *testing.T) {
		e, err := redisfed.NewEscrow(client, redisfed.EscrowOptions{Timeout: testenv.StoreDeadline})
		if err != nil {
			t.Fatal(err)
		}
		federationtest.RunEscrow(t, func(*testing.T) federation.Escrow { return e })
	})
	t.Run("distributed gate coordinator", func(t *testing.T) {
		coord, err := rediscoord.New(client, rediscoord.Options{Timeout: testenv.StoreDeadline})
		if err != nil {
			t.Fatal(err)
		}
		distributedtest.RunCoordinator(t, func(*testing.T) distributed.Coordinator { return coord })
		for seed := range uint64(3) {
			distributedtest.Differential(t, distributed.NewMemory(), coord, seed, 300)
		}
	})
}
