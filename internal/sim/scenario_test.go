package sim

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// valid is a minimal good scenario; each bad case edits one thing.
const valid = `name: t
duration: 60s
backend:
  base_latency: 50ms
  knee: 60
load:
  - {at: 0s, rate: 100}
queue: {max: 10, timeout: 50ms}
controllers:
  - kind: gradient2
`

func TestParseValid(t *testing.T) {
	sc, err := Parse("t.yaml", []byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Seed != 1 || sc.Settle != 10e9 || len(sc.Backend.Capacity) != 1 || sc.Backend.Capacity[0].Factor != 1 {
		t.Errorf("defaults not applied: %+v", sc)
	}
	if sc.Controllers[0].Name != "gradient2" {
		t.Errorf("controller name %q, want the kind", sc.Controllers[0].Name)
	}
}

// The shipped scenarios load.
func TestShippedScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(scenarioDir, "*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("scenarios: %v %v", files, err)
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// Bad scenarios give every problem as file:line: field: message, and never
// panic.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string // substrings of the error, in order
	}{
		{"not YAML", "duration: [60s\n", []string{"bad.yaml: not valid YAML"}},
		{"empty", "", []string{"bad.yaml: the file is empty"}},
		{"not a mapping", "- 1\n", []string{"bad.yaml:1: a scenario must be a mapping"}},
		{"unknown field", valid + "rate: 5\n", []string{"bad.yaml:11: rate: unknown field in a scenario; the fields are name,"}},
		{"duplicate field", valid + "duration: 30s\n", []string{"bad.yaml:11: duration: given twice"}},
		{"duration without unit", strings.Replace(valid, "60s", "60", 1), []string{"bad.yaml:2: duration: must be a duration with a unit"}},
		{"no duration", strings.Replace(valid, "duration: 60s\n", "", 1), []string{"bad.yaml: duration: must be a positive duration"}},
		{"settle too long", valid + "settle: 60s\n", []string{"bad.yaml:11: settle: must lie in [0, duration)"}},
		{"knee is text", strings.Replace(valid, "knee: 60", "knee: sixty", 1), []string{`bad.yaml:5: backend.knee: must be a number, not "sixty"`}},
		{"knee quoted", strings.Replace(valid, "knee: 60", `knee: "60"`, 1), []string{`bad.yaml:5: backend.knee: must be a number`}},
		{"no base latency", strings.Replace(valid, "  base_latency: 50ms\n", "", 1), []string{"bad.yaml:3: backend.base_latency: must be a positive duration"}},
		{"jitter too big", strings.Replace(valid, "knee: 60", "knee: 60\n  jitter: 3", 1), []string{"bad.yaml:6: backend.jitter: must lie in [0, 1]"}},
		{"capacity a mapping", strings.Replace(valid, "knee: 60", "knee: 60\n  capacity: {at: 0s}", 1), []string{"bad.yaml:6: backend.capacity: must be a list"}},
		{"capacity steps out of order", strings.Replace(valid, "knee: 60", "knee: 60\n  capacity:\n    - {at: 0s, factor: 1}\n    - {at: 30s, factor: 0.5}\n    - {at: 20s, factor: 1}", 1),
			[]string{"bad.yaml:9: backend.capacity[2].at: 20s is not after the previous step's 30s"}},
		{"capacity zero", strings.Replace(valid, "knee: 60", "knee: 60\n  capacity: [{at: 0s, factor: 0}]", 1), []string{"bad.yaml:6: backend.capacity[0].factor: must lie in (0, 100]"}},
		{"first load step late", strings.Replace(valid, "{at: 0s, rate: 100}", "{at: 5s, rate: 100}", 1), []string{"bad.yaml:7: load[0].at: the first step must be at 0s"}},
		{"negative rate", strings.Replace(valid, "rate: 100", "rate: -1", 1), []string{"bad.yaml:7: load[0].rate: must be requests per second"}},
		{"step after the end", strings.Replace(valid, "  - {at: 0s, rate: 100}", "  - {at: 0s, rate: 100}\n  - {at: 90s, rate: 5}", 1), []string{"bad.yaml:8: load[1].at: 1m30s is not before the end of the run"}},
		{"unknown load field", strings.Replace(valid, "rate: 100}", "rate: 100, burst: 3}", 1), []string{"bad.yaml:7: load[0].burst: unknown field in a load step; the fields are at, rate"}},
		{"queue without timeout", strings.Replace(valid, "queue: {max: 10, timeout: 50ms}", "queue: {max: 10}", 1), []string{"bad.yaml:8: queue.timeout: must be a positive duration when queue.max > 0"}},
		{"no controllers", strings.Replace(valid, "controllers:\n  - kind: gradient2\n", "", 1), []string{"bad.yaml: controllers: needs at least one controller"}},
		{"unknown kind", strings.Replace(valid, "kind: gradient2", "kind: gradient3", 1), []string{`bad.yaml:10: controllers[0].kind: unknown kind "gradient3"; the kinds are static, gradient2, aimd, p95, vegas`}},
		{"no kind", strings.Replace(valid, "kind: gradient2", "name: x", 1), []string{"bad.yaml:10: controllers[0].kind: missing"}},
		{"static without limit", strings.Replace(valid, "kind: gradient2", "kind: static", 1), []string{"bad.yaml:10: controllers[0].limit: a static controller needs limit ≥ 1"}},
		{"static with params", strings.Replace(valid, "kind: gradient2", "{kind: static, limit: 5, params: {tolerance: 2}}", 1), []string{"bad.yaml:10: controllers[0].limit: a static controller takes only limit"}},
		{"adaptive with limit", strings.Replace(valid, "kind: gradient2", "{kind: aimd, limit: 5}", 1), []string{"bad.yaml:10: controllers[0].limit: only a static controller takes limit"}},
		{"unknown param", strings.Replace(valid, "kind: gradient2", "kind: gradient2\n    params: {tolerence: 1.5}", 1),
			[]string{`bad.yaml:11: controllers[0].params.tolerence: gradient2 has no parameter "tolerence"; its parameters are min_utilization, recalibration_interval`}},
		{"param not a number", strings.Replace(valid, "kind: gradient2", "kind: gradient2\n    params:\n      tolerance: high", 1), []string{`bad.yaml:12: controllers[0].params.tolerance: must be a number, not "high"`}},
		{"param a list", strings.Replace(valid, "kind: gradient2", "kind: gradient2\n    params:\n      tolerance: [1]", 1), []string{`bad.yaml:12: controllers[0].params.tolerance: must be a single value, not a list`}},
		{"huge window", strings.Replace(valid, "kind: gradient2", "kind: vegas\n    params: {rtt_window: 99999999999}", 1), []string{`bad.yaml:11: controllers[0].params.rtt_window: must be a whole number no larger than 1000000`}},
		{"param out of range", strings.Replace(valid, "kind: gradient2", "kind: gradient2\n    params: {tolerance: 0.5}", 1), []string{"bad.yaml:10: controllers[0]: adaptive: gradient2: Tolerance 0.5 outside [1, 100]"}},
		{"p95 without target", strings.Replace(valid, "kind: gradient2", "kind: p95", 1), []string{"bad.yaml:10: controllers[0]: adaptive: p95: Target 0s"}},
		{"bad signal", strings.Replace(valid, "kind: gradient2", "kind: p95\n    params: {target: 80ms, signal: p99}", 1), []string{`bad.yaml:11: controllers[0].params.signal: must be p95 or ewma, not "p99"`}},
		{"min above max", strings.Replace(valid, "kind: gradient2", "{kind: aimd, min_limit: 50, max_limit: 10}", 1), []string{"bad.yaml:10: controllers[0]: adaptive: aimd: MinLimit 50 above MaxLimit 10"}},
		{"duplicate names", strings.Replace(valid, "  - kind: gradient2\n", "  - kind: gradient2\n  - kind: gradient2\n", 1),
			[]string{`bad.yaml:11: controllers[1].name: "gradient2" is already the name of controllers[0]`}},
		{"every problem at once, once each", strings.Replace(strings.Replace(strings.Replace(valid, "knee: 60", "knee: -1", 1), "rate: 100", "rate: -5", 1), "60s", "60", 1),
			[]string{"bad.yaml:2: duration: must be a duration with a unit", "\nbad.yaml:5: backend.knee:", "\nbad.yaml:7: load[0].rate:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error for:\n%s", tc.yaml)
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Errorf("error is %T, want Errors", err)
			}
			msg := err.Error()
			if n := strings.Count(msg, "duration:"); n > 1 {
				t.Errorf("duration reported %d times:\n%s", n, msg)
			}
			at := 0
			for _, w := range tc.want {
				i := strings.Index(msg[at:], w)
				if i < 0 {
					t.Fatalf("error\n%s\nlacks (in order)\n%s", msg, w)
				}
				at += i + len(w)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("Load of a missing file: %v", err)
	}
}

// Parse never panics, and what it accepts validates and runs briefly.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(scenarioDir, "*.yaml"))
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(valid))
	f.Add([]byte(shortScenario))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("Parse accepted what Validate refuses: %v", err)
		}
	})
}
