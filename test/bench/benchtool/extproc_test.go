package main

import (
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// streamData is the shape of the messages scripts/bench-extproc.sh sends:
// header values in raw_value, base64 as protobuf JSON writes bytes.
const streamData = `[
 {"request_headers":{"headers":{"headers":[{"key":":method","raw_value":"R0VU"},{"key":":path","raw_value":"L2FwaS9pdGVtcw=="}]},"end_of_stream":true}},
 {"response_headers":{"headers":{"headers":[{"key":":status","raw_value":"MjAw"}]}}}
]`

func TestProcessingRequests(t *testing.T) {
	reqs, err := processingRequests(streamData)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || kind(reqs[0]) != "request_headers" || kind(reqs[1]) != "response_headers" {
		t.Fatalf("got %v", reqs)
	}
	h := reqs[0].GetRequestHeaders().GetHeaders().GetHeaders()
	if len(h) != 2 || h[1].GetKey() != ":path" || string(h[1].GetRawValue()) != "/api/items" {
		t.Errorf("request headers %v", h)
	}
	if got := string(reqs[1].GetResponseHeaders().GetHeaders().GetHeaders()[0].GetRawValue()); got != "200" {
		t.Errorf(":status %q, want 200", got)
	}
	for _, bad := range []string{``, `{}`, `[]`, `[{}]`, `[{"nope":1}]`} {
		if _, err := processingRequests(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestAnswersInKind(t *testing.T) {
	reqs, err := processingRequests(streamData)
	if err != nil {
		t.Fatal(err)
	}
	reqHeaders, respHeaders := reqs[0], reqs[1]
	cont := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}
	respCont := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
	reject := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status: &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}}}}
	replace := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
		Response: &extprocv3.CommonResponse{Status: extprocv3.CommonResponse_CONTINUE_AND_REPLACE}}}}
	for _, c := range []struct {
		name string
		req  *extprocv3.ProcessingRequest
		resp *extprocv3.ProcessingResponse
		err  string // "" for none
	}{
		{"continue", reqHeaders, cont, ""},
		{"response headers", respHeaders, respCont, ""},
		{"rejected", reqHeaders, reject, "immediate_response (status 503)"},
		{"replace", reqHeaders, replace, "plain CONTINUE"},
		{"wrong kind", respHeaders, cont, "want a response_headers answer"},
	} {
		err := answersInKind(c.req, c.resp)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		}
	}
}

func TestReadGateMetrics(t *testing.T) {
	const text = `# HELP throttlekit_gate_admitted_total Requests a gate admitted.
# TYPE throttlekit_gate_admitted_total counter
throttlekit_gate_admitted_total{gate="bench"} 1.234567e+06
throttlekit_gate_admitted_total{gate="other"} 5
throttlekit_gate_rejected_total{gate="bench",reason="limit"} 2
throttlekit_gate_rejected_total{gate="bench",reason="queue_full"} 1
throttlekit_gate_rejected_total{gate="bench",reason="cancelled"} 4
throttlekit_gate_rtt_seconds_bucket{gate="bench",outcome="ok",le="0.001"} 1.2e+06
throttlekit_gate_rtt_seconds_count{gate="bench",outcome="ok"} 1.23456e+06
throttlekit_gate_rtt_seconds_count{gate="bench",outcome="dropped"} 7
throttlekit_gate_rtt_seconds_count{outcome="error",gate="bench"} 3
throttlekit_gate_rtt_seconds_count{gate="be\"nch",outcome="error"} 100
go_goroutines 12
`
	m, err := readGateMetrics(strings.NewReader(text), "bench")
	if err != nil {
		t.Fatal(err)
	}
	want := gateMetrics{admitted: 1234567, rejected: 3, cancelled: 4, ok: 1234560, errored: 3, dropped: 7, sawGate: true}
	if m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}
	if m, _ := readGateMetrics(strings.NewReader(text), "absent"); m.sawGate {
		t.Errorf("absent gate seen: %+v", m)
	}
	if _, err := readGateMetrics(strings.NewReader(`x{gate="a} 1`+"\n"), "a"); err == nil {
		t.Error("unterminated label: no error")
	}
}
