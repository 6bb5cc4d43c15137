package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// The token budget every flow spends: 100,000 tokens an hour per tenant;
// 200 streams of 1 to 4,000 tokens each (about 400,000 together).
const (
	tokenBudget  = 100_000
	tokenStreams = 200
	tokenCap     = 4000 // the most one stream costs
	smallReserve = 1000
)

// tokenPolicy: one budget, two cost limits on it — one reserving the cap,
// one reserving less — each settled at the x-usage-total-tokens response
// header.
var tokenPolicy = fmt.Sprintf(`
domain: llm
descriptors:
  - key: tenant
    rate_limit: {name: tokens, unit: hour, requests_per_unit: %d}
costs:
  - name: at-cap
    match: {path_prefix: /ai/cap/}
    descriptor: [{key: tenant, header: x-tenant}]
    reserve: %d
    cost: {response_header: x-usage-total-tokens}
  - name: below-cap
    match: {path_prefix: /ai/small/}
    descriptor: [{key: tenant, header: x-tenant}]
    reserve: %d
    cost: {response_header: x-usage-total-tokens}
`, tokenBudget, tokenCap, smallReserve)

// tokenRun is what one flow admitted, wave by wave.
type tokenRun struct {
	admitted      int   // streams let through, over all waves
	cost          int64 // their real costs, summed
	waves         int
	lastWave      int   // streams admitted by the last wave that admitted any
	lastWaveExtra int64 // Σ (cost − reservation)⁺ over them
}

func (r tokenRun) overrun() int64 { return max(r.cost-tokenBudget, 0) }

// TestE2ETokenBudget: 200 concurrent simulated streams of random cost
// against a 100,000-token hourly budget, through two real serve processes
// over one Redis, spread between them. Each flow runs in waves: every
// stream not yet admitted asks at once, the admitted ones stay in flight
// together (every check before any charge: the burst the hole needs),
// then all end with their real cost; the next wave asks again after the
// settlements have landed, until a wave admits none.
//
//   - RLS, check then charge (Envoy Gateway's cost: request 0, response from
//     the real cost): every stream passes the check before any is charged,
//     so the window overruns by what they cost beyond the budget —
//     measured and reported.
//   - ext_proc, reservation at the cap (4,000): the streams admitted cost no
//     more than the budget.
//   - ext_proc, reservation of 1,000 below a cap of 4,000: the window goes
//     past the budget by no more than the extra the last admitting wave
//     charged, itself at most (its streams) × (4,000 − 1,000), the README's
//     bound. (Until the engine counts a non-nil HitsAddend as a charge, an
//     extra that does not fit is refused and counts nothing: the window's
//     count then misses what was spent, and a later wave could be admitted
//     on it.)
//
// A run that straddles the top of an hour (two windows) is run again.
func TestE2ETokenBudget(t *testing.T) {
	t.Parallel()
	redis := testenv.StartRedis(t)
	// 200 streams at once on two cores under -race: a store call can wait
	// longer than the default 50 ms, and this test measures what is
	// admitted, not how fast.
	o := options{store: "redis", redisURL: redis.URL(), files: map[string]string{"llm.yaml": tokenPolicy}, args: []string{"--store-timeout", "5s"}}
	sidecars := []*sidecar{startSidecar(t, o), startSidecar(t, o)}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 30))
	for attempt := 0; ; attempt++ {
		costs := make([]int64, tokenStreams)
		var total int64
		for i := range costs {
			costs[i] = 1 + rng.Int64N(tokenCap)
			total += costs[i]
		}
		start := time.Now()
		suffix := fmt.Sprintf("%d-%d", seed, attempt)
		rls := runRLSFlow(t, sidecars, "rls-"+suffix, costs)
		atCap := runExtProcFlow(t, sidecars, "/ai/cap/chat", "cap-"+suffix, tokenCap, costs)
		below := runExtProcFlow(t, sidecars, "/ai/small/chat", "small-"+suffix, smallReserve, costs)
		if start.Truncate(time.Hour) != time.Now().Truncate(time.Hour) {
			t.Logf("the run crossed the top of the hour (two windows): running it again")
			continue
		}
		t.Logf("%d streams, %d tokens together, budget %d/hour", tokenStreams, total, tokenBudget)
		for _, f := range []struct {
			name string
			run  tokenRun
		}{{"RLS check then charge", rls}, {"ext_proc reserve 4000 (cap)", atCap}, {"ext_proc reserve 1000 (cap 4000)", below}} {
			t.Logf("%-34s admitted %3d streams in %d waves, %6d tokens: overrun %6d (last admitting wave: %d streams, %d extra)",
				f.name, f.run.admitted, f.run.waves, f.run.cost, f.run.overrun(), f.run.lastWave, f.run.lastWaveExtra)
		}
		if rls.overrun() == 0 {
			t.Errorf("check then charge did not overrun: %d streams admitted for %d tokens", rls.admitted, rls.cost)
		}
		if atCap.cost > tokenBudget {
			t.Errorf("reserving the cap admitted %d tokens against a budget of %d", atCap.cost, tokenBudget)
		}
		if below.overrun() > below.lastWaveExtra || below.overrun() > int64(below.lastWave)*(tokenCap-smallReserve) {
			t.Errorf("reserving %d below a cap of %d overran by %d: past the bound, %d extra charged after the last admission (≤ %d streams × %d)",
				smallReserve, tokenCap, below.overrun(), below.lastWaveExtra, below.lastWave, tokenCap-smallReserve)
		}
		for i, s := range sidecars {
			m := s.metrics(t)
			t.Logf("sidecar %d: reserved %v, refunded %v, extra %v, overrun %v units", i,
				m.get("throttlekit_cost_reserved_units_total", "rule", "tokens"), m.get("throttlekit_cost_refunded_units_total", "rule", "tokens"),
				m.get("throttlekit_cost_extra_units_total", "rule", "tokens"), m.get("throttlekit_cost_overrun_units_total", "rule", "tokens"))
		}
		return
	}
}

// waves runs the streams not yet admitted, wave after wave: ask(i) asks for
// stream i and reports whether it was admitted; end(i) ends an admitted
// stream with its cost and returns once that has been counted. It stops
// after a wave that admits none.
func waves(t *testing.T, costs []int64, reserve int64, ask func(i int) bool, end func(i int)) tokenRun {
	var run tokenRun
	pending := make([]int, len(costs))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		admitted := make([]bool, len(pending))
		var wg sync.WaitGroup
		for k, i := range pending {
			wg.Add(1)
			go func() {
				defer wg.Done()
				admitted[k] = ask(i)
			}()
		}
		wg.Wait()
		var in, left []int
		for k, i := range pending {
			if admitted[k] {
				in = append(in, i)
			} else {
				left = append(left, i)
			}
		}
		if len(in) == 0 || t.Failed() {
			break
		}
		run.waves++
		run.lastWave, run.lastWaveExtra = len(in), 0
		for _, i := range in {
			wg.Add(1)
			go func() {
				defer wg.Done()
				end(i)
			}()
			run.admitted++
			run.cost += costs[i]
			run.lastWaveExtra += max(costs[i]-reserve, 0)
		}
		wg.Wait()
		pending = left
	}
	return run
}

// runRLSFlow: each stream is checked with hits_addend 0 (counted nothing)
// when it starts and charged its cost when it ends, as Envoy Gateway's
// BackendTrafficPolicy cost (request: Number 0, response: Metadata) and
// Envoy AI Gateway's token limits do.
func runRLSFlow(t *testing.T, sidecars []*sidecar, tenant string, costs []int64) tokenRun {
	call := func(i int, hits uint64) *rlsv3.RateLimitResponse {
		req := &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries:    []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}},
			HitsAddend: wrapperspb.UInt64(hits),
		}}}
		resp, err := sidecars[i%len(sidecars)].call(req)
		if err != nil {
			t.Errorf("ShouldRateLimit(hits %d): %v", hits, err)
			return nil
		}
		return resp
	}
	return waves(t, costs, 0, func(i int) bool {
		resp := call(i, 0)
		return resp != nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
	}, func(i int) {
		call(i, uint64(costs[i]))
	})
}

// runExtProcFlow: each stream plays Envoy's ext_proc side: request headers
// (reserve, or 429), then, when the stream ends, response headers carrying
// its cost; the stream is over once the sidecar has returned from it, so
// its settlement has landed.
func runExtProcFlow(t *testing.T, sidecars []*sidecar, path, tenant string, reserve int64, costs []int64) tokenRun {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	streams := make([]extprocv3.ExternalProcessor_ProcessClient, len(costs))
	hdr := func(kv ...string) *corev3.HeaderMap {
		m := &corev3.HeaderMap{}
		for i := 0; i+1 < len(kv); i += 2 {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		}
		return m
	}
	fail := func(i int, what string, err error) {
		if ctx.Err() == nil {
			t.Errorf("stream %d: %s: %v", i, what, err)
		}
	}
	return waves(t, costs, reserve, func(i int) bool {
		c := extprocv3.NewExternalProcessorClient(sidecars[i%len(sidecars)].conn)
		s, err := c.Process(ctx)
		if err != nil {
			fail(i, "open", err)
			return false
		}
		err = s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: hdr(":method", "POST", ":authority", "llm", ":path", path, "x-tenant", tenant)}}})
		if err != nil {
			fail(i, "request headers", err)
			return false
		}
		resp, err := s.Recv()
		if err != nil {
			fail(i, "answer to request headers", err)
			return false
		}
		if ir := resp.GetImmediateResponse(); ir != nil {
			if ir.GetStatus().GetCode() != 429 {
				t.Errorf("stream %d refused with %v, want 429", i, ir.GetStatus().GetCode())
			}
			_ = s.CloseSend()
			return false
		}
		streams[i] = s
		return true
	}, func(i int) {
		s := streams[i]
		err := s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: hdr(":status", "200", "x-usage-total-tokens", strconv.FormatInt(costs[i], 10))}}})
		if err != nil {
			fail(i, "response headers", err)
			return
		}
		if _, err := s.Recv(); err != nil {
			fail(i, "answer to response headers", err)
			return
		}
		if err := s.CloseSend(); err != nil {
			fail(i, "close", err)
			return
		}
		if _, err := s.Recv(); !errors.Is(err, io.EOF) {
			fail(i, "end of stream", err)
		}
	})
}
