package memstore_test

import (
	"testing"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) gale.Store { return memstore.New() })
}

// TestDifferentialSelf runs the differential driver against two memory stores:
// it checks the driver itself (no false alarms, no panics) on every strategy.
func TestDifferentialSelf(t *testing.T) {
	storetest.Differential(t, memstore.New(), memstore.New(), 1, 20000)
}
