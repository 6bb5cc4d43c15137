package sim

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// csvHeader names WriteCSV's columns.
const csvHeader = "t_s,capacity,offered_rps,arrived,limit,inflight,queued,p95_ms,admitted,rejected,timed_out,completed,good\n"

// csvExtended names the columns WriteCSV adds for a scenario with clients
// or a backend cap.
const csvExtended = ",errors,client_timeouts,retries,backend"

// WriteCSV writes res's rows, one per second, with a header line; a
// scenario with clients or a backend cap adds the columns csvExtended names.
// The same Result always gives the same bytes.
func WriteCSV(w io.Writer, res *Result) error {
	bw := bufio.NewWriter(w)
	if res.extended {
		bw.WriteString(strings.TrimSuffix(csvHeader, "\n") + csvExtended + "\n")
	} else {
		bw.WriteString(csvHeader)
	}
	var buf []byte
	for _, r := range res.Rows {
		buf = buf[:0]
		buf = strconv.AppendInt(buf, int64(r.T/time.Second), 10)
		buf = append(buf, ',')
		buf = strconv.AppendFloat(buf, r.Capacity, 'f', -1, 64)
		buf = append(buf, ',')
		buf = strconv.AppendFloat(buf, r.Offered, 'f', -1, 64)
		for _, n := range []int{r.Arrived, r.Limit, r.Inflight, r.Queued} {
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(n), 10)
		}
		buf = append(buf, ',')
		buf = strconv.AppendFloat(buf, ms(r.P95), 'f', 3, 64)
		for _, n := range []int{r.Admitted, r.Rejected, r.TimedOut, r.Completed, r.Good} {
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(n), 10)
		}
		if res.extended {
			for _, n := range []int{r.Errors, r.ClientTimeouts, r.Retries, r.Backend} {
				buf = append(buf, ',')
				buf = strconv.AppendInt(buf, int64(n), 10)
			}
		}
		buf = append(buf, '\n')
		bw.Write(buf)
	}
	return bw.Flush()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// WriteRows writes the kata's once-a-second lines of one run: time, limit,
// in flight, queued, p95 and the admitted and rejected counts of the second
// (rejected counts queue-full rejections and queue timeouts).
func WriteRows(w io.Writer, res *Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tt\tlimit\tinflight\tqueued\tp95\tadmitted\trejected\t\n", res.Controller)
	for _, r := range res.Rows {
		fmt.Fprintf(tw, "\t%ds\t%d\t%d\t%d\t%.1fms\t%d\t%d\t\n",
			r.T/time.Second, r.Limit, r.Inflight, r.Queued, ms(r.P95), r.Admitted, r.Rejected+r.TimedOut)
	}
	return tw.Flush()
}

// WriteSummary writes, for each phase of the scenario, one line per
// controller: its mean limit, service-latency percentiles, end-to-end p99,
// goodput and drops over the phase's converged window.
func WriteSummary(w io.Writer, sc *Scenario, results []*Result) error {
	bw := bufio.NewWriter(w)
	good := GoodFactor * sc.Backend.Base
	fmt.Fprintf(bw, "scenario %s (%s): %v, seed %d; phases judged after a %v settle\n", sc.Name, sc.File, sc.Duration, sc.Seed, sc.Settle)
	fmt.Fprintf(bw, "latency = service time at the backend; good = latency ≤ %v (%d× base %v); goodput%% is of min(offered, capacity)\n",
		good, GoodFactor, sc.Backend.Base)
	if len(results) == 0 {
		return bw.Flush()
	}
	for i, p := range results[0].Phases {
		offered := fmt.Sprintf("offered %.0f req/s", p.Offered)
		if c := sc.Clients; c != nil {
			// A closed loop's phases end with its work, so they may differ
			// by controller; the first controller's are printed.
			offered = fmt.Sprintf("closed loop, %d clients", c.Count)
		}
		round := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) } // a closed loop ends mid-second
		fmt.Fprintf(bw, "\nphase %v–%v (judged from %v): capacity ×%.3g = %.0f req/s, %s\n",
			round(p.Start), round(p.End), round(p.From), p.CapacityFactor, p.Capacity, offered)
		tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "controller\tlimit\tinflight\tp50\tp99\tp99 e2e\tgoodput\tgoodput%\tdropped\tverdict\tp99 settling\t")
		for _, res := range results {
			if i >= len(res.Phases) {
				continue
			}
			q := res.Phases[i]
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1fms\t%.1fms\t%.1fms\t%.0f/s\t%.1f%%\t%d\t%s\t%.0fms\t\n",
				res.Controller, q.MeanLimit, q.MeanInflight, ms(q.P50), ms(q.P99), ms(q.P99EndToEnd),
				q.Goodput, q.GoodputPct, q.Dropped, verdict(sc, q), ms(q.SettleP99))
		}
		tw.Flush()
	}
	fmt.Fprint(bw, "\nlimit changes over the run:")
	for _, res := range results {
		fmt.Fprintf(bw, " %s %d", res.Controller, res.LimitChanges)
	}
	fmt.Fprintln(bw)
	if sc.extended() {
		fmt.Fprintln(bw)
		if err := writeStats(bw, sc, results); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WriteStats writes one line per controller of the whole run's Stats: when
// the work was done, how the attempts ended, the time-weighted levels and
// the latency. WriteSummary ends with it for a scenario with clients or a
// backend cap.
func WriteStats(w io.Writer, sc *Scenario, results []*Result) error {
	bw := bufio.NewWriter(w)
	if err := writeStats(bw, sc, results); err != nil {
		return err
	}
	return bw.Flush()
}

func writeStats(w io.Writer, sc *Scenario, results []*Result) error {
	_, peak := sc.Backend.peak(1)
	fmt.Fprintf(w, "whole run: in flight, limit and backend time-weighted (settled: in flight from %v on); latency/base: mean OK service latency over %v; peak throughput %.0f req/s\n",
		sc.Settle, sc.Backend.Base, peak)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "controller\tend\tdelivered\tfailed\tok\terrors\ttimeouts\trejected\tretries\tinflight\tmax\tsettled\tlimit\tmax\tbackend\tlatency/base\tp50\tp99\tp99 e2e\tthroughput\t")
	for _, res := range results {
		st := res.Stats
		end := st.End.Round(time.Millisecond).String()
		if sc.Clients != nil && sc.Clients.Requests > 0 && !st.Finished {
			end = "unfinished"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%d\t%.1f\t%.1f\t%d\t%.1f\t%.2f\t%.1fms\t%.1fms\t%.1fms\t%.0f/s\t\n",
			res.Controller, end, st.Delivered, st.Failed, st.OK, st.Errors, st.Timeouts, st.Rejected, st.Retries,
			st.MeanInflight, st.MaxInflight, st.Settled.MeanInflight, st.MeanLimit, st.MaxLimit, st.MeanBackend, st.LatencyRatio,
			ms(st.P50), ms(st.P99), ms(st.P99EndToEnd), st.Throughput)
	}
	return tw.Flush()
}

// MeetsBounds reports whether phase p keeps p99 latency within
// GoodFactor × Base and goodput at ≥ 90% of its target: the bar the
// capacity-drop test holds every adaptive controller to.
func MeetsBounds(sc *Scenario, p Phase) (p99OK, goodputOK bool) {
	return p.P99 <= GoodFactor*sc.Backend.Base, p.GoodputPct >= 90
}

func verdict(sc *Scenario, p Phase) string {
	lat, gp := MeetsBounds(sc, p)
	switch {
	case lat && gp:
		return "ok"
	case !lat && !gp:
		return "p99+goodput"
	case !lat:
		return "p99"
	}
	return "goodput"
}
