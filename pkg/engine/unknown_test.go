package engine_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// TestUnknownDomainIsCountedAndLogged: a request for a domain no policy
// defines is answered OK, counted per domain (at most MaxMetricValues
// domains, then OtherValue) and logged at debug level at most once a
// minute per domain (the others share one pace).
func TestUnknownDomainIsCountedAndLogged(t *testing.T) {
	var logs bytes.Buffer
	e, err := engine.New(engine.Options{Store: memstore.New(), Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(bg, load(t, map[string]string{"edge.yaml": edge})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(bg) })
	lines := func(domain string) int {
		return strings.Count(logs.String(), "domain="+domain+" ")
	}

	for i, at := range []time.Duration{0, time.Second, 59 * time.Second, time.Minute, 90 * time.Second} {
		if got := decide(t, e, req("edgee", "remote_address=1.2.3.4"), t0.Add(at)); got.Code != engine.CodeOK {
			t.Fatalf("request %d: %s", i, codes(got))
		}
	}
	decide(t, e, req("edge", "remote_address=1.2.3.4"), t0) // known: neither counted nor logged
	if got := e.UnknownDomains(); len(got) != 1 || got["edgee"] != 5 {
		t.Fatalf("counted %v, want edgee: 5", got)
	}
	if n := lines("edgee"); n != 2 {
		t.Fatalf("logged edgee %d times over 90 s, want 2 (at 0 and at 60 s):\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "level=DEBUG") || lines("edge") != 0 {
		t.Fatalf("want debug lines about edgee only:\n%s", logs.String())
	}

	logs.Reset()
	for i := 0; i < 2*engine.MaxMetricValues; i++ {
		decide(t, e, req(fmt.Sprintf("typo-%03d", i), "k=v"), t0)
	}
	got := e.UnknownDomains()
	if len(got) != engine.MaxMetricValues+1 || got["edgee"] != 5 || got["typo-000"] != 1 || got[engine.OtherValue] != engine.MaxMetricValues+1 {
		t.Fatalf("%d domains counted (edgee %d, typo-000 %d, %s %d), want %d: the first %d and %s",
			len(got), got["edgee"], got["typo-000"], engine.OtherValue, got[engine.OtherValue], engine.MaxMetricValues+1, engine.MaxMetricValues, engine.OtherValue)
	}
	if n := strings.Count(logs.String(), "\n"); n != engine.MaxMetricValues {
		t.Fatalf("%d log lines for 200 new domains at one instant, want %d (99 named, one for the rest)", n, engine.MaxMetricValues)
	}
}
