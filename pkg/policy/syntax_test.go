package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// caret reads an error's source snippet: the quoted line and the column
// (1-based, in bytes of that line) its caret points at.
func caret(t *testing.T, text string) (line string, col int) {
	t.Helper()
	rows := strings.Split(text, "\n")
	for i := 1; i+1 < len(rows); i++ {
		src, mark := rows[i], rows[i+1]
		bar := strings.Index(src, " | ")
		if bar < 0 || len(mark) <= bar+3 || mark[bar:bar+3] != " | " {
			continue
		}
		at := strings.Index(mark[bar+3:], "^")
		if at < 0 {
			continue
		}
		return src[bar+3:], at + 1
	}
	t.Fatalf("no source line with a caret in:\n%s", text)
	return "", 0
}

// TestSyntaxErrorsPointAtTheProblem: a YAML syntax error is reported at the
// line that holds the problem (not at the start of the block around it),
// with that line quoted and a caret under the problem.
func TestSyntaxErrorsPointAtTheProblem(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line, col int
		msg       string
	}{
		{
			name: "bad indent on line 6",
			src:  "domain: edge\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n     requests_per_unit: 5\n",
			line: 6, col: 6, msg: "did not find expected key",
		},
		{
			name: "unclosed quote on line 1",
			src:  "domain: \"edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
			line: 1, col: 9, msg: "found unexpected end of stream",
		},
		{
			name: "tab on line 4",
			src:  "domain: edge\ndescriptors:\n  - key: a\n\trate_limit: {unit: second}\n",
			line: 4, col: 1, msg: "tab",
		},
		{
			name: "unclosed flow mapping on line 4",
			src:  "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5\n  - key: b\n",
			line: 4, msg: "did not find expected ',' or '}'",
		},
		{
			name: "second colon on line 3",
			src:  "domain: edge\ndescriptors:\n  - key: a: b\n",
			line: 3, col: 11, msg: "mapping values are not allowed",
		},
		{
			name: "list item out of line on line 5",
			src:  "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n   - key: b\n",
			line: 5, msg: "did not find expected '-' indicator",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Parse("f.yaml", []byte(tc.src))
			var errs policy.Errors
			if !errors.As(err, &errs) || len(errs) != 1 {
				t.Fatalf("err = %v, want one policy error", err)
			}
			e := errs[0]
			if e.Pos.Line != tc.line || !strings.Contains(e.Msg, tc.msg) {
				t.Fatalf("error at line %d: %v\nwant line %d and %q", e.Pos.Line, e, tc.line, tc.msg)
			}
			src, col := caret(t, e.Error())
			if want := strings.Split(tc.src, "\n")[tc.line-1]; src != want {
				t.Errorf("quoted line %q, want line %d: %q", src, tc.line, want)
			}
			if tc.col != 0 && (col != tc.col || e.Pos.Column != tc.col) {
				t.Errorf("caret at column %d, Pos.Column %d; want %d:\n%v", col, e.Pos.Column, tc.col, e)
			}
		})
	}
}

// TestListErrorsNameTheIndex: an error inside a list item names the item's
// index in its field, and a bad queue timeout is one error, not two.
func TestListErrorsNameTheIndex(t *testing.T) {
	_, err := policy.Parse("g.yaml", []byte("concurrency:\n  - name: a\n    match: {path_prefix: /a}\n  - name: c\n    match: {path_prefix: /c}\n    queue: {max: 3, timeout: 5}\n"))
	var errs policy.Errors
	if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Field != "concurrency[1].queue.timeout" || !strings.Contains(errs[0].Msg, "timeout 5 has no unit: write a duration such as 5ms or 5s") {
		t.Errorf("a timeout without a unit: err =\n%v\nwant one error at concurrency[1].queue.timeout asking for a duration", err)
	}

	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"g.yaml": "concurrency:\n  - name: a\n    match: {path_prefix: /a}\n  - name: b\n    match: {path_prefix: /b}\n  - name: a\n    match: {path_prefix: /c}\n"})
	_, err = policy.Load(dir)
	if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Field != "concurrency[2].name" {
		t.Errorf("a gate name used twice: err = %v, want it at concurrency[2].name", err)
	}
}

// TestTruncatedDescriptorsLoadAsUpstreamReadsThem: a file cut short inside
// a descriptor is often still valid YAML that means something, and
// envoyproxy/ratelimit accepts each such form (its config_impl.go gives a
// descriptor without rate_limit no limit, reads a null rate_limit as none
// and a missing requests_per_unit as 0, which blocks), so they load here
// and mean the same. A cut inside a flow mapping or a quoted value is a
// syntax error at its line, and a directory left with no file is refused
// (TestLoadRefusesAnEmptySet).
func TestTruncatedDescriptorsLoadAsUpstreamReadsThem(t *testing.T) {
	const head = "domain: edge\ndescriptors:\n  - key: remote_address\n"
	for _, tc := range []struct {
		name, tail string
		limits     int    // -1: a syntax error
		rate       uint32 // the first limit's requests_per_unit
	}{
		{"cut after the key", "", 0, 0},
		{"cut after rate_limit:", "    rate_limit:\n", 0, 0},
		{"cut after the unit", "    rate_limit:\n      unit: second\n", 1, 0},
		{"cut inside a flow mapping", "    rate_limit: {unit: second, requests_per", -1, 0},
		{"cut inside a quoted value", "    value: \"10.0", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := policy.Parse("f.yaml", []byte(head+tc.tail))
			if tc.limits < 0 {
				var errs policy.Errors
				if !errors.As(err, &errs) || errs[0].Pos.Line != 4 || !strings.Contains(errs[0].Msg, "invalid YAML") {
					t.Fatalf("err = %v, want invalid YAML at line 4", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ls := d.Descriptors[0].Limits
			if len(ls) != tc.limits || (len(ls) > 0 && ls[0].RequestsPerUnit != tc.rate) {
				t.Fatalf("limits %+v, want %d with requests_per_unit %d", ls, tc.limits, tc.rate)
			}
		})
	}
}
