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
// time passed (issue 40). They advance a fake clock, wait on a condition
// with a deadline (testenv.EventuallyWithin, a select on
// testenv.StoreDeadline), and judge a timeout by the deadline a store call
// saw and how it ended. It reads every _test.go file under pkg/gale and
// storetest's suite, and names each line that calls what it bans.
// pkg/gale/federation is left out: its tests are reworked apart (issue 40).
func TestNoRealTimeWaits(t *testing.T) {
	// Spelt in two halves, so that this file does not name them.
	banned := []string{"time." + "Sleep(", "time." + "Until(", "time." + "Since("}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "federation" || path == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") && !(filepath.Dir(path) == "storetest" && strings.HasSuffix(path, ".go")) {
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
