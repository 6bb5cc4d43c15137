package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A 3-primary cluster: created by redis-cli, a ClusterClient reaches every
// slot, and both ways of moving slots move them with their keys.
func TestStartClusterAndMoveSlots(t *testing.T) {
	c := StartCluster(t, 3)
	if len(c.Addrs) != 3 {
		t.Fatalf("Addrs = %v, want 3", c.Addrs)
	}
	want := "redis+cluster://" + c.Addrs[0] + "/?addr=" + c.Addrs[1] + "&addr=" + c.Addrs[2]
	if got := c.URL(); got != want {
		t.Fatalf("URL() = %q, want %q", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.Client()
	owners := map[string]int{}
	for i := 0; i < 300; i++ {
		k := fmt.Sprintf("k%d", i)
		if err := cl.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		slot, err := c.KeySlot(k)
		if err != nil {
			t.Fatal(err)
		}
		o, err := c.SlotOwner(slot)
		if err != nil {
			t.Fatal(err)
		}
		owners[o]++
	}
	if len(owners) != 3 {
		t.Fatalf("300 keys landed on %d primaries (%v), want all 3", len(owners), owners)
	}

	// MoveSlots: exactly k0's slot moves, with k0.
	slot, _ := c.KeySlot("k0")
	from, _ := c.SlotOwner(slot)
	to := c.Addrs[0]
	if from == to {
		to = c.Addrs[1]
	}
	if err := c.MoveSlots([]int{slot}, to); err != nil {
		t.Fatal(err)
	}
	if o, _ := c.SlotOwner(slot); o != to {
		t.Fatalf("after MoveSlots slot %d is on %s, want %s", slot, o, to)
	}
	if n, err := c.NodeClient(to).Exists(ctx, "k0").Result(); err != nil || n != 1 {
		t.Fatalf("k0 on the new owner %s: exists %d, %v", to, n, err)
	}
	if err := c.NodeClient(from).Get(ctx, "k0").Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
		t.Fatalf("GET k0 on the old owner: %v, want MOVED", err)
	}
	if v, err := cl.Get(ctx, "k0").Int(); err != nil || v != 0 {
		t.Fatalf("GET k0 through the cluster client: %d, %v", v, err)
	}

	// Reshard: redis-cli moves the lowest 10 slots of the first primary.
	src, dst := c.Addrs[0], c.Addrs[2]
	if err := c.Reshard(src, dst, 10); err != nil {
		t.Fatal(err)
	}
	o, _ := c.SlotOwner(0)
	if o != dst {
		t.Fatalf("after Reshard slot 0 is on %s, want %s", o, dst)
	}
	for i := 0; i < 300; i++ {
		if v, err := cl.Get(ctx, fmt.Sprintf("k%d", i)).Int(); err != nil || v != i {
			t.Fatalf("GET k%d after the moves: %d, %v", i, v, err)
		}
	}
	cpu, err := c.CPU(ctx)
	if err != nil || cpu <= 0 {
		t.Fatalf("CPU = %v, %v", cpu, err)
	}
}

// One primary: redis-cli refuses fewer than 3, so StartCluster assigns the
// slots itself.
func TestStartClusterOnePrimary(t *testing.T) {
	c := StartCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl := c.Client()
	for _, k := range []string{"a", "b", "{x}y"} {
		if err := cl.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	if o, err := c.SlotOwner(16383); err != nil || o != c.Addrs[0] {
		t.Fatalf("SlotOwner(16383) = %q, %v", o, err)
	}
	if _, err := c.SlotOwner(16384); err == nil {
		t.Fatal("SlotOwner(16384): no error")
	}
}

func TestParseCPU(t *testing.T) {
	d, err := parseCPU("# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250000\r\nused_cpu_sys_children:9\r\n")
	if err != nil || d != 1750*time.Millisecond {
		t.Fatalf("parseCPU = %v, %v", d, err)
	}
	if _, err := parseCPU("# CPU\r\n"); err == nil {
		t.Fatal("parseCPU of nothing: no error")
	}
}
