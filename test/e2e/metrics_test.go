package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// sample is one series of a scrape: a metric name, its labels and value.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// metricSet is one scrape of /metrics, as Prometheus's text format gives it.
type metricSet []sample

// get returns the sum of the samples of name whose labels include every
// given label (pairs: name, value, name, value...); 0 when there is none, as
// for a counter not yet created.
func (m metricSet) get(name string, labels ...string) float64 {
	var sum float64
	for _, s := range m {
		if s.name == name && s.has(labels) {
			sum += s.value
		}
	}
	return sum
}

// labelValues returns the values label takes in the samples of name.
func (m metricSet) labelValues(name, label string) []string {
	var out []string
	for _, s := range m {
		if s.name == name {
			out = append(out, s.labels[label])
		}
	}
	return out
}

func (s sample) has(labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		if s.labels[labels[i]] != labels[i+1] {
			return false
		}
	}
	return true
}

// decisions reads throttlekit_decisions_total of one rule, by code.
func (m metricSet) decisions(domain, rule string) map[string]float64 {
	out := map[string]float64{}
	for _, code := range []string{"ok", "over_limit", "near_limit", "shadow"} {
		out[code] = m.get("throttlekit_decisions_total", "domain", domain, "rule", rule, "code", code)
	}
	return out
}

// wantGrowth fails t unless each counter of after exceeds its value in
// before by exactly want's amount (a code want leaves out must not move).
func wantGrowth(t *testing.T, what string, before, after, want map[string]float64) {
	t.Helper()
	for code := range after {
		if got := after[code] - before[code]; got != want[code] {
			t.Errorf("%s: code %q grew by %v, want %v (before %v, after %v)", what, code, got, want[code], before, after)
		}
	}
}

// parseMetrics reads Prometheus's text exposition format (comments and
// blank lines skipped; an optional timestamp ignored).
func parseMetrics(text string) (metricSet, error) {
	var m metricSet
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %v", n+1, line, err)
		}
		m = append(m, s)
	}
	return m, nil
}

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, fmt.Errorf("no metric name")
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.Index(line, `="`)
			if eq <= 0 {
				return s, fmt.Errorf("malformed label")
			}
			name := line[:eq]
			value, rest, err := unquoteLabel(line[eq+2:])
			if err != nil {
				return s, err
			}
			s.labels[name] = value
			line = strings.TrimPrefix(rest, ",")
		}
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("value: %v", err)
	}
	s.value = v
	return s, nil
}

// unquoteLabel reads a label value up to its closing quote (escapes \\, \"
// and \n) and returns it with the text after the quote.
func unquoteLabel(s string) (value, rest string, err error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), s[i+1:], nil
		case '\\':
			if i+1 == len(s) {
				return "", "", fmt.Errorf("label value ends in a backslash")
			}
			i++
			if s[i] == 'n' {
				b.WriteByte('\n')
			} else {
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", fmt.Errorf("unterminated label value")
}

func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(`# HELP x_total A counter.
# TYPE x_total counter
x_total{domain="e2e",rule="a.b",code="ok"} 3
x_total{domain="e2e",rule="q\"\\,}",code="ok"} 4 1712345678000
up 1
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"x_total", []string{"rule", "a.b"}, 3},
		{"x_total", []string{"rule", `q"\,}`}, 4},
		{"x_total", []string{"code", "ok"}, 7},
		{"x_total", []string{"code", "shadow"}, 0},
		{"up", nil, 1},
	} {
		if got := m.get(c.name, c.labels...); got != c.want {
			t.Errorf("get(%s, %q) = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if _, err := parseMetrics("x{a=\"1} 2\n"); err == nil {
		t.Error("an unterminated label value parsed")
	}
}

// TestSlowStoreShare holds slowStoreShare to Prometheus's text format: of
// the 10 calls between two scrapes, 3 took over 25 ms.
func TestSlowStoreShare(t *testing.T) {
	scrape := func(fast, count int) metricSet {
		m, err := parseMetrics(fmt.Sprintf(`# TYPE throttlekit_store_call_duration_seconds histogram
throttlekit_store_call_duration_seconds_bucket{op="check",le="0.025"} %d
throttlekit_store_call_duration_seconds_bucket{op="check",le="+Inf"} %d
throttlekit_store_call_duration_seconds_count{op="check"} %d
`, fast, count, count))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if got := slowStoreShare(scrape(5, 5), scrape(12, 15), 0.025); got != 0.3 {
		t.Errorf("slowStoreShare = %v, want 0.3", got)
	}
}
