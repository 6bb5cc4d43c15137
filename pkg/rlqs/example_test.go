package rlqs_test

import (
	"fmt"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/rlqs"
)

// A window of 10 s and a limit of 30: two Envoys subscribe 1 s into a
// window, their demand unknown (each predicted at L/8 per window, 0.375/s,
// over its 8 s TTL: 3), then report demands of 1 and 2 requests per
// second (the second one denied 6 of 10: it spent its 3, and is topped up
// with its demand over the 3 s of TTL left, a fresh bucket sent behind a
// DENY_ALL); at the next window the sidecar leases their predicted demand
// over the assignment's 9 s TTL (9 and 18) and assigns it, each to expire
// before the window ends less the Guard, in whole seconds. Each is told
// DENY_ALL two Guards before its assignment expires, to a second past the
// window's end (the next window's assignment replaces it): under Envoy's default
// no_assignment_behavior, ALLOW_ALL, an expired assignment admits without
// limit.
func Example() {
	m := rlqs.Machine{Limit: 30, Window: 10 * time.Second}
	var b rlqs.Bucket
	t0 := time.Unix(1_700_000_000, 0) // a window's start
	used := map[time.Time]int64{}     // the store: units leased per window
	// do carries out a's lease (the store answering at once) and prints
	// the assignments.
	var do func(now time.Time, a rlqs.Actions)
	do = func(now time.Time, a rlqs.Actions) {
		for _, x := range a.Assign {
			if x.Deny {
				fmt.Printf("%v: stream %d told DENY_ALL for %v\n", now.Sub(t0), x.Stream, x.TTL)
				continue
			}
			what := "gets"
			if x.Fresh {
				what = "is topped up with"
			}
			fmt.Printf("%v: stream %d %s %d tokens, 1 per %v, for %v\n", now.Sub(t0), x.Stream, what, x.MaxTokens, x.FillInterval, x.TTL)
		}
		if a.Return.Credits > 0 {
			used[a.Return.WindowEnd] -= a.Return.Credits
		}
		if a.Lease.ID != 0 {
			end := now.Truncate(m.Window).Add(m.Window)
			n := min(a.Lease.Max, m.Limit-used[end])
			used[end] += n
			do(now, m.Landed(&b, a.Lease.ID, now, now, gale.Grant{Granted: n, Now: now, WindowEnd: end}))
		}
	}
	for s := rlqs.StreamID(1); s <= 2; s++ {
		// Subscriptions: Envoy's immediate report of a first request,
		// allowed under its default no_assignment_behavior, ALLOW_ALL.
		a, _ := m.Report(&b, t0.Add(time.Second), s, 1, 0, 0)
		do(t0.Add(time.Second), a)
	}
	a, _ := m.Report(&b, t0.Add(6*time.Second), 1, 5, 0, 5*time.Second)
	do(t0.Add(6*time.Second), a)
	a, _ = m.Report(&b, t0.Add(6*time.Second), 2, 4, 6, 5*time.Second)
	do(t0.Add(6*time.Second), a)
	for range 2 {
		fmt.Println("tick at", a.Wake.Sub(t0))
		a = m.Tick(&b, a.Wake)
		do(b.Last, a)
	}
	// Output:
	// 1s: stream 1 gets 3 tokens, 1 per 20s, for 8s
	// 1s: stream 2 gets 3 tokens, 1 per 20s, for 8s
	// 6s: stream 2 is topped up with 6 tokens, 1 per 20s, for 3s
	// tick at 8.5s
	// 8.5s: stream 1 told DENY_ALL for 3s
	// 8.5s: stream 2 told DENY_ALL for 3s
	// tick at 10s
	// 10s: stream 1 gets 9 tokens, 1 per 20s, for 9s
	// 10s: stream 2 gets 18 tokens, 1 per 20s, for 9s
}
