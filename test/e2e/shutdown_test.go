package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// callRecord is one ShouldRateLimit of the drain test.
type callRecord struct {
	start, end time.Time
	// sent is when the client queued the call's HEADERS frame on a live
	// connection (Unix ns; 0 if it never did). A server that drains as
	// gRPC's GracefulStop does must answer every call sent before its
	// GOAWAY, hence every call sent before the signal.
	sent    atomic.Int64
	err     error
	overall rlsv3.RateLimitResponse_Code
}

type recordKey struct{}

// headerStamp is a client stats.Handler that stamps each call's record with
// the moment its headers were queued on a connection.
type headerStamp struct{}

func (headerStamp) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (headerStamp) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.OutHeader); !ok {
		return
	}
	if r, ok := ctx.Value(recordKey{}).(*callRecord); ok {
		r.sent.CompareAndSwap(0, time.Now().UnixNano())
	}
}

func (headerStamp) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (headerStamp) HandleConn(context.Context, stats.ConnStats)                       {}

// testSigtermDrain keeps 16 callers busy, sends SIGTERM, and checks that
// the process exits with status 0 and drained: every call sent before the
// signal was answered, and every later call was answered or refused with
// UNAVAILABLE. Whether a call is in flight at the instant of the signal is
// up to the scheduler: a run that caught none did not exercise the drain,
// and is made again with a new sidecar; only judgeAttempts such runs fail,
// naming the load each saw.
func testSigtermDrain(t *testing.T, o options) {
	// The test measures the drain, not the store: a Redis call a loaded
	// machine makes slower than the default 50 ms would fail a call sent
	// before the signal (the drain rule's on_store_error is error).
	o.args = append(slices.Clone(o.args), "--store-timeout", slackStoreTimeout.String())
	o.dial = append(slices.Clone(o.dial), grpc.WithStatsHandler(headerStamp{}))
	var missed []string
	for range judgeAttempts {
		if sigtermDrain(t, o) > 0 || t.Failed() {
			return
		}
		missed = append(missed, testenv.LoadAverage())
		t.Logf("no call was in flight when SIGTERM was sent (load average %s): the drain was not exercised; again with a new sidecar", missed[len(missed)-1])
	}
	t.Errorf("no call was in flight when SIGTERM was sent, in %d runs (load averages %s): the drain was not exercised", judgeAttempts, strings.Join(missed, "; "))
}

// sigtermDrain is one run of testSigtermDrain; it returns how many calls
// sent before the signal were still in flight at it.
func sigtermDrain(t *testing.T, o options) int {
	s := startSidecar(t, o)
	v := unique(t, "v")

	const callers = 16
	var (
		mu       sync.Mutex
		records  []*callRecord
		answered atomic.Int64
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	for range callers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				rec := &callRecord{start: time.Now()}
				ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), recordKey{}, rec), callDeadline)
				resp, err := s.rls.ShouldRateLimit(ctx, request("e2e", desc("drain", v)))
				cancel()
				rec.end, rec.err, rec.overall = time.Now(), err, resp.GetOverallCode()
				mu.Lock()
				records = append(records, rec)
				mu.Unlock()
				if err != nil {
					return // the server is gone (or failed the call: checked below)
				}
				answered.Add(1)
			}
		})
	}
	waitFor(t, sampleDeadline, "200 calls answered before the signal", func() (bool, string) {
		n := answered.Load()
		return n >= 200, fmt.Sprintf("answered so far: %d", n)
	})

	signalled := time.Now()
	s.signal(t, syscall.SIGTERM)
	exit := s.waitExit(t, exitDeadline)
	close(stop)
	wg.Wait()

	if exit != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", exit)
	}
	var sentBefore, inFlight, refused int
	for _, r := range records {
		sent := r.sent.Load()
		before := sent != 0 && sent < signalled.UnixNano()
		if before {
			sentBefore++
			if r.end.After(signalled) {
				inFlight++
			}
		}
		switch {
		case r.err == nil && r.overall == ok:
		case r.err == nil:
			t.Errorf("call at %v: overall %v, want OK (the drain rule admits a billion a day)", r.start.Sub(signalled), r.overall)
		case before:
			t.Errorf("call sent %v before SIGTERM failed: %v", signalled.Sub(time.Unix(0, sent)), r.err)
		case status.Code(r.err) == codes.Unavailable:
			refused++
		default:
			t.Errorf("call started %v from SIGTERM (not sent before it) failed with %v, want success or UNAVAILABLE", r.start.Sub(signalled), r.err)
		}
	}
	t.Logf("%d calls: %d sent before SIGTERM, %d of them still in flight at the signal; %d refused (UNAVAILABLE) after", len(records), sentBefore, inFlight, refused)
	if _, err := s.call(request("e2e", desc("drain", v))); status.Code(err) != codes.Unavailable {
		t.Errorf("a call after the exit: %v, want UNAVAILABLE", err)
	}
	for _, msg := range []string{"shutting down: draining in-flight calls", "stopped"} {
		if len(s.log.Records(msg)) != 1 {
			t.Errorf("the log has no %q line", msg)
		}
	}
	return inFlight
}
