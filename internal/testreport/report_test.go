package testreport

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// feed hands r the JSON lines, the i-th read at t0 + at[i], and returns
// everything printed.
func feed(r *Reporter, lines []string, at []time.Duration) string {
	var out []string
	for i, l := range lines {
		out = append(out, r.Event(ParseEvent([]byte(l)), t0.Add(at[i]))...)
	}
	return strings.Join(out, "\n")
}

func TestReporterPassFailAndRecap(t *testing.T) {
	r := New("unit", t0, time.Minute)
	out := feed(r, []string{
		`{"Action":"start","Package":"m/a"}`,
		`{"Action":"run","Package":"m/a","Test":"TestOK"}`,
		`{"Action":"output","Package":"m/a","Test":"TestOK","Output":"noise of a passing test\n"}`,
		`{"Action":"pass","Package":"m/a","Test":"TestOK","Elapsed":0.1}`,
		`{"Action":"run","Package":"m/a","Test":"TestBad"}`,
		`{"Action":"output","Package":"m/a","Test":"TestBad","Output":"    bad_test.go:9: got 3, want 2\n"}`,
		`{"Action":"fail","Package":"m/a","Test":"TestBad","Elapsed":1.5}`,
		`{"Action":"run","Package":"m/a","Test":"TestSkip"}`,
		`{"Action":"skip","Package":"m/a","Test":"TestSkip"}`,
		`{"Action":"fail","Package":"m/a","Elapsed":2}`,
		`{"Action":"start","Package":"m/b"}`,
		`{"Action":"pass","Package":"m/b","Elapsed":3.25}`,
	}, []time.Duration{0, 0, 0, time.Second, time.Second, 2 * time.Second, 65 * time.Second, 66 * time.Second, 66 * time.Second, 67 * time.Second, 67 * time.Second, 70 * time.Second})
	for _, want := range []string{
		"[unit 01:05] --- FAIL: TestBad (1.50s) in m/a",
		"        bad_test.go:9: got 3, want 2",
		"[unit 01:07] FAIL m/a 2.0s",
		"[unit 01:10] ok   m/b 3.2s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "noise of a passing test") {
		t.Errorf("a passing test's output was printed:\n%s", out)
	}
	out = strings.Join(r.Finish(t0.Add(80*time.Second)), "\n")
	if !strings.Contains(out, "stage unit: 1 passed, 1 failed, 1 skipped in 1m20s") {
		t.Errorf("finish: %s", out)
	}
	var b strings.Builder
	got := Recap(&b, []Summary{{Stage: "unit", Seconds: 80, Counts: r.Counts(), Failures: r.Failures()}, {Stage: "e2e", Seconds: 1, Counts: Counts{Passed: 4}}})
	if got != (Counts{Passed: 5, Failed: 1, Skipped: 1}) {
		t.Errorf("recap counts %+v", got)
	}
	for _, want := range []string{"--- unit: m/a TestBad", "bad_test.go:9: got 3, want 2", "stage unit        1 passed, 1 failed, 1 skipped in 1m20s", "\ntests: 5 passed, 1 failed, 1 skipped\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("recap lacks %q:\n%s", want, b.String())
		}
	}
}

// A panic or a timeout fails the package with the test still running: the
// package's failure carries that test's output, and a build failure (whose
// lines come with no package) carries the build's complaint.
func TestReporterPackageFailures(t *testing.T) {
	r := New("e2e", t0, time.Minute)
	out := feed(r, []string{
		`{"Action":"run","Package":"m/e2e","Test":"TestSlow"}`,
		`{"Action":"output","Package":"m/e2e","Test":"TestSlow","Output":"waiting for the fleet\n"}`,
		`{"Action":"output","Package":"m/e2e","Output":"panic: test timed out after 20m0s\n"}`,
		`{"Action":"fail","Package":"m/e2e","Elapsed":1200}`,
		`{"ImportPath":"m/broken","Action":"build-output","Output":"broken.go:3:1: syntax error\n"}`,
		`{"Action":"fail","Package":"m/broken","Elapsed":0}`,
	}, make([]time.Duration, 6))
	for _, want := range []string{"FAIL m/e2e", "panic: test timed out after 20m0s", "(TestSlow, still running:)", "waiting for the fleet", "FAIL m/broken", "broken.go:3:1: syntax error"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if c := r.Counts(); c.Failed != 2 {
		t.Errorf("failed %d, want 2 (two packages)", c.Failed)
	}
}

// Tick names what runs, and its longest test, only after a quiet minute;
// a package killed before it said it ended is a failure at Finish.
func TestReporterTickAndUnfinished(t *testing.T) {
	r := New("e2e", t0, time.Minute)
	feed(r, []string{
		`{"Action":"start","Package":"github.com/throttlekit/throttlekit/test/e2e"}`,
		`{"Action":"run","Package":"github.com/throttlekit/throttlekit/test/e2e","Test":"TestE2EFleetGate"}`,
		`{"Action":"output","Package":"github.com/throttlekit/throttlekit/test/e2e","Test":"TestE2EFleetGate","Output":"four sidecars up\n"}`,
	}, []time.Duration{0, 2 * time.Second, 3 * time.Second})
	if got := r.Tick(t0.Add(30 * time.Second)); got != nil {
		t.Errorf("tick before a quiet minute: %q", got)
	}
	got := strings.Join(r.Tick(t0.Add(90*time.Second)), "")
	if want := "[e2e 01:30] running: test/e2e (1m30s: TestE2EFleetGate 1m28s)"; got != want {
		t.Errorf("tick %q, want %q", got, want)
	}
	if got := r.Tick(t0.Add(100 * time.Second)); got != nil {
		t.Errorf("a second tick ten seconds later: %q", got)
	}
	out := strings.Join(r.Finish(t0.Add(2*time.Minute)), "\n")
	if !strings.Contains(out, "FAIL github.com/throttlekit/throttlekit/test/e2e (did not end)") || !strings.Contains(out, "four sidecars up") {
		t.Errorf("finish: %s", out)
	}
	if r.Counts().Failed != 1 {
		t.Errorf("counts %+v", r.Counts())
	}
}

// Lines that are not JSON (go vet's text) pass through as output.
func TestParseEventText(t *testing.T) {
	if e := ParseEvent([]byte("# m/x\nvet: oops")); e.Action != "output" || e.Package != "" || !strings.Contains(e.Output, "vet: oops") {
		t.Errorf("%+v", e)
	}
}

func FuzzParseEvent(f *testing.F) {
	f.Add([]byte(`{"Action":"pass","Package":"m","Test":"T","Elapsed":1}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r := New("fuzz", t0, time.Minute)
		r.Event(ParseEvent(line), t0)
		r.Tick(t0.Add(time.Hour))
		r.Finish(t0.Add(time.Hour))
	})
}

// The recap shows what a test said, not the logs it dumped after.
func TestRecapShowsWhatTheTestSaid(t *testing.T) {
	out := []string{"=== RUN   TestFleet", "    fleet_test.go:139: redis: too loaded to judge"}
	for range 60 {
		out = append(out, `        {"msg":"serving"}`)
	}
	var b strings.Builder
	Recap(&b, []Summary{{Stage: "e2e", Counts: Counts{Failed: 1}, Failures: []Failure{{Stage: "e2e", Package: "m/e2e", Test: "TestFleet", Output: out}}}})
	if !strings.Contains(b.String(), "too loaded to judge") || strings.Contains(b.String(), "serving") {
		t.Errorf("recap:\n%s", b.String())
	}
}

// A paused parallel test is not named as running; it is again once it
// continues, from then.
func TestTickSkipsPausedTests(t *testing.T) {
	r := New("e2e", t0, time.Minute)
	feed(r, []string{
		`{"Action":"run","Package":"m/e2e","Test":"TestParallel"}`,
		`{"Action":"pause","Package":"m/e2e","Test":"TestParallel"}`,
		`{"Action":"run","Package":"m/e2e","Test":"TestSerial"}`,
	}, []time.Duration{0, time.Second, 2 * time.Second})
	if got, want := strings.Join(r.Tick(t0.Add(90*time.Second)), ""), "[e2e 01:30] running: m/e2e (1m30s: TestSerial 1m28s)"; got != want {
		t.Errorf("tick %q, want %q", got, want)
	}
	feed(r, []string{
		`{"Action":"pass","Package":"m/e2e","Test":"TestSerial"}`,
		`{"Action":"cont","Package":"m/e2e","Test":"TestParallel"}`,
	}, []time.Duration{100 * time.Second, 100 * time.Second})
	if got, want := strings.Join(r.Tick(t0.Add(200*time.Second)), ""), "[e2e 03:20] running: m/e2e (3m20s: TestParallel 1m40s)"; got != want {
		t.Errorf("tick %q, want %q", got, want)
	}
}
