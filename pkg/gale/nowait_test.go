package gale_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoRealTimeWaits: the tests of pkg/gale and of its packages neither
// sleep, nor wait for a moment of the wall clock, nor judge how much wall
// time passed (issue 40). They advance a fake clock (a server's clock too:
// a wrapper that reads it at every call, as ServerTime reads the server's),
// hold a reply until the test has moved the clock, wait on a condition with
// a deadline (testenv.EventuallyWithin, a select on testenv.StoreDeadline),
// and judge a timeout by the deadline a store call saw and how it ended. It
// reads every _test.go file under pkg/gale, pkg/gale/federation's included,
// and the suites of storetest and federationtest, and names each line that
// calls what it bans.
func TestNoRealTimeWaits(t *testing.T) {
	// Spelt in two halves, so that this file does not name them.
	banned := []string{"time." + "Sleep(", "time." + "Until(", "time." + "Since("}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		suite := filepath.Dir(path) == "storetest" || filepath.Dir(path) == filepath.Join("federation", "federationtest")
		if !strings.HasSuffix(path, "_test.go") && !(suite && strings.HasSuffix(path, ".go")) {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for line := 1; sc.Scan(); line++ {
			for _, b := range banned {
				if strings.Contains(sc.Text(), b) {
					t.Errorf("%s:%d calls %s): a test waits for, or judges, wall time", filepath.Join("pkg/gale", path), line, b)
				}
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}
