package boundcheck

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// Backend is the store a schedule's nodes share, and how it restarts.
type Backend struct {
	// New returns the store of one run: a fresh one, or one shared
	// between runs whose keys their domains name apart.
	New func() gale.Store
	// Restart empties the store as a restart without persistence does,
	// and returns the store the nodes use from then on.
	Restart func(ctx context.Context, s gale.Store) (gale.Store, error)
	// Local says the store answers from this process's memory
	// (gale.InMemory), as the memory store does.
	Local bool
}

// fleetStore is the store behind every node of a run: one that Restart
// swaps for an empty one. It counts its restarts as gale.Forgetful does, as
// the Redis store's restart watch sees a new server.
type fleetStore struct {
	mu       sync.RWMutex
	cur      gale.Store
	restarts atomic.Uint64
}

func (f *fleetStore) store() gale.Store {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.cur
}

// restart restarts the store through b.
func (f *fleetStore) restart(ctx context.Context, b Backend) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b.Restart == nil {
		return errRestart
	}
	f.restarts.Add(1) // raised before any call reaches the new store
	s, err := b.Restart(ctx, f.cur)
	if err != nil {
		return err
	}
	f.cur = s
	return nil
}

// errDead is what a killed node's store calls answer: nothing it does
// reaches the store once it is dead.
var errDead = fmt.Errorf("boundcheck: the node was killed: %w", gale.ErrStore)

// nodeStore is one node's way to the fleet's store, cut when it is killed.
type nodeStore struct {
	fleet *fleetStore
	dead  atomic.Bool
}

func (n *nodeStore) reach() (gale.Store, error) {
	if n.dead.Load() {
		return nil, errDead
	}
	return n.fleet.store(), nil
}

func (n *nodeStore) Check(ctx context.Context, key string, rule gale.Rule, cost int64, now time.Time) (gale.Decision, error) {
	s, err := n.reach()
	if err != nil {
		return gale.Decision{}, err
	}
	return s.Check(ctx, key, rule, cost, now)
}

func (n *nodeStore) Lease(ctx context.Context, key string, rule gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	s, err := n.reach()
	if err != nil {
		return gale.Grant{}, err
	}
	return s.Lease(ctx, key, rule, min, max, now)
}

func (n *nodeStore) Return(ctx context.Context, key string, rule gale.Rule, credits int64, windowEnd, now time.Time) error {
	s, err := n.reach()
	if err != nil {
		return err
	}
	return s.Return(ctx, key, rule, credits, windowEnd, now)
}

func (n *nodeStore) Charge(ctx context.Context, key string, rule gale.Rule, units int64, now time.Time) (gale.Decision, error) {
	s, err := n.reach()
	if err != nil {
		return gale.Decision{}, err
	}
	return s.Charge(ctx, key, rule, units, now)
}

// Forgot is the restarts the fleet's store went through, and those the
// store behind it saw itself.
func (n *nodeStore) Forgot() uint64 {
	k := n.fleet.restarts.Load()
	if f, ok := n.fleet.store().(gale.Forgetful); ok {
		k += f.Forgot()
	}
	return k
}

// localNodeStore is a nodeStore over the memory store: a limiter puts no
// deadline on its calls.
type localNodeStore struct{ *nodeStore }

func (localNodeStore) InMemory() {}

var (
	_ gale.Forgetful = (*nodeStore)(nil)
	_ gale.InMemory  = localNodeStore{}
)

// newNodeStore is a node's store over f.
func newNodeStore(f *fleetStore, local bool) (gale.Store, *nodeStore) {
	n := &nodeStore{fleet: f}
	if local {
		return localNodeStore{n}, n
	}
	return n, n
}

// errRestart is returned by a Backend that cannot restart.
var errRestart = errors.New("boundcheck: this backend cannot restart its store")
