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

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

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

// reloads is throttlekit_policy_reloads_total of result.
func reloads(t *testing.T, m *metrics, result string) float64 {
	t.Helper()
	return gathered(t, m.reg, "throttlekit_policy_reloads_total", map[string]string{"result": result})
}

// loadedReloader is a reloader of a fresh directory holding reloadPolicy
// in a.yaml, loaded, logging JSON at debug level into logs.
func loadedReloader(t *testing.T) (dir, file string, eng *engine.Engine, m *metrics, logs *testenv.Buffer, r *reloader) {
	t.Helper()
	dir = t.TempDir()
	file = filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(file, []byte(reloadPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	m = newMetrics(eng, nil)
	logs = &testenv.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r = &reloader{dir: dir, engine: eng, metrics: m, log: log, debounce: time.Millisecond, loaded: make(chan string, 1)}
	if err := r.load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dir, file, eng, m, logs, r
}

// TestReloadKeepsThePolicyWhenTheOnlyFileGoes: deleting the only policy
// file while serving keeps the policy in use, logs why, and counts a
// failed reload; the load log counts gates as well as domains.
func TestReloadKeepsThePolicyWhenTheOnlyFileGoes(t *testing.T) {
	dir, file, eng, m, logs, r := loadedReloader(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hash := eng.Policy().Hash
	loaded := logRecords(t, logs.String(), "policy loaded")
	if len(loaded) != 1 || loaded[0]["domains"] != 1.0 || loaded[0]["gates"] != 1.0 {
		t.Errorf("load log %v, want one record with domains=1 gates=1", loaded)
	}

	watching := make(chan error, 1)
	go func() { watching <- r.watch(ctx) }()
	// The watcher is up once it sees a file that is no policy change: each
	// try writes it whole, as every write a watcher may read must be.
	if !testenv.Eventually(func() bool {
		testenv.WriteFileAtomic(t, filepath.Join(dir, "notes.txt"), []byte("x"))
		return len(logRecords(t, logs.String(), "policy directory changed")) > 0
	}) {
		t.Fatal("the watcher saw no change in 10s")
	}
	success := func() float64 { return reloads(t, m, "success") }
	failure := func() float64 { return reloads(t, m, "failure") }
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

// TestRestoringTheFileEndsTheFailure (issue 32, item 6): after a bad edit,
// putting the good file back logs the restore and counts a success, and
// throttlekit_policy_reload_failing (which ThrottlekitPolicyReloadFailing
// reads) goes back to 0. Before, a restore logged nothing and counted
// nothing (the set equals the one in use), and the alert, which read the
// failures of the last 15 minutes, stayed on.
func TestRestoringTheFileEndsTheFailure(t *testing.T) {
	_, file, _, m, logs, r := loadedReloader(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.watch(ctx) //nolint:errcheck // ends with ctx
	failing := func() float64 { return gathered(t, m.reg, "throttlekit_policy_reload_failing", nil) }
	// The bad edit is written again until it is seen (the watcher may not
	// be up yet), each time whole: a half-written file would be a failure
	// and a success of its own.
	if !testenv.Eventually(func() bool {
		testenv.WriteFileAtomic(t, file, []byte("domain: a\ndescriptors: [{key: k, rate_limit: {unit: fortnight}}]\n"))
		return failing() == 1
	}) {
		t.Fatalf("a bad edit did not set throttlekit_policy_reload_failing:\n%s", logs.String())
	}
	success := reloads(t, m, "success")
	testenv.WriteFileAtomic(t, file, []byte(reloadPolicy)) // the watcher is up: once is enough
	if !testenv.Eventually(func() bool { return failing() == 0 }) {
		t.Fatalf("restoring the good file left throttlekit_policy_reload_failing at 1:\n%s", logs.String())
	}
	if got := reloads(t, m, "success"); got != success+1 {
		t.Errorf("successes %v after the restore, want %v", got, success+1)
	}
	if len(logRecords(t, logs.String(), "policy restored: the source holds the policy in use again")) != 1 {
		t.Errorf("the restore was not logged once:\n%s", logs.String())
	}
}

// countedPolicy is a user's 6 a day beside a looser hourly limit; edited,
// the day's limit is named and put second.
const (
	countedPolicy = "domain: c\ndescriptors:\n  - key: user\n    rate_limits:\n      - {unit: day, requests_per_unit: 6}\n      - {unit: hour, requests_per_unit: 1000}\n"
	countedEdited = "domain: c\ndescriptors:\n  - key: user\n    rate_limits:\n      - {name: hourly, unit: hour, requests_per_unit: 1000}\n      - {name: daily, unit: day, requests_per_unit: 6}\n"
)

// TestServeReloadKeepsCountsInRedis: two `serve` processes on one Redis
// use up a 6-a-day limit; an edit of the policy file that names both
// limits and swaps them, reloaded by both, admits nothing more that day
// (keyed by name and place, it admitted 6 again).
func TestServeReloadKeepsCountsInRedis(t *testing.T) {
	rdb := testenv.StartRedis(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte(countedPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	var clients []rlsv3.RateLimitServiceClient
	var sidecars []*sidecar
	for range 2 {
		// storeDeadline: the test counts admissions; a check that missed
		// 50ms on a loaded machine failed it UNAVAILABLE.
		s := runServe(t, append([]string{"serve", "--policy", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json",
			"--drain-timeout", "2s", "--reload-debounce", "10ms", "--store", "redis", "--redis-url", rdb.URL()}, storeDeadline...), func(string) string { return "" })
		if s.grpcAddr == "" {
			t.Fatalf("serve did not start:\n%s", s.stderr.String())
		}
		conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients, sidecars = append(clients, rlsv3.NewRateLimitServiceClient(conn)), append(sidecars, s)
	}
	// useUp asks the sidecars in turn until each has denied in a row.
	useUp := func() int {
		admitted, denied := 0, 0
		for i := 0; denied < len(clients); i++ {
			resp, err := clients[i%len(clients)].ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "c",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}}})
			switch {
			case err != nil:
				t.Fatal(err)
			case i > 100:
				t.Fatalf("still admitting after %d requests", i)
			case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
				admitted, denied = admitted+1, 0
			default:
				denied++
			}
		}
		return admitted
	}
	if got := useUp(); got != 6 {
		t.Fatalf("the day admitted %d, want 6", got)
	}
	testenv.WriteFileAtomic(t, file, []byte(countedEdited))
	for i, s := range sidecars {
		if !testenv.Eventually(func() bool { return len(logRecords(t, s.stderr.String(), "policy loaded")) == 2 }) {
			t.Fatalf("sidecar %d did not reload the edit:\n%s", i, s.stderr.String())
		}
	}
	if got := useUp(); got != 0 {
		t.Fatalf("after naming and swapping the limits, the day admitted %d more, want 0", got)
	}
}
