package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// yaml.v3 reports a syntax error at the line where the enclosing construct
// began (its "context mark") when it has one, not where the problem is: a
// bad indent on line 6 of a block that starts on line 2 is reported at line
// 2, and an unclosed quote on line 1 at the end of the file. The problem
// mark is not exported, so syntaxError finds the place itself: the shortest
// prefix of the file that yaml.v3 rejects with the same message. The first k
// lines fail and the first k-1 do not, so the problem shows on line k; the
// same search within line k puts the caret under the byte that makes the
// prefix fail.

// maxLocate bounds the files whose syntax errors are located by prefix
// search (about 2·log2(size) parses of a prefix, well under a second at
// this size); larger files keep yaml.v3's line.
const maxLocate = 256 << 10

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError records a yaml.v3 parse error of data at the line and column
// where it shows, with that line quoted and a caret under the problem.
func (r *reader) syntaxError(data []byte, err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	p := Pos{File: r.file}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		p.Line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	snippet := ""
	if len(data) <= maxLocate {
		if line, col, ok := locate(data, msg); ok {
			p.Line, p.Column = line, col
			snippet = quoteLine(lineOf(data, line), col, line)
		}
	}
	if r.halted {
		return
	}
	r.errorAt(p, "", fmt.Sprintf("invalid YAML: %s (%s)", msg, syntaxHint(msg)))
	if snippet != "" && len(r.errs) > 0 {
		r.errs[len(r.errs)-1].Snippet = snippet
	}
}

// syntaxHint says what usually causes a yaml.v3 message.
func syntaxHint(msg string) string {
	switch {
	case strings.Contains(msg, "tab character"):
		return "YAML indents with spaces, never tabs"
	case strings.Contains(msg, "cannot start any token"):
		return "YAML indents with spaces, never tabs; quote values that start with @ or `"
	case strings.Contains(msg, "unexpected end of stream"):
		return "a quote opened here is never closed"
	case strings.Contains(msg, "expected ',' or '}'"), strings.Contains(msg, "expected ',' or ']'"):
		return "a { or [ opened here is not closed, or two items lack a comma between them"
	case strings.Contains(msg, "mapping values are not allowed"):
		return "a second \": \" on one line: quote the value if it holds one, e.g. value: \"a: b\""
	case strings.Contains(msg, "did not find expected key"), strings.Contains(msg, "expected '-' indicator"):
		return "this line's indentation does not line up with the lines above it"
	}
	return "check the indentation, the colons and the quoting here"
}

// firstError is the message (without "yaml: line N: ") of the first error
// yaml.v3 finds in data, reading every document; "" when it finds none.
func firstError(data []byte) string {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := decode(dec, &n)
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
				return m[2]
			}
			return strings.TrimPrefix(err.Error(), "yaml: ")
		}
	}
}

// locate finds the line (1-based) and column (1-based, in characters) where
// the error msg first shows in data: the shortest prefix that fails with
// msg. It reports false when data as a whole does not fail with msg.
func locate(data []byte, msg string) (line, col int, ok bool) {
	fails := func(end int) bool { return firstError(data[:end]) == msg }
	// ends[k] is the offset just past line k; ends[0] is 0.
	ends := []int{0}
	for i, b := range data {
		if b == '\n' {
			ends = append(ends, i+1)
		}
	}
	if ends[len(ends)-1] < len(data) {
		ends = append(ends, len(data))
	}
	n := len(ends) - 1
	if n == 0 || !fails(len(data)) {
		return 0, 0, false
	}
	// Invariant: the first lo lines do not fail (none at all never does);
	// the first hi lines do.
	lo, hi := 0, n
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if fails(ends[mid]) {
			hi = mid
		} else {
			lo = mid
		}
	}
	start := ends[hi-1]
	// The same search over the bytes of line hi.
	a, b := start, ends[hi]
	for b-a > 1 {
		mid := (a + b) / 2
		if fails(mid) {
			b = mid
		} else {
			a = mid
		}
	}
	text := data[start:ends[hi]]
	at := caretAt(text, b-1-start, msg)
	for at > 0 && !utf8.RuneStart(text[at]) {
		at--
	}
	return hi, utf8.RuneCount(text[:at]) + 1, true
}

// caretAt moves the caret from at, the byte of line whose arrival makes the
// prefix fail, to the cause the message names, when the line shows it: the
// tab, the start of a misindented line, the bracket left open.
func caretAt(line []byte, at int, msg string) int {
	switch {
	case strings.Contains(msg, "tab character"):
		if i := bytes.IndexByte(line, '\t'); i >= 0 {
			return i
		}
	case strings.Contains(msg, "did not find expected key"), strings.Contains(msg, "expected '-' indicator"):
		if i := bytes.IndexFunc(line, func(r rune) bool { return r != ' ' }); i >= 0 && i <= at {
			return i
		}
	case strings.Contains(msg, "expected ',' or '}'"), strings.Contains(msg, "expected ',' or ']'"):
		var open []int
		for i, c := range line[:at] {
			switch c {
			case '{', '[':
				open = append(open, i)
			case '}', ']':
				if len(open) > 0 {
					open = open[:len(open)-1]
				}
			}
		}
		if len(open) > 0 {
			return open[len(open)-1]
		}
	}
	return at
}

// lineOf returns line n (1-based) of data, without its line ending.
func lineOf(data []byte, n int) string {
	lines := strings.SplitN(string(data), "\n", n+1)
	if n > len(lines) {
		return ""
	}
	return strings.TrimRight(lines[n-1], "\r\n")
}

// quoteLine shows line number n, text, with a caret under column col:
//
//	6 |      requests_per_unit: 5
//	  |      ^
//
// A long line is cut to a window around the caret.
func quoteLine(text string, col, n int) string {
	const half = 60
	runes := []rune(text)
	at := min(max(col-1, 0), len(runes))
	lead, trail := "", ""
	if len(runes) > 2*half {
		from, to := max(at-half, 0), min(at+half, len(runes))
		if from > 0 {
			lead = "..."
		}
		if to < len(runes) {
			trail = "..."
		}
		runes, at = runes[from:to], at-from
	}
	var pad strings.Builder
	pad.WriteString(strings.Repeat(" ", len(lead)))
	for _, c := range runes[:at] {
		if c == '\t' {
			pad.WriteByte('\t') // keep the caret under the character a tab pushes right
		} else {
			pad.WriteByte(' ')
		}
	}
	num := strconv.Itoa(n)
	return fmt.Sprintf("  %s | %s%s%s\n  %s | %s^", num, lead, string(runes), trail, strings.Repeat(" ", len(num)), pad.String())
}
