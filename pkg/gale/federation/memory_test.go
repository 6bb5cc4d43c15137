package federation_test

import (
	"testing"

	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/federationtest"
)

func TestMemoryCoordinatorConformance(t *testing.T) {
	federationtest.RunCoordinator(t, func(*testing.T) federation.Coordinator { return federation.NewMemoryCoordinator(nil) })
}

func TestMemoryEscrowConformance(t *testing.T) {
	federationtest.RunEscrow(t, func(*testing.T) federation.Escrow { return federation.NewMemoryEscrow() })
}

// The differential harness agrees with itself on two fresh coordinators:
// a check of the harness, which the Redis and Postgres coordinators' runs
// rely on.
func TestMemoryCoordinatorDifferentialHarness(t *testing.T) {
	for seed := range uint64(5) {
		federationtest.DifferentialCoordinator(t, seed, 2000, federation.NewMemoryCoordinator(nil), federation.NewMemoryCoordinator(nil))
	}
}
