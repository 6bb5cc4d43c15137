package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// serviceHeader carries the service time the capacity backend meant to
// give a request, in µs: the client tells what it waited for besides.
const serviceHeader = "X-Service-Us"

// capacityBackend is a real HTTP server of capacity c (see fleetC). It
// counts the requests in it: the fleet's true total in flight.
type capacityBackend struct {
	srv      *httptest.Server
	inflight atomic.Int64
}

func newCapacityBackend(t *testing.T, c int, base time.Duration) *capacityBackend {
	b := &capacityBackend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := b.inflight.Add(1)
		defer b.inflight.Add(-1)
		d := base
		if over := float64(n) / float64(c); over > 1 {
			d = time.Duration(float64(base) * over * over)
		}
		select { // the backend's service time, not a test pause
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
		w.Header().Set(serviceHeader, strconv.FormatInt(d.Microseconds(), 10))
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// fleetCall is envoy's request, timed: it returns the immediate response
// of a refusal, or, for a request served, how much longer than the
// backend's service time it took end to end — what scheduling on a loaded
// machine, the loopback and the ext_proc messages add to the latency the
// gate measures.
func fleetCall(ctx context.Context, c extprocv3.ExternalProcessorClient, backendURL string) (*extprocv3.ImmediateResponse, time.Duration, error) {
	start := time.Now()
	var service time.Duration
	ir, err := envoyVia(ctx, c, backendURL, func(h http.Header) {
		us, _ := strconv.ParseInt(h.Get(serviceHeader), 10, 64)
		service = time.Duration(us) * time.Microsecond
	})
	return ir, time.Since(start) - service, err
}

// envoyVia is envoy, handing the backend's response headers to seen (when
// not nil).
func envoyVia(ctx context.Context, c extprocv3.ExternalProcessorClient, backendURL string, seen func(http.Header)) (*extprocv3.ImmediateResponse, error) {
	stream, err := c.Process(ctx)
	if err != nil {
		return nil, err
	}
	defer stream.CloseSend()
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(":method", "GET", ":authority", "backend", ":path", "/work")}}}); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		return ir, nil
	}
	if resp.GetRequestHeaders() == nil {
		return nil, fmt.Errorf("unexpected answer to request headers: %v", resp)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, backendURL+"/work", nil)
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, hr.Body)
	hr.Body.Close()
	if seen != nil {
		seen(hr.Header)
	}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(":status", strconv.Itoa(hr.StatusCode))}}}); err != nil {
		return nil, err
	}
	if _, err := stream.Recv(); err != nil {
		return nil, err
	}
	return nil, nil
}

// durations is a slice of durations safe for concurrent appends.
type durations struct {
	mu sync.Mutex
	d  []time.Duration
}

func (ds *durations) add(d time.Duration) {
	ds.mu.Lock()
	ds.d = append(ds.d, d)
	ds.mu.Unlock()
}

// quantile is the q-quantile (nearest rank) of the durations; 0 for none.
func (ds *durations) quantile(q float64) time.Duration {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if len(ds.d) == 0 {
		return 0
	}
	s := slices.Clone(ds.d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// beatLog keeps when each node beat, as the coordinator's records tell (a
// record's lease ends LeaseTTL after its latest beat), to measure the
// heartbeat periods a run really had.
type beatLog struct {
	last    map[string]int64 // µs on the coordinator's clock
	longest time.Duration    // the longest gap between two beats of a node seen
}

// see notes node's beat from its record's lease end; lease is LeaseTTL.
func (bl *beatLog) see(node string, expiresAt int64, lease time.Duration) {
	if bl.last == nil {
		bl.last = make(map[string]int64)
	}
	at := expiresAt - lease.Microseconds()
	if prev, ok := bl.last[node]; ok && at > prev {
		bl.longest = max(bl.longest, time.Duration(at-prev)*time.Microsecond)
	}
	if at > bl.last[node] {
		bl.last[node] = at
	}
}

func headerMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}
