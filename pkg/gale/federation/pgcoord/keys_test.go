package pgcoord_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/pgcoord"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// randomBytes returns n bytes the index cannot compress, after prefix.
func randomBytes(rng *rand.Rand, prefix string, n int) string {
	b := []byte(prefix)
	for len(b) < n {
		b = append(b, byte(rng.Uint32()))
	}
	return string(b)
}

// testStoredKeys: keys of every length lease and reconcile, each with its
// own budget and markers, the longest token beside them: up to
// MaxStoredKey bytes a key is stored as it is (the form earlier versions
// stored, so an upgrade resets no counter), beyond it as 0xFF and its
// SHA-256, which no key kept whole can equal; a key spelling another's
// hashed form has a budget of its own.
func testStoredKeys(t *testing.T, c *pgcoord.Coordinator, pool *pgxpool.Pool, table string) {
	ctx, t0 := context.Background(), storetest.Timeline()
	rng := rand.New(rand.NewPCG(3, 4))
	prefix := fmt.Sprintf("%s/%d/", t.Name(), time.Now().UnixNano())
	token := randomBytes(rng, "", federation.MaxToken) // the longest, incompressible
	long := randomBytes(rng, prefix, 8<<10)            // a descriptor value's bound
	sum := sha256.Sum256([]byte(long))
	keys := []struct {
		name, key string
		hashed    bool
	}{
		{"MaxStoredKey", randomBytes(rng, prefix, pgcoord.MaxStoredKey), false},
		{"MaxStoredKey+1", randomBytes(rng, prefix, pgcoord.MaxStoredKey+1), true},
		{"8KiB", long, true},
		{"8KiBButItsLastByte", long[:len(long)-1] + string([]byte{long[len(long)-1] ^ 1}), true},
		{"AnotherKeysHashedForm", "\xff" + string(sum[:]), true},
		{"StartsWith0xFF", "\xff" + prefix, true},
	}
	for i, k := range keys {
		if g, err := c.Lease(ctx, k.key, perMinute, 10, 10, t0); err != nil || g.Granted != 10 {
			t.Fatalf("%s (%d bytes): lease %+v, %v; want the whole limit, 10 (its own budget)", k.name, len(k.key), g, err)
		}
		rec := federation.Reconcile{Leftover: int64(i + 1), WindowEnd: t0.Add(time.Minute), Token: token, Now: t0}
		if got, err := c.Reconcile(ctx, k.key, perMinute, rec); err != nil || got != federation.Applied {
			t.Fatalf("%s: reconcile with a %d-byte token: %v, %v; want applied (its own marker)", k.name, len(token), got, err)
		}
	}
	for i, k := range keys {
		if g, err := c.Lease(ctx, k.key, perMinute, 1, 10, t0); err != nil || g.Granted != int64(i+1) {
			t.Fatalf("%s: lease %+v, %v; want what its reconcile gave back, %d", k.name, g, err, i+1)
		}
		want := []byte(k.key)
		if k.hashed {
			h := sha256.Sum256([]byte(k.key))
			want = append([]byte{0xff}, h[:]...)
		}
		var rows int
		q := fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s_budget WHERE key = $1) + (SELECT count(*) FROM %[1]s_reconcile WHERE key = $1)`, table)
		if err := pool.QueryRow(ctx, q, want).Scan(&rows); err != nil || rows != 2 {
			t.Fatalf("%s: %d rows stored under the form %s, %v; want its budget and its marker", k.name, rows, map[bool]string{false: "as it is", true: "0xFF and its SHA-256"}[k.hashed], err)
		}
	}
}
