package envoyrls

import (
	"context"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/engine"
)

var rt0 = time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)

// answer keeps the benchmarks' answers alive, so the compiler cannot drop
// building them.
var answer *extprocv3.ProcessingResponse

// gateChoice returns a gate of fixed limit whose statistics window holds
// history samples, with held of its slots taken.
func gateChoice(tb testing.TB, limit, history, held int) engine.GateChoice {
	tb.Helper()
	ctrl, err := adaptive.NewAIMD(adaptive.AIMDConfig{MinLimit: limit, MaxLimit: limit, InitialLimit: limit})
	if err != nil {
		tb.Fatal(err)
	}
	g, err := adaptive.NewGate(adaptive.GateConfig{Name: "checkout", Controller: ctrl})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range history {
		l, _ := g.TryAcquire(rt0)
		l.Release(rt0.Add(time.Duration(i)*time.Microsecond), adaptive.OK)
	}
	for range held {
		if _, ok := g.TryAcquire(rt0); !ok {
			tb.Fatal("gate full before its limit")
		}
	}
	return engine.GateChoice{Name: "checkout", Gate: g, Status: 503, RetryAfter: time.Second}
}

// rejectRequest is what Process does for request headers a full gate turns
// away: Acquire fails, and the answer is built.
func rejectRequest(tb testing.TB, c engine.GateChoice) {
	if _, err := c.Acquire(context.Background(), rt0); err == nil {
		tb.Fatal("admitted at the limit")
	}
	if answer = reject(c, rt0); answer.GetImmediateResponse() == nil {
		tb.Fatal("no immediate response")
	}
}

// admitRequest is what Process does for a request the gate admits, from
// request headers to response headers.
func admitRequest(tb testing.TB, s *ProcessorServer, c engine.GateChoice) {
	l, err := c.Acquire(context.Background(), rt0)
	if err != nil {
		tb.Fatal(err)
	}
	answer = continueRequest()
	s.release(l, c.Name, rt0, adaptive.OK, gateSpan{})
}

// TestRejectionCostIsIndependentOfHistory: turning a request away reads
// only the gate's limit, so it costs the same on a gate with a full
// statistics window (an overloaded backend's) as on a fresh one; it used to
// copy and sort the window (Gate.Snapshot) on every rejection.
func TestRejectionCostIsIndependentOfHistory(t *testing.T) {
	fresh := gateChoice(t, 1, 0, 1)
	busy := gateChoice(t, 1, adaptive.DefaultStatsWindow, 1)
	want := testing.AllocsPerRun(100, func() { rejectRequest(t, fresh) })
	if got := testing.AllocsPerRun(100, func() { rejectRequest(t, busy) }); got != want {
		t.Fatalf("a rejection allocates %v times on a gate with %d samples, %v on a fresh one", got, adaptive.DefaultStatsWindow, want)
	}
	for _, h := range reject(busy, rt0).GetImmediateResponse().GetHeaders().GetSetHeaders() {
		if h.GetHeader().GetKey() == HeaderGateLimit && string(h.GetHeader().GetRawValue()) != "1" {
			t.Fatalf("%s: %s, want 1", HeaderGateLimit, h.GetHeader().GetRawValue())
		}
	}
}

// BenchmarkExtProcDecision is the gate's part of one ext_proc request
// without gRPC: admitted (acquire, continue, release) and rejected (acquire
// fails, the 503 is built) on gates whose statistics windows are full, as
// they are under load.
func BenchmarkExtProcDecision(b *testing.B) {
	s := NewProcessorServer(nil, ProcessorOptions{})
	b.Run("admitted", func(b *testing.B) {
		c := gateChoice(b, 1000, adaptive.DefaultStatsWindow, 0)
		b.ReportAllocs()
		for b.Loop() {
			admitRequest(b, s, c)
		}
	})
	b.Run("rejected", func(b *testing.B) {
		c := gateChoice(b, 1, adaptive.DefaultStatsWindow, 1)
		b.ReportAllocs()
		for b.Loop() {
			rejectRequest(b, c)
		}
	})
}
