// Command benchtool is the small client scripts/bench-rls.sh and
// scripts/bench-extproc.sh need beside ghz, so the scripts depend on nothing
// but Go, ghz and redis-server:
//
//	benchtool probe -grpc ADDR [-http URL]   one readiness check (exit 0: ready)
//	benchtool check -addr ADDR -data JSON [-want-limit]
//	                                         one ShouldRateLimit call, answer must be OK
//	benchtool extproc -addr ADDR -data JSON  one ext_proc stream, every message answered
//	                                         in kind, request headers with CONTINUE
//	benchtool gates -metrics URL -gate NAME  a gate's counters from throttlekit's /metrics
//	                                         → "admitted rejected cancelled ok error dropped"
//	benchtool summary FILE                   ghz's JSON report → "count rps p50 p99 errors"
//	benchtool answers FILE                   ghz's JSON report → every call: "count rps ok shed expired other p50 p99 max"
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
)

const usage = `usage:
  benchtool probe -grpc ADDR [-http URL] [-timeout D]
  benchtool check -addr ADDR -data JSON [-want-limit]
  benchtool extproc -addr ADDR -data JSON_ARRAY
  benchtool gates -metrics URL -gate NAME
  benchtool summary GHZ_JSON_FILE
  benchtool answers GHZ_JSON_FILE`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "probe":
		err = probeCmd(args)
	case "check":
		err = checkCmd(args)
	case "extproc":
		err = extprocCmd(args)
	case "gates":
		err = gatesCmd(args)
	case "summary":
		err = summaryCmd(args)
	case "answers":
		err = answersCmd(args)
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtool:", err)
		os.Exit(1)
	}
}

func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// probeCmd checks once that the server is ready: grpc.health.v1 says
// SERVING for the whole server and, with -http, the URL answers 200.
func probeCmd(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	addr := fs.String("grpc", "", "gRPC address (host:port)")
	url := fs.String("http", "", "readiness URL that must answer 200 (optional)")
	timeout := fs.Duration("timeout", time.Second, "bound on the whole check")
	fs.Parse(args)
	if *addr == "" {
		return errors.New("probe: -grpc is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	conn, err := dial(*addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("grpc health %s: %w", *addr, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("grpc health %s: %v", *addr, resp.GetStatus())
	}
	if *url == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return err
	}
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	hr.Body.Close()
	if hr.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", *url, hr.Status)
	}
	return nil
}

// checkCmd sends the benchmark's request once and requires an OK answer with
// one status per descriptor, so a misconfigured target fails before it is
// measured. With -want-limit every status must carry current_limit, which a
// server sets only when a rule of its policy matched the descriptor.
func checkCmd(args []string) error {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	addr := fs.String("addr", "", "gRPC address (host:port)")
	data := fs.String("data", "", "RateLimitRequest as JSON (ghz's --data)")
	wantLimit := fs.Bool("want-limit", false, "require current_limit in every status")
	fs.Parse(args)
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal([]byte(*data), &req); err != nil {
		return fmt.Errorf("check: -data: %w", err)
	}
	conn, err := dial(*addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &req)
	if err != nil {
		return fmt.Errorf("ShouldRateLimit: %w", err)
	}
	answer := protojson.MarshalOptions{}.Format(resp)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != len(req.GetDescriptors()) {
		return fmt.Errorf("want OK with %d statuses, got %s", len(req.GetDescriptors()), answer)
	}
	if *wantLimit {
		for _, st := range resp.GetStatuses() {
			if st.GetCurrentLimit() == nil {
				return fmt.Errorf("no current_limit in %s: the bench policy's rule did not match", answer)
			}
		}
	}
	return nil
}

// ghzReport is the part of ghz's JSON report (--format json) the bench reads.
type ghzReport struct {
	Count               uint64  `json:"count"`
	RPS                 float64 `json:"rps"`
	LatencyDistribution []struct {
		Percentage int           `json:"percentage"`
		Latency    time.Duration `json:"latency"` // nanoseconds
	} `json:"latencyDistribution"`
	StatusCodeDistribution map[string]uint64 `json:"statusCodeDistribution"`
	ErrorDistribution      map[string]uint64 `json:"errorDistribution"`
}

// summaryCmd prints one line, "count rps p50 p99 errors", latencies in
// milliseconds, and the error messages, if any, on stderr.
func summaryCmd(args []string) error {
	if len(args) != 1 {
		return errors.New(usage)
	}
	raw, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	var r ghzReport
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	if r.Count == 0 {
		return fmt.Errorf("%s: ghz made no request", args[0])
	}
	p := map[int]time.Duration{}
	for _, l := range r.LatencyDistribution {
		p[l.Percentage] = l.Latency
	}
	p50, ok50 := p[50]
	p99, ok99 := p[99]
	if !ok50 || !ok99 {
		return fmt.Errorf("%s: no p50/p99 in latencyDistribution (no successful call?)", args[0])
	}
	var errs uint64
	for code, n := range r.StatusCodeDistribution {
		if code != "OK" {
			errs += n
		}
	}
	msgs := make([]string, 0, len(r.ErrorDistribution))
	for m, n := range r.ErrorDistribution {
		msgs = append(msgs, fmt.Sprintf("%d× %s", n, m))
	}
	sort.Strings(msgs)
	if len(msgs) > 0 {
		fmt.Fprintln(os.Stderr, strings.Join(msgs, "\n"))
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fmt.Printf("%d %.0f %.3f %.3f %d\n", r.Count, r.RPS, ms(p50), ms(p99), errs)
	return nil
}
