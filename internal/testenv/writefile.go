package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteFileAtomic writes data to path whole, as a file a watcher reads
// must be written: to a temporary name in the same directory (a dot file,
// which policy loaders skip), then renamed into place, so a reader finds
// the old content or the new and never an empty or half-written file
// (os.WriteFile truncates, then writes). The file's mode is 0644. It fails
// tb on any error.
func WriteFileAtomic(tb testing.TB, path string, data []byte) {
	tb.Helper()
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		tb.Fatal(err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		tb.Fatalf("writing %s: %v", path, err)
	}
}
