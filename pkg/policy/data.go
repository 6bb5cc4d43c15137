package policy

import (
	"fmt"
	"strings"
)

// Data is one policy file the caller already holds in memory: a pushed
// configuration, say, rather than a file on disk.
type Data struct {
	// Name names the file in errors and in Domain.File (e.g.
	// "xds:RateLimitConfig/edge"); the set is ordered by it and its Hash
	// covers it. Names are unique within one LoadData call.
	Name string
	// Bytes are the file's YAML.
	Bytes []byte
}

// LoadData is LoadFiles for files held in memory: the same parsing, the
// same cross-file checks (a domain defined twice, gate names), the same
// Errors and the same kind of Hash. The Set's Dir is empty. No file at
// all is ErrEmpty. It is safe for concurrent use.
func LoadData(files ...Data) (*Set, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no file given", ErrEmpty)
	}
	fs := make([]file, 0, len(files))
	var errs Errors
	seen := map[string]bool{}
	for _, d := range files {
		switch {
		case seen[d.Name]:
			errs = append(errs, &Error{Pos: Pos{File: d.Name}, Msg: "two files have this name; each needs its own"})
			continue
		case len(d.Bytes) > maxFileSize:
			errs = append(errs, &Error{Pos: Pos{File: d.Name}, Msg: fmt.Sprintf("larger than %d MiB; split the policy into one file per domain", maxFileSize>>20)})
			continue
		}
		seen[d.Name] = true
		base := d.Name
		if i := strings.LastIndexByte(base, '/'); i >= 0 {
			base = base[i+1:]
		}
		fs = append(fs, file{path: d.Name, base: base, data: d.Bytes})
	}
	return assemble(fs, errs)
}
