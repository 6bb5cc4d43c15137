package testenv

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
)

// Reshard moves the lowest n slots the primary at from serves to the primary
// at to, live, with `redis-cli --cluster reshard --cluster-from <id>
// --cluster-to <id> --cluster-slots n --cluster-yes` (which, slot by slot,
// marks it importing and migrating, MIGRATEs its keys and assigns it), and
// returns once every node agrees on the new owners. Traffic may run
// meanwhile: clients get ASK and MOVED redirections. It returns an error
// rather than failing the test, so it can run on any goroutine.
func (c *Cluster) Reshard(from, to string, n int) error {
	fromID, err := c.NodeID(from)
	if err != nil {
		return err
	}
	toID, err := c.NodeID(to)
	if err != nil {
		return err
	}
	args := []string{"--cluster", "reshard", from,
		"--cluster-from", fromID, "--cluster-to", toID,
		"--cluster-slots", strconv.Itoa(n), "--cluster-yes"}
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return c.waitAgreed()
}

// MoveSlots moves exactly the given slots to the primary at to, live, with
// the sequence redis-cli runs for each slot: CLUSTER SETSLOT IMPORTING on
// the target, MIGRATING on the source, MIGRATE of its keys 100 at a time,
// then SETSLOT NODE on the target, the source and the other primaries. It
// returns once every node agrees on the new owners (see Reshard).
func (c *Cluster) MoveSlots(slots []int, to string) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	owners, err := c.owners(ctx, c.Addrs[0])
	if err != nil {
		return err
	}
	toID, err := c.NodeID(to)
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(to)
	for _, slot := range slots {
		if slot < 0 || slot > 16383 {
			return fmt.Errorf("testenv: slot %d outside 0..16383", slot)
		}
		from := owners[slot]
		if from == to {
			continue
		}
		fromID, err := c.NodeID(from)
		if err != nil {
			return err
		}
		if err := c.do(ctx, to, "cluster", "setslot", slot, "importing", fromID); err != nil {
			return fmt.Errorf("slot %d: SETSLOT IMPORTING on %s: %w", slot, to, err)
		}
		if err := c.do(ctx, from, "cluster", "setslot", slot, "migrating", toID); err != nil {
			return fmt.Errorf("slot %d: SETSLOT MIGRATING on %s: %w", slot, from, err)
		}
		for {
			keys, err := c.nodeCmd(ctx, from, "cluster", "getkeysinslot", slot, 100).StringSlice()
			if err != nil {
				return fmt.Errorf("slot %d: GETKEYSINSLOT on %s: %w", slot, from, err)
			}
			if len(keys) == 0 {
				break
			}
			args := []any{"migrate", host, port, "", 0, 5000, "keys"}
			for _, k := range keys {
				args = append(args, k)
			}
			if err := c.do(ctx, from, args...); err != nil {
				return fmt.Errorf("slot %d: MIGRATE %s → %s: %w", slot, from, to, err)
			}
		}
		order := []string{to, from}
		for _, a := range c.Addrs {
			if a != to && a != from {
				order = append(order, a)
			}
		}
		for _, a := range order {
			if err := c.do(ctx, a, "cluster", "setslot", slot, "node", toID); err != nil {
				return fmt.Errorf("slot %d: SETSLOT NODE on %s: %w", slot, a, err)
			}
		}
	}
	return c.waitAgreed()
}
