package source_test

import (
	"path/filepath"
	"testing"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// writeFile writes dir/name whole (testenv.WriteFileAtomic): a watcher
// may be reading the directory.
func writeFile(t *testing.T, dir, name, data string) {
	t.Helper()
	testenv.WriteFileAtomic(t, filepath.Join(dir, name), []byte(data))
}
