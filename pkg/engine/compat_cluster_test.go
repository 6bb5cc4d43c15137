package engine_test

import (
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// compatClusterStart is compatStart moved 15330 days on: a whole number
// of every Unix-time window the samples use (day; week, 7 days; month, 30
// days; year, 365 days; 15330 = lcm(7, 30, 365)), so each window ends
// where the samples expect, and late in 2065, so that Redis, which expires
// keys by its own clock, does not drop a state the timeline still needs.
var compatClusterStart = compatStart.Add(15330 * 24 * time.Hour)

// TestCompatSamplesOnCluster replays every config/compat/accept sample as
// TestCompatSamples does, on the Redis store over a 3-primary Redis Cluster
// (each sample under its own key prefix), and checks every expected answer.
func TestCompatSamplesOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := testenv.StartCluster(t, 3)
	client := cl.Client()
	runCompatSamples(t, compatClusterStart, func(t *testing.T, sample string) engine.Options {
		s, err := redisstore.New(client, redisstore.Options{Prefix: "compat:" + sample + ":"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		// A loaded machine may take longer than the default 50ms, whose
		// fallback would answer instead of the store.
		return engine.Options{Store: s, StoreTimeout: 5 * time.Second}
	})
}
