package benchgate

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// outcome is how one request went.
type outcome uint8

const (
	served  outcome = iota + 1 // the gate admitted it and the backend answered 200
	refused                    // the gate answered with an immediate response
	failed                     // anything else
)

// request does what Envoy does for one request with ext_proc in front of
// the backend: request headers to the sidecar; on CONTINUE the backend
// call; then the response headers to the sidecar, whose answer ends it. A
// refused request ends at the sidecar's immediate response.
func request(ctx context.Context, c extprocv3.ExternalProcessorClient, hc *http.Client, url string) (outcome, error) {
	stream, err := c.Process(ctx)
	if err != nil {
		return failed, err
	}
	defer stream.CloseSend()
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headers(":method", "GET", ":authority", "backend", ":path", "/work")}}}); err != nil {
		return failed, err
	}
	resp, err := stream.Recv()
	switch {
	case err != nil:
		return failed, err
	case resp.GetImmediateResponse() != nil:
		return refused, nil
	case resp.GetRequestHeaders() == nil:
		return failed, fmt.Errorf("unexpected answer to request headers: %v", resp)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return failed, err
	}
	hr, err := hc.Do(req)
	if err != nil {
		return failed, err
	}
	_, _ = io.Copy(io.Discard, hr.Body)
	hr.Body.Close()
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headers(":status", strconv.Itoa(hr.StatusCode))}}}); err != nil {
		return failed, err
	}
	if _, err := stream.Recv(); err != nil {
		return failed, err
	}
	if hr.StatusCode != http.StatusOK {
		return failed, fmt.Errorf("backend answered %d", hr.StatusCode)
	}
	return served, nil
}

func headers(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// backoff waits d, or until ctx ends.
func backoff(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select { // a refused client's retry interval, not a pause
	case <-t.C:
	case <-ctx.Done():
	}
}
