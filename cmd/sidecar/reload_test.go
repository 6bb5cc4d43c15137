package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// reloadPolicy is one domain and one gate.
const reloadPolicy = "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\nconcurrency:\n  - name: g\n    match: {path_prefix: /g}\n"

// logRecords decodes the JSON log lines whose msg is msg.
func logRecords(t *testing.T, log, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// counterValue reads a counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// TestReloadKeepsThePolicyWhenTheOnlyFileGoes: deleting the only policy
// file while serving keeps the policy in use, logs why, and counts a
// failed reload; the load log counts gates as well as domains.
func TestReloadKeepsThePolicyWhenTheOnlyFileGoes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(file, []byte(reloadPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics(eng, nil)
	var logs testenv.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := &reloader{dir: dir, engine: eng, metrics: m, log: log, debounce: time.Millisecond, loaded: make(chan string, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.load(ctx); err != nil {
		t.Fatal(err)
	}
	hash := eng.Policy().Hash
	loaded := logRecords(t, logs.String(), "policy loaded")
	if len(loaded) != 1 || loaded[0]["domains"] != 1.0 || loaded[0]["gates"] != 1.0 {
		t.Errorf("load log %v, want one record with domains=1 gates=1", loaded)
	}

	watching := make(chan error, 1)
	go func() { watching <- r.watch(ctx) }()
	// The watcher is up once it sees a file that is no policy change.
	if !testenv.Eventually(func() bool {
		_ = os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644)
		return len(logRecords(t, logs.String(), "policy directory changed")) > 0
	}) {
		t.Fatal("the watcher saw no change in 10s")
	}
	success := func() float64 { return counterValue(m.reloads.WithLabelValues("success")) }
	failure := func() float64 { return counterValue(m.reloads.WithLabelValues("failure")) }
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	// A reload may run while the file is going (listed, then gone: "cannot
	// read this file"); the one after the removal finds no policy file.
	noFile := func() bool {
		for _, r := range logRecords(t, logs.String(), "policy not loaded: keeping the previous policy") {
			if strings.Contains(r["error"].(string), "no policy file") {
				return true
			}
		}
		return false
	}
	if !testenv.Eventually(func() bool { return noFile() || success() > 1 }) {
		t.Fatalf("no reload within 10s of deleting the only policy file says there is no policy file:\n%s", logs.String())
	}
	if failure() < 1 || success() != 1 {
		t.Errorf("reloads: %v success, %v failure; want 1 success and the deletion refused", success(), failure())
	}
	if got := eng.Policy(); got.Hash != hash || len(got.Domains) != 1 || len(got.Gates) != 1 {
		t.Errorf("the policy in use changed: hash %s (was %s), %d domains, %d gates", got.Hash, hash, len(got.Domains), len(got.Gates))
	}
	cancel()
	if err := <-watching; err != nil {
		t.Errorf("watch: %v", err)
	}
}
