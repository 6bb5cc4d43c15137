package main

import (
	"context"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
)

// queuedGateEngine is an engine with one gate, checkout: one request in
// flight, one more waiting up to 190ms (under Envoy's message_timeout).
func queuedGateEngine(t *testing.T) *engine.Engine {
	t.Helper()
	return gatesEngine(t, `
concurrency:
  - name: checkout
    match: {path_prefix: /checkout}
    controller: aimd
    min_limit: 1
    initial_limit: 1
    max_limit: 1
    params: {timeout: 250ms, backoff: 0.5, increase: 1}
    queue: {max: 1, timeout: 190ms, order: fifo}
`)
}

// TestGateRejectionsCountedOnce: each request a gate turns away is counted
// under exactly one reason of throttlekit_gate_rejected_total, so that the
// shedding alert's sum over reasons is the number turned away. A queue-full
// rejection used to be counted under "queue_full" and "limit" both.
func TestGateRejectionsCountedOnce(t *testing.T) {
	e := queuedGateEngine(t)
	ctx := context.Background()
	m := newMetrics(e, nil)

	c, ok := e.ChooseGate("shop", "/checkout", func(string) (string, bool) { return "", false })
	if !ok {
		t.Fatal("no gate for /checkout")
	}
	now := time.Now()
	held, err := c.Gate.Acquire(ctx, now) // the one slot
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(now, adaptive.OK)
	// One waiter fills the queue; it leaves when its context ends.
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { _, err := c.Gate.Acquire(wctx, now); waited <- err }()
	if !testenv.Eventually(func() bool { return c.Gate.Snapshot().Queued == 1 }) {
		t.Fatal("the waiter never queued")
	}
	// Two more find the queue full.
	for range 2 {
		if _, err := c.Gate.Acquire(ctx, now); err != adaptive.ErrQueueFull {
			t.Fatalf("Acquire with the queue full: %v, want ErrQueueFull", err)
		}
	}
	// One more is refused at once by TryAcquire (the limit).
	if _, ok := c.Gate.TryAcquire(now); ok {
		t.Fatal("TryAcquire admitted past the limit")
	}
	cancel()
	<-waited

	rejected := func(reason string) float64 {
		return gathered(t, m.reg, "throttlekit_gate_rejected_total", map[string]string{"gate": "checkout", "reason": reason})
	}
	for reason, want := range map[string]float64{"queue_full": 2, "limit": 1, "queue_timeout": 0, "cancelled": 1} {
		if got := rejected(reason); got != want {
			t.Errorf("throttlekit_gate_rejected_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
}

// TestCancelledExtProcStreamCountsCanceled: a stream Envoy cancels while its
// request waits in a gate's queue is counted as code="Canceled" (it was
// "Unknown": the handler returned the bare context error).
func TestCancelledExtProcStreamCountsCanceled(t *testing.T) {
	e := queuedGateEngine(t)
	m := newMetrics(e, nil)
	client := serveExtProc(t, m, func(string, ...any) {}, envoyrls.NewProcessorServer(e, envoyrls.ProcessorOptions{Observe: m.observeGate}))

	c, _ := e.ChooseGate("shop", "/checkout", func(string) (string, bool) { return "", false })
	held, err := c.Gate.Acquire(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(time.Now(), adaptive.OK)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- extProcCall(ctx, client, "/checkout", "200") }()
	if !testenv.Eventually(func() bool { return c.Gate.Snapshot().Queued == 1 }) {
		t.Fatal("the stream's request never queued")
	}
	cancel()
	<-done
	counted := func() bool {
		return gathered(t, m.reg, "throttlekit_grpc_requests_total", map[string]string{"method": "Process"}) == 1
	}
	if !testenv.Eventually(counted) {
		t.Fatal("the cancelled stream was never counted")
	}
	if got := gathered(t, m.reg, "throttlekit_grpc_requests_total", map[string]string{"method": "Process", "code": "Canceled"}); got != 1 {
		t.Errorf("throttlekit_grpc_requests_total{method=Process,code=Canceled} = %v, want 1", got)
	}
}
