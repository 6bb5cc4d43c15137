// Command report runs the peer comparison (package compare) over every
// scenario in a directory and writes, in -out, README.md (the markdown
// tables) and one chart per scenario, NAME.png:
//
//	cd test/compare && go run ./cmd/report -out ../../docs/sim
//
// It exits 1 on an error, not on a failed verdict: the report shows those.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/throttlekit/throttlekit/test/compare"
)

func main() {
	out := flag.String("out", "", "directory to write README.md and the charts in (required)")
	dir := flag.String("scenarios", filepath.Join("..", "..", "config", "scenarios"), "directory of scenario files (*.yaml)")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: report -out DIR [-scenarios DIR]")
		os.Exit(2)
	}
	if err := run(*dir, *out); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(dir, out string) error {
	scenarios, err := compare.LoadDir(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var cs []*compare.Comparison
	for _, sc := range scenarios {
		c, err := compare.Compare(sc)
		if err != nil {
			return err
		}
		cs = append(cs, c)
		var png bytes.Buffer
		if err := compare.WriteChart(&png, c); err != nil {
			return fmt.Errorf("%s: %w", sc.Name, err)
		}
		if err := os.WriteFile(filepath.Join(out, sc.Name+".png"), png.Bytes(), 0o644); err != nil {
			return err
		}
	}
	var md bytes.Buffer
	if err := compare.WriteReport(&md, cs, "make sim-report"); err != nil {
		return err
	}
	path := filepath.Join(out, "README.md")
	if err := os.WriteFile(path, md.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", path, "and", len(cs), "charts")
	return nil
}
