package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"
)

// ghzDetails is the part of ghz's JSON report answersCmd reads: one entry
// per call, with its latency and status code.
type ghzDetails struct {
	RPS     float64 `json:"rps"`
	Details []struct {
		Latency time.Duration `json:"latency"` // nanoseconds
		Status  string        `json:"status"`
	} `json:"details"`
}

// answersCmd prints one line about every call of a ghz run, shed ones
// included: "count rps ok shed expired other p50 p99 max", latencies in
// milliseconds over all calls (ghz's own percentiles leave failed calls
// out, and a shed call is one). shed is RESOURCE_EXHAUSTED (the server had
// no room), expired DEADLINE_EXCEEDED (ghz's --timeout passed first).
func answersCmd(args []string) error {
	if len(args) != 1 {
		return errors.New(usage)
	}
	raw, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	var r ghzDetails
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	if len(r.Details) == 0 {
		return fmt.Errorf("%s: no per-call details (run ghz with --format json, without --skipFirst/--count-errors filters)", args[0])
	}
	lat := make([]time.Duration, 0, len(r.Details))
	var ok, shed, expired, other int
	for _, d := range r.Details {
		lat = append(lat, d.Latency)
		switch d.Status {
		case "OK":
			ok++
		case "ResourceExhausted":
			shed++
		case "DeadlineExceeded":
			expired++
		default:
			other++
		}
	}
	slices.Sort(lat)
	at := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) / float64(time.Millisecond)
	}
	fmt.Printf("%d %.0f %d %d %d %d %.3f %.3f %.3f\n", len(lat), r.RPS, ok, shed, expired, other, at(0.50), at(0.99), at(1))
	return nil
}
