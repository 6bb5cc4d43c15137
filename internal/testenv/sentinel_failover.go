package testenv

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// KillPrimary kills the primary with SIGKILL, so that it loses what it had
// not yet sent its replica, waits for it to exit, and returns its address.
func (s *Sentinel) KillPrimary() string {
	s.tb.Helper()
	s.mu.Lock()
	addr := s.primary
	p := s.servers[addr]
	s.mu.Unlock()
	if p == nil || !p.running() {
		s.tb.Fatalf("testenv: primary %s is not running", addr)
	}
	p.Kill()
	return addr
}

// WaitFailover waits, at most timeout, until every sentinel names a primary
// other than the one last agreed on and that server answers ROLE as a
// master, and returns its address. It fails the test on timeout.
func (s *Sentinel) WaitFailover(timeout time.Duration) string {
	s.tb.Helper()
	old := s.Primary()
	var next string
	err := waitUntil(timeout, func(ctx context.Context) error {
		var err error
		next, err = s.newPrimary(ctx, old)
		return err
	})
	if err != nil {
		s.tb.Fatalf("testenv: no failover from %s within %v: %v", old, timeout, err)
	}
	s.mu.Lock()
	s.primary = next
	s.mu.Unlock()
	s.healReplication()
	return next
}

// healReplication clears the masterauth CutReplication set, so that the
// replicas the sentinels point at a new primary can sync with it.
func (s *Sentinel) healReplication() {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, addr := range append(s.Replicas(), s.Primary()) {
		c := redis.NewClient(&redis.Options{Addr: addr})
		err := c.ConfigSet(ctx, "masterauth", "").Err()
		_ = c.Close()
		if err != nil {
			s.tb.Fatalf("testenv: CONFIG SET masterauth \"\" on %s: %v", addr, err)
		}
	}
}

// newPrimary returns the primary every sentinel names, when it is not old
// and answers as a master.
func (s *Sentinel) newPrimary(ctx context.Context, old string) (string, error) {
	named := ""
	for _, addr := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: addr})
		got, err := c.GetMasterAddrByName(ctx, MasterName).Result()
		_ = c.Close()
		if err != nil {
			return "", fmt.Errorf("sentinel %s: %w", addr, err)
		}
		if len(got) != 2 {
			return "", fmt.Errorf("sentinel %s names %v", addr, got)
		}
		a := net.JoinHostPort(got[0], got[1])
		if a == old || (named != "" && a != named) {
			return "", fmt.Errorf("sentinel %s names %s (old primary %s, others %q)", addr, a, old, named)
		}
		named = a
	}
	c := redis.NewClient(&redis.Options{Addr: named})
	defer c.Close()
	role, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", fmt.Errorf("ROLE of %s: %w", named, err)
	}
	if len(role) == 0 || role[0] != "master" {
		return "", fmt.Errorf("%s answers ROLE %v", named, role)
	}
	return named, nil
}

// CutReplication breaks every replica's link to the primary and keeps it
// down until a failover: each replica is given a wrong masterauth, so that
// its reconnections fail, and the primary drops their connections. The
// primary goes on acknowledging writes its replicas never get — a
// partition between them, or a replica lagging — which a failover then
// loses. WaitFailover heals the cut once a replica is promoted. It fails
// the test when a server refuses.
func (s *Sentinel) CutReplication() {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, addr := range s.Replicas() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		err := c.ConfigSet(ctx, "masterauth", "testenv-cut-replication").Err()
		_ = c.Close()
		if err != nil {
			s.tb.Fatalf("testenv: CONFIG SET masterauth on replica %s: %v", addr, err)
		}
	}
	c := redis.NewClient(&redis.Options{Addr: s.Primary()})
	defer c.Close()
	if err := c.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		s.tb.Fatalf("testenv: CLIENT KILL TYPE replica on primary %s: %v", s.Primary(), err)
	}
}

// Failovers is how many failovers the sentinels have carried out since
// StartSentinel: the highest config epoch any sentinel reports for the
// primary (each failover takes a new epoch). More than the test's own
// kills means a sentinel judged a live primary down — on a starved machine
// a primary can miss SentinelDownAfter — and promoted a replica anyway.
func (s *Sentinel) Failovers() int {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	most := 0
	for _, addr := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: addr})
		m, err := c.Master(ctx, MasterName).Result()
		_ = c.Close()
		if err != nil {
			s.tb.Fatalf("testenv: SENTINEL MASTER %s on %s: %v", MasterName, addr, err)
		}
		n, err := strconv.Atoi(m["config-epoch"])
		if err != nil {
			s.tb.Fatalf("testenv: SENTINEL MASTER %s on %s: config-epoch %q", MasterName, addr, m["config-epoch"])
		}
		most = max(most, n)
	}
	return most
}
