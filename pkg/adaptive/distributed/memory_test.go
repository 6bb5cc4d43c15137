package distributed_test

import (
	"testing"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/distributedtest"
)

func TestMemoryConformance(t *testing.T) {
	distributedtest.RunCoordinator(t, func(*testing.T) distributed.Coordinator { return distributed.NewMemory() })
}

// TestDifferentialHarness: two memory coordinators agree on every schedule,
// so a difference the harness reports elsewhere is the backend's.
func TestDifferentialHarness(t *testing.T) {
	for seed := range uint64(20) {
		distributedtest.Differential(t, distributed.NewMemory(), distributed.NewMemory(), seed, 500)
	}
}
