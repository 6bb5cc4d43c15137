package engine_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

func loadDir(t *testing.T, files map[string]string) *policy.Set {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, err := policy.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestGateErrorsNameTheParameter(t *testing.T) {
	e, _ := engine.New(engine.Options{Store: memstore.New()})
	for _, tc := range []struct{ src, field, want string }{
		{"concurrency:\n  - name: g\n    match: {path_prefix: /}\n    params: {tolerance: lots}\n", "concurrency[0].params.tolerance", `must be a number, not "lots"`},
		{"concurrency:\n  - name: g\n    match: {path_prefix: /}\n    params: {speed: 3}\n", "concurrency[0].params.speed", "gradient2 has no parameter \"speed\"; its parameters are min_utilization, recalibration_interval"},
		{"concurrency:\n  - name: g\n    match: {path_prefix: /}\n    controller: p95\n", "concurrency[0]", "Target 0s: set it to the latency to hold"},
		{"concurrency:\n  - name: g\n    match: {path_prefix: /}\n    queue: {max: 10, timeout: 300ms}\n", "concurrency[0].queue.timeout", "message_timeout"},
	} {
		err := e.Check(loadDir(t, map[string]string{"g.yaml": tc.src}))
		var perrs policy.Errors
		if !errors.As(err, &perrs) || len(perrs) != 1 || perrs[0].Field != tc.field || !strings.Contains(perrs[0].Msg, tc.want) || perrs[0].Pos.Line == 0 {
			t.Errorf("%q:\n  got %v", tc.src, err)
		}
	}
}

func TestGateChoiceAndReload(t *testing.T) {
	e := newEngine(t, memstore.New(), nil)
	gates := `
concurrency:
  - name: gold
    match: {path_prefix: /shop, header: {name: x-tier, value: gold}}
  - name: shop
    match: {authority: "shop.*", path_prefix: /shop}
`
	if err := e.Load(bg, loadDir(t, map[string]string{"g.yaml": gates})); err != nil {
		t.Fatal(err)
	}
	header := func(v string) func(string) (string, bool) {
		return func(name string) (string, bool) { return v, name == "x-tier" && v != "" }
	}
	for _, tc := range []struct {
		authority, path, tier, want string
	}{
		{"shop.example", "/shop/cart", "gold", "gold"},
		{"shop.example", "/shop/cart", "", "shop"},
		{"api.example", "/shop/cart", "", ""},
		{"shop.example", "/other", "gold", ""},
	} {
		c, ok := e.ChooseGate(tc.authority, tc.path, header(tc.tier))
		if (ok && c.Name != tc.want) || (!ok && tc.want != "") {
			t.Errorf("%s %s tier=%q: chose %q (%v), want %q", tc.authority, tc.path, tc.tier, c.Name, ok, tc.want)
		}
	}
	// A reload that keeps a gate's definition keeps the gate itself.
	before, _ := e.ChooseGate("shop.x", "/shop", header(""))
	if err := e.Load(bg, loadDir(t, map[string]string{"g.yaml": gates, "other.yaml": "domain: x\ndescriptors:\n  - key: k\n"})); err != nil {
		t.Fatal(err)
	}
	after, _ := e.ChooseGate("shop.x", "/shop", header(""))
	if before.Gate != after.Gate {
		t.Fatal("an unchanged gate was rebuilt by a reload (its learned limit would be lost)")
	}
}
