package rediscoord_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/rediscoord"
)

// TestNodeOrderIgnoresTheServerLocale: Lua's < on strings is strcoll, so a
// Redis under en_US.UTF-8 sorts "a" before "A" before "B", where Go sorts
// bytes, "A" "B" "a". The script orders nodeIds byte by byte, so on such a
// server the equal split's remainder still goes to the nodes Beat gives it
// to. (Under C or C.UTF-8, strcoll is byte order and hides the difference.)
func TestNodeOrderIgnoresTheServerLocale(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a locale with localedef (seconds)")
	}
	if _, err := exec.LookPath("localedef"); err != nil {
		t.Skip("localedef is not on PATH")
	}
	dir := t.TempDir()
	out, err := exec.Command("localedef", "-i", "en_US", "-f", "UTF-8", filepath.Join(dir, "en_US.UTF-8")).CombinedOutput()
	if _, serr := os.Stat(filepath.Join(dir, "en_US.UTF-8")); serr != nil {
		t.Skipf("localedef cannot build en_US.UTF-8 (%v): %s", err, out)
	}
	t.Setenv("LOCPATH", dir) // the server inherits the test's environment
	t.Setenv("LC_ALL", "en_US.UTF-8")
	rc := testenv.StartRedis(t).Client()
	if got, err := rc.Eval(ctx, "return tostring('a' < 'B')", nil).Result(); err != nil || got != "true" {
		t.Skipf("the server does not collate under en_US.UTF-8: 'a' < 'B' is %v (%v)", got, err)
	}
	c, err := rediscoord.New(rc, rediscoord.Options{Timeout: testenv.StoreDeadline}) // judges shares, not latency
	if err != nil {
		t.Fatal(err)
	}
	// Ten slots among four nodes: the remainder's two go to the nodes from
	// the turn's, ⌊now / hour⌋ mod 4 = 2, by bytes (A B a b): a and b get 3
	// (by the locale's order, a A b B, b and B would).
	var steps []step
	for seq := range uint64(3) {
		for _, node := range []string{"b", "B", "a", "A"} {
			steps = append(steps, step{rep: distributed.Report{Node: node, Instance: "i", Seq: seq + 1, Local: 10, AppliedGen: seq}, cfg: hour})
		}
	}
	agree(t, c, "locale", steps)
	recs, err := c.Records(ctx, "locale")
	if err != nil || len(recs) != 4 || recs[0].Share != 2 || recs[1].Share != 2 || recs[2].Share != 3 || recs[3].Share != 3 {
		t.Fatalf("records %+v, %v; want A and B at 2, a and b at 3", recs, err)
	}
}
