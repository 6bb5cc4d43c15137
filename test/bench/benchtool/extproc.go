package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// extprocCmd opens one ext_proc stream, sends the benchmark's messages (a
// JSON array of ProcessingRequest, ghz's --data for a bidi call) one at a
// time, and requires each to be answered in kind — request headers with a
// plain CONTINUE, not an immediate_response — and the stream to end cleanly
// once closed. So a target that would reject, or answer out of order, fails
// before it is measured (ghz's report shows how each stream ended, not what
// was answered).
func extprocCmd(args []string) error {
	fs := flag.NewFlagSet("extproc", flag.ExitOnError)
	addr := fs.String("addr", "", "gRPC address (host:port)")
	data := fs.String("data", "", "the stream's messages: a JSON array of ProcessingRequest (ghz's --data)")
	fs.Parse(args)
	reqs, err := processingRequests(*data)
	if err != nil {
		return fmt.Errorf("extproc: -data: %w", err)
	}
	conn, err := dial(*addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		return fmt.Errorf("Process: %w", err)
	}
	for i, req := range reqs {
		if err := stream.Send(req); err != nil {
			return fmt.Errorf("Process: sending message %d: %w", i+1, err)
		}
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("Process: no answer to message %d (%s): %w", i+1, kind(req), err)
		}
		if err := answersInKind(req, resp); err != nil {
			return fmt.Errorf("message %d: %w", i+1, err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		return fmt.Errorf("Process: CloseSend: %w", err)
	}
	if resp, err := stream.Recv(); !errors.Is(err, io.EOF) {
		if err != nil {
			return fmt.Errorf("Process: the stream ended with %w, want a clean end", err)
		}
		return fmt.Errorf("Process: unasked-for answer %s after the last message", protojson.MarshalOptions{}.Format(resp))
	}
	return nil
}

// processingRequests reads a JSON array of ProcessingRequest.
func processingRequests(data string) ([]*extprocv3.ProcessingRequest, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal([]byte(data), &raws); err != nil {
		return nil, fmt.Errorf("want a JSON array of ProcessingRequest: %w", err)
	}
	if len(raws) == 0 {
		return nil, errors.New("no messages")
	}
	reqs := make([]*extprocv3.ProcessingRequest, len(raws))
	for i, raw := range raws {
		reqs[i] = new(extprocv3.ProcessingRequest)
		if err := protojson.Unmarshal(raw, reqs[i]); err != nil {
			return nil, fmt.Errorf("message %d: %w", i+1, err)
		}
		if reqs[i].GetRequest() == nil {
			return nil, fmt.Errorf("message %d carries no request (request_headers, response_headers, ...)", i+1)
		}
	}
	return reqs, nil
}

// kind names a ProcessingRequest's message.
func kind(req *extprocv3.ProcessingRequest) string {
	switch req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return "request_headers"
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return "response_headers"
	case *extprocv3.ProcessingRequest_RequestBody:
		return "request_body"
	case *extprocv3.ProcessingRequest_ResponseBody:
		return "response_body"
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return "request_trailers"
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return "response_trailers"
	}
	return fmt.Sprintf("%T", req.GetRequest())
}

// answersInKind requires resp to be the answer of req's kind; for headers, a
// plain CONTINUE (no mutation, no replaced body).
func answersInKind(req *extprocv3.ProcessingRequest, resp *extprocv3.ProcessingResponse) error {
	answer := protojson.MarshalOptions{}.Format(resp)
	if ir := resp.GetImmediateResponse(); ir != nil {
		return fmt.Errorf("%s answered with an immediate_response (status %d): the target rejected the request: %s",
			kind(req), ir.GetStatus().GetCode(), answer)
	}
	var hr *extprocv3.HeadersResponse
	ok := false
	switch req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		hr = resp.GetRequestHeaders()
		ok = hr != nil
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		hr = resp.GetResponseHeaders()
		ok = hr != nil
	case *extprocv3.ProcessingRequest_RequestBody:
		ok = resp.GetRequestBody() != nil
	case *extprocv3.ProcessingRequest_ResponseBody:
		ok = resp.GetResponseBody() != nil
	case *extprocv3.ProcessingRequest_RequestTrailers:
		ok = resp.GetRequestTrailers() != nil
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		ok = resp.GetResponseTrailers() != nil
	}
	if !ok {
		return fmt.Errorf("%s answered with %s, want a %s answer", kind(req), answer, kind(req))
	}
	if c := hr.GetResponse(); c != nil &&
		(c.GetStatus() != extprocv3.CommonResponse_CONTINUE || c.GetHeaderMutation() != nil || c.GetBodyMutation() != nil) {
		return fmt.Errorf("%s answered with %s, want a plain CONTINUE", kind(req), answer)
	}
	return nil
}

// gateMetrics are one gate's counters as throttlekit's /metrics shows them.
type gateMetrics struct {
	admitted  uint64 // throttlekit_gate_admitted_total
	rejected  uint64 // throttlekit_gate_rejected_total, reasons limit, queue_full, queue_timeout: answered 503
	cancelled uint64 // ... reason cancelled: streams that ended while acquiring (no answer sent)
	ok        uint64 // throttlekit_gate_rtt_seconds_count, outcome ok: released on response headers
	errored   uint64 // ... outcome error: response headers with a 5xx status
	dropped   uint64 // ... outcome dropped: streams that ended before response headers
	sawGate   bool   // the gate's admitted counter was there
}

// gatesCmd prints a gate's counters from throttlekit's Prometheus endpoint:
// "admitted rejected cancelled ok error dropped". The gate must be in the
// policy.
func gatesCmd(args []string) error {
	fs := flag.NewFlagSet("gates", flag.ExitOnError)
	url := fs.String("metrics", "", "throttlekit's metrics URL (http://HOST:PORT/metrics)")
	gate := fs.String("gate", "", "the gate's name")
	fs.Parse(args)
	if *url == "" || *gate == "" {
		return errors.New("gates: -metrics and -gate are required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", *url, resp.Status)
	}
	m, err := readGateMetrics(resp.Body, *gate)
	if err != nil {
		return fmt.Errorf("%s: %w", *url, err)
	}
	if !m.sawGate {
		return fmt.Errorf("%s: no throttlekit_gate_admitted_total for gate %q: is it in the policy?", *url, *gate)
	}
	fmt.Printf("%d %d %d %d %d %d\n", m.admitted, m.rejected, m.cancelled, m.ok, m.errored, m.dropped)
	return nil
}

// readGateMetrics reads gate's counters from Prometheus text exposition.
func readGateMetrics(r io.Reader, gate string) (gateMetrics, error) {
	var m gateMetrics
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, err := parseSample(line)
		if err != nil {
			return m, err
		}
		if labels["gate"] != gate {
			continue
		}
		n := uint64(math.Round(value))
		switch name {
		case "throttlekit_gate_admitted_total":
			m.admitted += n
			m.sawGate = true
		case "throttlekit_gate_rejected_total":
			if labels["reason"] == "cancelled" {
				m.cancelled += n
			} else {
				m.rejected += n
			}
		case "throttlekit_gate_rtt_seconds_count":
			switch labels["outcome"] {
			case "ok":
				m.ok += n
			case "error":
				m.errored += n
			case "dropped":
				m.dropped += n
			}
		}
	}
	return m, sc.Err()
}

// parseSample splits one sample line, `name{k="v",...} value [timestamp]`.
func parseSample(line string) (name string, labels map[string]string, value float64, err error) {
	bad := func(why string) error { return fmt.Errorf("metrics line %q: %s", line, why) }
	rest := line
	i := strings.IndexAny(rest, "{ ")
	if i <= 0 {
		return "", nil, 0, bad("no value")
	}
	name, rest = rest[:i], rest[i:]
	labels = map[string]string{}
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq <= 0 {
				return "", nil, 0, bad("bad label")
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var v strings.Builder
			closed := false
			for j := 0; j < len(rest); j++ {
				c := rest[j]
				if c == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(rest[j])
					}
					continue
				}
				if c == '"' {
					rest, closed = rest[j+1:], true
					break
				}
				v.WriteByte(c)
			}
			if !closed {
				return "", nil, 0, bad("unterminated label value")
			}
			labels[key] = v.String()
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", nil, 0, bad("no value")
	}
	value, err = strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", nil, 0, bad(err.Error())
	}
	return name, labels, value, nil
}
